"""Seed 000 §6 asset signals on ``jido.sig.>``: ``project.assets_loaded`` and the watcher's ``assets.changed``."""

from __future__ import annotations

from pathlib import Path

from watchfiles import Change

from jidocode.services.asset_loader.service import AssetService
from jidocode.shared.bus import Bus
from jidocode.shared.clients import AssetsClient, EngineClient
from jidocode.shared.config import Config
from jidocode.shared.envelope import now_iso
from jidocode.shared.events.assets import MAX_CHANGES_PER_SIGNAL
from jidocode.shared.events.engine import ProjectInfo
from jidocode.shared.registry import ProjectDirectory
from tests.integration.signals._support import SignalLog

SKILL = "---\nname: {name}\ndescription: says {name}\n---\n# {name}\n"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


async def test_loaded_on_start_then_changed_and_loaded_again_on_a_file_change(
    running: Config, bus: Bus, tmp_path: Path
) -> None:
    root = tmp_path / "proj"
    _write(root / ".jido" / "skills" / "one" / "SKILL.md", SKILL.format(name="one"))
    _write(root / ".jido" / "commands" / "fix.md", "Fix {{file}}")
    _write(root / ".jido" / "skills" / "broken" / "SKILL.md", "---\nname: broken\nname: again\n---\n")
    log = await SignalLog.follow(bus)
    pid = (await EngineClient(bus).start_project(str(root))).project_id

    def of_project(env: object) -> bool:
        return getattr(env, "project_id", None) == pid

    loaded = await log.wait("project.assets_loaded", of_project)
    assert loaded.nats_subject == "jido.sig.project.assets_loaded"
    assert (loaded.data["trigger"], loaded.data["generation"]) == ("load", 1)
    assert loaded.data["counts"] == {"skill": 1, "command": 1, "workflow": 0, "graph_node": 0}
    assert loaded.data["diagnostics"] >= 1  # the broken skill
    assert loaded.data["duration_ms"] >= 0
    # the detailed signal of the same generation follows, with the diagnostics themselves
    reloaded = await log.wait("project.assets_reloaded", of_project)
    assert (
        reloaded.data["generation"] == 1 and len(reloaded.data["diagnostics"]) == loaded.data["diagnostics"]
    )

    # a request waits for the project's load to end, its watcher armed
    assert [s["name"] for s in (await AssetsClient(bus, pid).list("skill")).items] == ["one"]
    new_skill = root / ".jido" / "skills" / "two" / "SKILL.md"
    _write(new_skill, SKILL.format(name="two"))
    # inotify may report the new folder alone (the file was written before the folder was watched)
    folder = str(new_skill.parent)

    def names_it(change: dict[str, str]) -> bool:
        return change["path"] in (folder, str(new_skill))

    changed = await log.wait(
        "assets.changed", lambda e: of_project(e) and any(map(names_it, e.data["changes"]))
    )
    assert changed.nats_subject == "jido.sig.assets.changed"
    change = next(c for c in changed.data["changes"] if names_it(c))
    assert (change["change"], change["layer"], change["kind"]) == ("added", "project", "skill")
    assert "skill" in changed.data["kinds"] and changed.data["count"] >= 1
    again = await log.wait(
        "project.assets_loaded", lambda e: of_project(e) and e.data["counts"]["skill"] == 2
    )
    assert again.data["trigger"] == "watch" and again.data["generation"] > 1
    assert log.seen.index(changed) < log.seen.index(again)


async def test_a_large_burst_names_at_most_the_limit_and_counts_all(
    bus: Bus, config: Config, tmp_path: Path
) -> None:
    root = tmp_path / "big"
    root.mkdir()
    info = ProjectInfo(project_id="big1", root_path=str(root), started_at=now_iso())
    service = AssetService(bus, config, await ProjectDirectory.open(bus))
    log = await SignalLog.follow(bus)
    try:
        pa = await service.project("big1", info)
        skills = root / ".jido" / "skills"
        burst = {(Change.added, f"{skills}/s{i:03d}.md") for i in range(MAX_CHANGES_PER_SIGNAL + 30)}
        burst.add((Change.modified, f"{root}/.jido/state/ignored.json"))
        await service._changed(pa, burst)
        changed = await log.wait("assets.changed", lambda e: e.project_id == "big1")
    finally:
        await service.close()
    assert changed.data["count"] == MAX_CHANGES_PER_SIGNAL + 30
    assert len(changed.data["changes"]) == MAX_CHANGES_PER_SIGNAL
    assert changed.data["changes"][0]["path"] == f"{skills}/s000.md"
    assert changed.data["kinds"] == ["skill"]
