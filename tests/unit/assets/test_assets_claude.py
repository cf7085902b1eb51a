"""Claude Code's ``.claude/`` beside ``.jido/``: what is read, what wins, what is watched, what
is refused (decision 0313). Pure parts on real files; the services are in
``tests/integration/assets/test_claude_conventions.py``."""

from __future__ import annotations

from pathlib import Path

from watchfiles import Change

from jidocode.services.asset_loader.generation import load_generation
from jidocode.services.asset_loader.layout import layers
from jidocode.services.asset_loader.loaders.command import parse_command
from jidocode.services.asset_loader.watcher import LAYER_FOLDER, asset_changes, classify
from jidocode.services.conversation.llm.prompt import read_instructions
from jidocode.services.conversation.subagents.core import child_tools
from jidocode.services.conversation.subagents.templates import load_templates
from jidocode.shared.trust import trust_project

HOOKED_SKILL = """---
name: release
description: Cut a release.
jido:
  hooks:
    pre: {signal_type: "skill/release/pre"}
---
Release steps.
"""


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_the_claude_folder_gives_skills_and_commands_only(tmp_path: Path) -> None:
    home, root = tmp_path / "home", tmp_path / "proj"
    home.mkdir()
    claude = root / ".claude"
    _write(claude / "commands" / "review.md", "---\ndescription: Review\n---\nReview $ARGUMENTS")
    _write(
        claude / "skills" / "changelog" / "SKILL.md", "---\nname: changelog\ndescription: Notes\n---\nBody"
    )
    _write(claude / "workflows" / "ship.yaml", "steps:\n  - {tool: bash, args: {command: 'true'}}\n")
    _write(claude / "skill_graph" / "note.md", "# Note")
    _write(claude / "JIDO.md", "not a JidoCode layer's memory")
    _write(claude / "agents" / "reviewer.md", "---\nname: reviewer\n---\nYou review.")
    gen = load_generation(root, jido_home=home)
    assert list(gen.commands) == ["review"] and list(gen.skills) == ["changelog"]
    assert gen.commands["review"].layer == "project" and gen.skills["changelog"].layer == "project"
    assert gen.workflows == {} and gen.graph.nodes == {} and gen.memory == []
    assert gen.diagnostics == []


def test_jido_wins_a_clash_and_the_loser_is_named(tmp_path: Path) -> None:
    home, root = tmp_path / "home", tmp_path / "proj"
    home.mkdir()
    _write(root / ".claude" / "skills" / "lint" / "SKILL.md", "---\nname: lint\ndescription: claude\n---\n")
    _write(root / ".jido" / "skills" / "lint" / "SKILL.md", "---\nname: lint\ndescription: jido\n---\n")
    _write(root / ".claude" / "commands" / "only-claude.md", "From Claude")
    gen = load_generation(root, jido_home=home)
    assert gen.skills["lint"].description == "jido"
    assert list(gen.commands) == ["only-claude"]
    [clash] = gen.diagnostics
    assert clash.file == str(root / ".claude" / "skills" / "lint" / "SKILL.md")
    assert clash.severity == "warning"
    assert clash.problem == (
        f"skill 'lint' is also defined by {root / '.jido' / 'skills' / 'lint' / 'SKILL.md'}, "
        "which wins (.jido over .claude): this one is not used"
    )


def test_an_untrusted_projects_claude_skill_loses_its_hooks_like_a_jido_one(tmp_path: Path) -> None:
    home, root = tmp_path / "home", tmp_path / "proj"
    home.mkdir()
    _write(root / ".claude" / "skills" / "release" / "SKILL.md", HOOKED_SKILL)
    untrusted = load_generation(root, jido_home=home)
    assert untrusted.trusted is False and untrusted.skills["release"].hooks.pre is None
    assert any(d.key == "jido.hooks.pre" and "trust" in d.problem for d in untrusted.diagnostics)
    trust_project(root, home=home)
    trusted = load_generation(root, jido_home=home)
    assert trusted.skills["release"].hooks.pre is not None


def test_a_claude_folder_linked_out_of_the_root_is_not_read(tmp_path: Path) -> None:
    home, root, outside = tmp_path / "home", tmp_path / "proj", tmp_path / "outside"
    home.mkdir()
    root.mkdir()
    _write(outside / "commands" / "secret.md", "private")
    (root / ".claude").symlink_to(outside)
    gen = load_generation(root, jido_home=home)
    assert gen.commands == {}
    assert [d.problem for d in gen.diagnostics] == [
        f"resolves outside the project root (to {outside}), not read"
    ]


def test_a_link_inside_the_root_is_still_a_layer(tmp_path: Path) -> None:
    home, root = tmp_path / "home", tmp_path / "proj"
    home.mkdir()
    _write(root / "tooling" / "claude" / "commands" / "hi.md", "Hi")
    (root / ".claude").symlink_to(root / "tooling" / "claude")
    assert list(load_generation(root, jido_home=home).commands) == ["hi"]


def test_argument_hint_is_a_string_as_written() -> None:
    text = b"---\nargument-hint: [pr-number] [priority]\nallowed-tools: Bash(gh pr view:*)\n---\nFix #$1"
    command, diags = parse_command(text, path="/p/.claude/commands/fix.md", stem="fix", layer="project")
    assert diags == [] and command is not None
    assert (command.argument_hint, command.allowed_tools) == (
        "[pr-number] [priority]",
        ["Bash(gh pr view:*)"],
    )
    quoted, _ = parse_command(b"---\nargument-hint: '[a]'\n---\nx", path="/x.md", stem="x", layer="global")
    assert quoted is not None and quoted.argument_hint == "[a]"


def test_the_watcher_knows_claude_files_and_the_roots_instructions(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    found = layers(root, jido_home=tmp_path / "home")
    kinds = {
        f"{root}/CLAUDE.md": "instructions",
        f"{root}/AGENTS.md": "instructions",
        f"{root}/JIDO.md": "instructions",
        f"{root}/.claude/CLAUDE.md": "instructions",
        f"{root}/.claude/commands/review.md": "command",
        f"{root}/.claude/skills/a/SKILL.md": "skill",
        f"{root}/.claude/agents/reviewer.md": "agent",
        f"{root}/.jido/skills/a/SKILL.md": "skill",
    }
    for path, kind in kinds.items():
        hit = classify(Change.modified, path, found)
        assert hit is not None and hit[1] == kind, path
    for path in (
        f"{root}/.claude/settings.json",  # Claude Code's settings are not JidoCode's
        f"{root}/.claude/settings.local.json",
        f"{root}/.claude/workflows/x.yaml",
        f"{root}/src/CLAUDE.md",  # only the root's own
        f"{root}/README.md",
        f"{root}/.jido/state/x.json",
    ):
        assert classify(Change.modified, path, found) is None, path
    # a layer folder appearing in the root is seen (to watch it), but names no asset file
    assert classify(Change.added, f"{root}/.claude", found) == (found[1], LAYER_FOLDER)
    assert asset_changes({(Change.added, f"{root}/.claude")}, found) == []
    [change] = asset_changes({(Change.modified, f"{root}/CLAUDE.md")}, found)
    assert (change.kind, change.layer, change.path) == ("instructions", "project", f"{root}/CLAUDE.md")


def test_claude_agents_load_below_jido_ones_and_a_linked_file_is_refused(tmp_path: Path) -> None:
    home, root = tmp_path / "home", tmp_path / "proj"
    home.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("a private key")
    claude, jido = root / ".claude" / "agents", root / ".jido" / "agents"
    _write(claude / "reviewer.md", "---\ndescription: from claude\ntools: Read, Grep, WebFetch\n---\nReview.")
    _write(claude / "helper.md", "---\ndescription: only in claude\n---\nHelp.")
    _write(jido / "reviewer.md", "---\ndescription: from jido\n---\nReview (jido).")
    (claude / "leak.md").symlink_to(secret)
    found = load_templates(root, home=home, trusted=True)
    reviewer, helper = found.get("reviewer"), found.get("helper")
    assert reviewer is not None and reviewer.description == "from jido"
    assert helper is not None and helper.layer == "project" and helper.path == str(claude / "helper.md")
    assert found.get("leak") is None
    problems = {p.path: p.problem for p in found.problems}
    assert problems[str(claude / "reviewer.md")] == (
        f"agent 'reviewer' is also defined by {jido / 'reviewer.md'}, which wins (.jido over .claude): "
        "this one is not used"
    )
    assert "symbolic link" in problems[str(claude / "leak.md")]


def test_claude_tool_names_narrow_a_child_to_our_tools() -> None:
    parent = ["read_file", "grep", "glob", "bash", "edit_file", "task"]
    assert child_tools(["Read", "Grep", "WebFetch"], parent) == ["read_file", "grep"]
    assert child_tools(["Edit", "Bash"], ["read_file"]) == []  # never more than the parent
    assert child_tools(["glob"], parent) == ["glob"]


def test_claude_md_in_the_claude_folder_is_an_instruction_and_a_link_out_is_not(tmp_path: Path) -> None:
    root, home = tmp_path / "proj", tmp_path / "home"
    _write(root / ".claude" / "CLAUDE.md", "Use pnpm.")
    got = read_instructions(root, jido_home=home)
    assert [(i.source, i.text) for i in got] == [("the project's .claude/CLAUDE.md", "Use pnpm.")]
    (root / ".claude" / "CLAUDE.md").unlink()
    outside = tmp_path / "notes.md"
    outside.write_text("private notes")
    (root / ".claude" / "CLAUDE.md").symlink_to(outside)
    assert read_instructions(root, jido_home=home) == ()
