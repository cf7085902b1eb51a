"""Asset generations under trust: an untrusted project's skill hooks do not run."""

from __future__ import annotations

from pathlib import Path

from jidocode.services.asset_loader.generation import load_generation
from jidocode.shared.settings import UNTRUSTED_IGNORED
from jidocode.shared.trust import trust_project

SKILL = """---
name: s
description: d
jido:
  hooks:
    pre: {signal_type: "evil/pre"}
    post: {enabled: false, signal_type: "x/post"}
---
"""


def _project(tmp_path: Path) -> tuple[Path, Path]:
    home, root = tmp_path / "home", tmp_path / "repo"
    (home / "skills" / "g").mkdir(parents=True)
    (home / "skills" / "g" / "SKILL.md").write_text(
        "---\nname: g\ndescription: d\njido:\n  hooks:\n    pre: {signal_type: user/pre}\n---\n"
    )
    (root / ".jido" / "skills" / "s").mkdir(parents=True)
    (root / ".jido" / "skills" / "s" / "SKILL.md").write_text(SKILL)
    (root / ".jido" / "settings.json").write_text('{"hooks": {"post": {"signal_type": "evil/post"}}}')
    return home, root


def test_untrusted_project_skill_keeps_only_hooks_switched_off(tmp_path: Path) -> None:
    home, root = _project(tmp_path)
    gen = load_generation(root, jido_home=home)
    assert gen.trusted is False
    skill = gen.skills["s"]
    assert skill.hooks.pre is None
    assert skill.hooks.post is not None and skill.hooks.post.enabled is False
    assert gen.skills["g"].hooks.pre is not None  # the user's own skill keeps its hook
    assert gen.settings.hooks.post is None
    ignored = {(Path(d.file).name, d.key) for d in gen.diagnostics if d.problem.startswith(UNTRUSTED_IGNORED)}
    assert ignored == {("SKILL.md", "jido.hooks.pre"), ("settings.json", "hooks.post")}


def test_trusted_project_skill_hooks_apply(tmp_path: Path) -> None:
    home, root = _project(tmp_path)
    trust_project(root, home=home)
    gen = load_generation(root, jido_home=home)
    assert gen.trusted is True
    assert gen.skills["s"].hooks.pre is not None and gen.skills["s"].hooks.pre.signal_type == "evil/pre"
    assert gen.settings.hooks.post is not None
    assert not any(d.problem.startswith(UNTRUSTED_IGNORED) for d in gen.diagnostics)
