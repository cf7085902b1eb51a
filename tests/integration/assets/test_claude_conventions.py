"""Claude Code's conventions through the real services: ``.claude/commands``, ``.claude/skills``
and ``.claude/agents`` beside ``.jido/`` (``.jido`` wins a clash, and says so), and instructions
files (``CLAUDE.md``…) edited on disk reach the next conversation, through the asset loader's
watcher (decision 0313). Waits are on bus signals and recorded model requests, never sleeps.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jidocode.cli.dev.scripted_llm import Reply, ScriptedLlm
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.clients import AssetsClient, ConversationsClient, EngineClient
from jidocode.shared.config import Config
from jidocode.shared.envelope import Envelope
from tests.integration.assets.signals import Signals

#: Bound of every wait (a loaded machine); the waits end as soon as the event is there.
WAIT = 60.0

CLAUDE_COMMAND = """---
description: Review the staged change
argument-hint: [file]
allowed-tools: Bash(git diff:*), Bash(git status:*)
model: claude-3-5-haiku-20241022
disable-model-invocation: true
---
Review the change to $ARGUMENTS. Current status: !`git status`
"""

CLAUDE_SKILL = """---
name: changelog
description: Write changelog entries in this project's style.
allowed-tools: Read, Grep
license: MIT
---
# Changelog

Keep entries short.
"""


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _reloaded(pid: str, trigger: str | None = None) -> Callable[[Envelope], bool]:
    def match(env: Envelope) -> bool:
        data = env.data or {}
        return (
            env.type == "project.assets_reloaded"
            and data.get("project_id") == pid
            and (trigger is None or data.get("trigger") == trigger)
        )

    return match


async def _cli(config: Config, *args: str) -> tuple[int, str, str]:
    """``jidocode <args>`` as a user runs it, against the test's services (wide: no wrapped paths)."""
    env = {
        **os.environ,
        "NATS_URL": config.nats_url,
        "JIDO_CODE_HOME": str(config.jido_home),
        "COLUMNS": "500",
    }
    exe = Path(sys.executable).parent / "jidocode"
    proc = await asyncio.create_subprocess_exec(
        str(exe), *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), WAIT)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def _system_prompt(request: dict[str, Any]) -> str:
    messages = request.get("messages") or []
    return next(str(m.get("content")) for m in messages if m.get("role") == "system")


async def _watch(bus: Bus) -> Signals:
    signals = Signals()
    await bus.subscribe(subjects.signal_filter(), signals)
    await bus.nc.flush()
    return signals


async def test_claude_assets_load_beside_jido_and_jido_wins_a_clash(
    running: Config, bus: Bus, tmp_path: Path
) -> None:
    root = tmp_path / "proj"
    _write(root / ".claude" / "commands" / "review.md", CLAUDE_COMMAND)
    _write(root / ".claude" / "commands" / "deploy.md", "---\ndescription: from claude\n---\nDeploy (claude)")
    _write(root / ".claude" / "skills" / "changelog" / "SKILL.md", CLAUDE_SKILL)
    _write(root / ".claude" / "settings.json", json.dumps({"permissions": {"allow": ["Bash"]}}))
    _write(root / ".jido" / "commands" / "deploy.md", "---\ndescription: from jido\n---\nDeploy (jido)")
    signals = await _watch(bus)

    pid = (await EngineClient(bus).start_project(str(root), timeout=30)).project_id
    await signals.wait(_reloaded(pid), WAIT)
    assets = AssetsClient(bus, pid, timeout=30)

    listing = {(a["type"], a["name"]): a for a in (await assets.list()).items}
    assert set(listing) == {("command", "review"), ("command", "deploy"), ("skill", "changelog")}
    assert listing[("command", "deploy")]["description"] == "from jido"
    assert listing[("command", "deploy")]["path"] == str(root / ".jido" / "commands" / "deploy.md")
    review = (await assets.get("command", "review")).asset
    assert review["layer"] == "project" and review["argument_hint"] == "[file]"
    assert review["allowed_tools"] == ["Bash(git diff:*)", "Bash(git status:*)"]
    assert review["extra"] == {"disable-model-invocation": True}  # kept, not interpreted
    skill = (await assets.get("skill", "changelog")).asset
    assert skill["allowed_tools"] == ["Read", "Grep"] and skill["body"].startswith("# Changelog")

    clash = [d for d in (await assets.diagnostics()).diagnostics if "which wins" in d["problem"]]
    jido_deploy = root / ".jido" / "commands" / "deploy.md"
    assert [(d["file"], d["key"], d["severity"], d["problem"]) for d in clash] == [
        (
            str(root / ".claude" / "commands" / "deploy.md"),
            "name",
            "warning",
            f"command 'deploy' is also defined by {jido_deploy}, which wins (.jido over .claude): "
            "this one is not used",
        )
    ]
    # Claude Code's settings.json is not JidoCode's: it grants nothing here
    report = await assets.diagnostics()
    assert str(root / ".claude" / "settings.json") not in report.settings_files

    # the real CLI lists them, the clash on stderr
    code, out, err = await _cli(running, "assets", "list", str(root))
    assert code == 0, err
    assert "review" in out and "changelog" in out and "Review the staged change" in out
    assert (
        "which wins (.jido over .claude)" in err and str(root / ".claude" / "commands" / "deploy.md") in err
    )


async def test_a_claude_folder_made_after_the_project_started_is_watched(
    running: Config, bus: Bus, tmp_path: Path
) -> None:
    root = tmp_path / "late"
    root.mkdir()
    signals = await _watch(bus)
    pid = (await EngineClient(bus).start_project(str(root), timeout=30)).project_id
    await signals.wait(_reloaded(pid), WAIT)
    assets = AssetsClient(bus, pid, timeout=30)
    assert (await assets.list("command")).items == []

    # made while the project runs: seen by the root's watch, the new layer is watched, then read
    _write(root / ".claude" / "commands" / "fix-issue.md", "Fix issue $1")
    layered = await signals.wait(_reloaded(pid, "layers"), WAIT)
    assert layered.data is not None and layered.data["counts"]["command"] == 1
    assert [c["name"] for c in (await assets.list("command")).items] == ["fix-issue"]

    _write(root / ".claude" / "commands" / "fix-issue.md", "---\ndescription: edited\n---\nFix $1")
    changed = await signals.wait(
        lambda e: (
            e.type == "assets.changed"
            and any(c["path"].endswith("fix-issue.md") for c in (e.data or {}).get("changes", []))
        ),
        WAIT,
    )
    assert changed.data is not None and changed.data["kinds"] == ["command"]
    seen_at = next(i for i, e in enumerate(signals.seen) if e is changed)
    await signals.wait(  # the reload that burst triggers
        lambda e: _reloaded(pid, "watch")(e) and any(e is later for later in signals.seen[seen_at + 1 :]),
        WAIT,
    )
    assert [c["description"] for c in (await assets.list("command")).items] == ["edited"]


async def test_a_claude_folder_linked_out_of_the_project_is_not_read(
    running: Config, bus: Bus, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    _write(outside / "commands" / "secret.md", "the user's private notes")
    root = tmp_path / "linked"
    root.mkdir()
    (root / ".claude").symlink_to(outside)
    signals = await _watch(bus)
    pid = (await EngineClient(bus).start_project(str(root), timeout=30)).project_id
    await signals.wait(_reloaded(pid), WAIT)
    assets = AssetsClient(bus, pid, timeout=30)
    assert (await assets.list("command")).items == []
    problems = [d["problem"] for d in (await assets.diagnostics()).diagnostics]
    assert any("resolves outside the project root" in p for p in problems), problems


async def test_an_edited_claude_md_reaches_the_next_conversation(
    services: Config,
    bus: Bus,
    tmp_path: Path,
    scripted_llm: ScriptedLlm,
    scripted_llm_settings: dict[str, Any],
) -> None:
    root = tmp_path / "conv"
    _write(root / "CLAUDE.md", "Old rule: indent with tabs.")
    _write(root / ".claude" / "commands" / "review.md", CLAUDE_COMMAND)
    signals = await _watch(bus)
    pid = (await EngineClient(bus).start_project(str(root), timeout=30)).project_id
    await signals.wait(_reloaded(pid), WAIT)
    scripted_llm.script(Reply.answer("first"), Reply.answer("second"))
    conversations = ConversationsClient(bus, pid, timeout=30)

    await conversations.start("c1", settings=scripted_llm_settings)
    await conversations.send_event("c1", "conversation.user.message", {"text": "hello"})
    first = _system_prompt((await scripted_llm.wait_requests(1, timeout=WAIT))[0])
    assert "Old rule: indent with tabs." in first
    assert "- review: Review the staged change" in first  # a .claude command in the index

    _write(root / "CLAUDE.md", "New rule: indent with four spaces.")
    await signals.wait(
        lambda e: (
            e.type == "assets.changed"
            and any(
                c["path"] == str(root / "CLAUDE.md") and c["kind"] == "instructions"
                for c in (e.data or {}).get("changes", [])
            )
        ),
        WAIT,
    )
    await conversations.start("c2", settings=scripted_llm_settings)
    await conversations.send_event("c2", "conversation.user.message", {"text": "hello again"})
    second = _system_prompt((await scripted_llm.wait_requests(2, timeout=WAIT))[1])
    assert "New rule: indent with four spaces." in second
    assert "Old rule" not in second
