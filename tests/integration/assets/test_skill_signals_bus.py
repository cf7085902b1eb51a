"""Seed 001's pdf-processor skill over a real NATS server: a signal whose type is a route runs
the action's script through the tool runner (policy, sandbox) and its outcome comes back as a signal."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.clients import EngineClient
from jidocode.shared.config import Config
from jidocode.shared.envelope import Envelope, new_id, now_iso
from tests.integration.assets.signals import Signals
from tests.unit.assets.test_assets_skill_signals import FIXTURE, make_pdf

ALLOWED = ["Read", "Write", "invoke_skill", "Bash(python3:*)"]


def _project(root: Path, allow: list[str]) -> Path:
    data = root / ".jido"
    data.mkdir(parents=True)
    (data / "settings.json").write_text(json.dumps({"permissions": {"allow": allow}}))
    shutil.copytree(FIXTURE, data / "skills" / "pdf-processor")
    (root / "doc.pdf").write_bytes(make_pdf(["Quarterly report", "region | sales", "north | 12"]))
    (root / "form.pdf").write_bytes(make_pdf(["Form"], {"name": None}))
    return root


async def _send(bus: Bus, pid: str, route: str, data: object, **ext: str) -> str:
    env = Envelope(
        id=new_id(),
        source="/tests/skill-signals",
        type=route,
        data=data,
        time=now_iso(),
        extensions={"projectid": pid, **ext},
    )
    await bus.publish_envelope(subjects.assets(pid, "signal"), env)
    return env.id


async def test_a_routed_signal_runs_the_seed_skill(running: Config, bus: Bus, tmp_path: Path) -> None:
    signals, hooks = Signals(), Signals()
    await bus.subscribe(subjects.signal_filter(), signals)
    await bus.subscribe(subjects.hook_filter(), hooks)
    await bus.nc.flush()
    root = _project(tmp_path / "proj", ALLOWED)
    pid = (await EngineClient(bus).start_project(str(root))).project_id
    await signals.wait(lambda e: e.type == "skill/registry/updated" and "pdf-processor" in e.data["skills"])

    def outcome(sid: str):  # type: ignore[no-untyped-def]
        return lambda e: e.type.startswith("skill.route.") and e.data["signal_id"] == sid

    sid = await _send(bus, pid, "pdf/extract/text", {"path": "doc.pdf"}, correlationid="corr-1")
    done = await signals.wait(outcome(sid), timeout=90)
    assert done.type == "skill.route.completed", done.data
    assert done.data["skill"] == "pdf-processor" and done.data["route"] == "pdf/extract/text"
    assert done.data["data"]["result"] == {
        "path": "doc.pdf",
        "text": "Quarterly report\nregion | sales\nnorth | 12",
    }
    assert done.causation_id == sid and done.correlation_id == "corr-1" and done.project_id == pid
    # the seed's frontmatter hooks around the dispatch
    pre = await hooks.wait(lambda e: e.type == "skill/pdf_processor/pre")
    post = await hooks.wait(lambda e: e.type == "skill/pdf_processor/post")
    assert pre.data["route"] == "pdf/extract/text" and post.data["status"] == "ok"
    # it ran as a tool call of the tool runner: bash, python3 and the skill's script
    step_id = f"signal-{sid}/skill/pdf-processor/pdf/extract/text"
    ran = await signals.wait(lambda e: e.type == "tool.completed" and e.data["request_id"] == step_id)
    assert ran.data["name"] == "bash" and ran.data["project_id"] == pid
    asked = await signals.wait(
        lambda e: e.type == "tool.completed" and e.data["request_id"] == f"signal-{sid}"
    )
    assert asked.data["name"] == "invoke_skill"  # the signal took the invoke_skill tool's path

    sid = await _send(bus, pid, "pdf/extract/tables", {"path": "doc.pdf"})
    tables = await signals.wait(outcome(sid), timeout=90)
    assert tables.data["data"]["result"]["rows"] == [["region", "sales"], ["north", "12"]]

    sid = await _send(
        bus, pid, "pdf/form/fill", {"path": "form.pdf", "fields": {"name": "Ada"}, "output": "out.pdf"}
    )
    filled = await signals.wait(outcome(sid), timeout=90)
    assert filled.type == "skill.route.completed", filled.data
    assert filled.data["data"]["result"]["fields"] == {"name": "Ada"}
    assert b"/V (Ada)" in (root / "out.pdf").read_bytes()  # written in the project, by the sandboxed script

    sid = await _send(
        bus, pid, "pdf/form/fill", {"path": "form.pdf", "fields": {"zip": "1"}, "output": "x.pdf"}
    )
    bad = await signals.wait(outcome(sid), timeout=90)
    assert bad.type == "skill.route.failed" and bad.data["error"]["type"] == "action_failed"
    assert "no such form field(s): zip" in bad.data["error"]["message"]

    sid = await _send(bus, pid, "pdf/unknown", {})
    unrouted = await signals.wait(outcome(sid))
    assert unrouted.type == "skill.route.failed" and unrouted.data["error"]["type"] == "not_found"
    assert "no skill of the project routes signals of type 'pdf/unknown'" in unrouted.data["error"]["message"]


async def test_the_project_policy_applies_to_routed_signals(
    running: Config, bus: Bus, tmp_path: Path
) -> None:
    signals = Signals()
    await bus.subscribe(subjects.signal_filter(), signals)
    await bus.nc.flush()
    # invoke_skill is allowed, running python3 is not: the policy stops the action
    root = _project(tmp_path / "strict", ["Read", "invoke_skill", "Bash(git:*)"])
    pid = (await EngineClient(bus).start_project(str(root))).project_id
    sid = await _send(bus, pid, "pdf/extract/text", {"path": "doc.pdf"})
    refused = await signals.wait(
        lambda e: e.type.startswith("skill.route.") and e.data["signal_id"] == sid, timeout=90
    )
    assert refused.type == "skill.route.failed", refused.data
    assert refused.data["error"]["type"] == "permission_denied", refused.data
    assert "python3" in refused.data["error"]["message"]
