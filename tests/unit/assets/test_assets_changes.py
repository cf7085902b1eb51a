"""What a watcher burst changed, as the ``assets.changed`` signal names it (path, layer, kind)."""

from __future__ import annotations

from pathlib import Path

from watchfiles import Change

from jidocode.services.asset_loader.layout import Layer
from jidocode.services.asset_loader.watcher import asset_changes


def test_each_asset_file_gets_its_layer_and_kind(tmp_path: Path) -> None:
    home, data = tmp_path / "home", tmp_path / "root" / ".jido"
    layers = [Layer(name="global", path=home), Layer(name="project", path=data)]
    burst = {
        (Change.added, f"{data}/skills/review/SKILL.md"),
        (Change.modified, f"{data}/commands/fix.md"),
        (Change.deleted, f"{data}/workflows/ship.yaml"),
        (Change.modified, f"{data}/skill_graph/git.md"),
        (Change.modified, f"{data}/settings.json"),
        (Change.modified, f"{home}/JIDO.md"),
        (Change.modified, f"{home}/trusted_projects.json"),
        # not asset files: the state dir, a stray file, a path under no layer
        (Change.modified, f"{data}/state/x.json"),
        (Change.added, f"{data}/notes.txt"),
        (Change.added, f"{tmp_path}/elsewhere/skills/a.md"),
    }
    found = asset_changes(burst, layers)
    assert [(c.change, c.path, c.layer, c.kind) for c in found] == [
        ("modified", f"{home}/JIDO.md", "global", "instructions"),
        ("modified", f"{home}/trusted_projects.json", "global", "trust"),
        ("modified", f"{data}/commands/fix.md", "project", "command"),
        ("modified", f"{data}/settings.json", "project", "settings"),
        ("modified", f"{data}/skill_graph/git.md", "project", "skill_graph"),
        ("added", f"{data}/skills/review/SKILL.md", "project", "skill"),
        ("deleted", f"{data}/workflows/ship.yaml", "project", "workflow"),
    ]


def test_a_path_reported_through_a_symlinked_layer_is_matched(tmp_path: Path) -> None:
    real = tmp_path / "real"
    (real / "skills").mkdir(parents=True)
    link = tmp_path / "link"
    link.symlink_to(real)
    layer = Layer(name="project", path=link)
    burst = {(Change.added, f"{real}/skills/a.md"), (Change.modified, f"{link}/skills/a.md")}
    found = asset_changes(burst, [layer])
    assert [(c.change, c.path, c.kind) for c in found] == [
        ("modified", f"{link}/skills/a.md", "skill"),
        ("added", f"{real}/skills/a.md", "skill"),
    ]


def test_one_file_added_and_modified_in_a_burst_is_named_per_change(tmp_path: Path) -> None:
    layer = Layer(name="project", path=tmp_path)
    path = f"{tmp_path}/skills/a/SKILL.md"
    found = asset_changes({(Change.modified, path), (Change.added, path)}, [layer])
    assert [c.change for c in found] == ["added", "modified"]
    assert asset_changes(set(), [layer]) == []
