"""Seed 001's pdf-processor skill (a fixture copied from the seed): action modules as scripts,
routes dispatched by signals (matching, outcomes, the dispatch limit)."""

from __future__ import annotations

import asyncio
import json
import shlex
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest

from jidocode.services.asset_loader.discover import SourceFile
from jidocode.services.asset_loader.generation import Generation, compile_generation
from jidocode.services.asset_loader.hooks import HookSignal
from jidocode.services.asset_loader.loaders.skill import parse_skill
from jidocode.services.asset_loader.runtime import MAX_SCRIPT_PARAMS_BYTES, AssetRuntime
from jidocode.services.asset_loader.skill_signals import SkillSignals, match_route
from jidocode.shared.envelope import Envelope
from jidocode.shared.errors import Conflict, NotFound
from jidocode.shared.events import EventModel
from jidocode.shared.events.assets import SkillRouteCompleted, SkillRouteFailed
from jidocode.shared.events.tools import ToolCallMeta, ToolResult
from jidocode.shared.settings import LoadedSettings, Settings

FIXTURE = Path(__file__).parent / "fixtures" / "skills" / "pdf-processor"
SEED_001 = sorted(Path("/work/shared/seeds").glob("001_*.txt"))
SCRIPTS = sorted(str(p.relative_to(FIXTURE)) for p in (FIXTURE / "scripts").glob("*.py"))


def make_pdf(lines: list[str], fields: dict[str, str | None] | None = None) -> bytes:
    """A small PDF: ``lines`` shown with Tj in a Flate content stream, form fields as widgets."""

    def esc(text: str) -> bytes:
        return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)").encode("latin-1")

    shown = b" T* ".join(b"(" + esc(line) + b") Tj" for line in lines)
    content = zlib.compress(b"BT /F1 12 Tf 14 TL 72 720 Td " + shown + b" ET")
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /Contents 4 0 R >>",
        b"<< /Length "
        + str(len(content)).encode()
        + b" /Filter /FlateDecode >>\nstream\n"
        + content
        + b"\nendstream",
    ]
    for name, value in (fields or {}).items():
        field = b"<< /FT /Tx /T (" + esc(name) + b")"
        objects.append(field + (b"" if value is None else b" /V (" + esc(value) + b")") + b" >>")
    body = b"%PDF-1.4\n" + b"".join(
        b"%d 0 obj\n" % (i + 1) + o + b"\nendobj\n" for i, o in enumerate(objects)
    )
    return body + b"trailer\n<< /Root 1 0 R >>\n%%EOF\n"


def _script(name: str, params: dict[str, Any], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(FIXTURE / "scripts" / name), json.dumps(params)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _skill_source(folder: str = "pdf-processor", raw: bytes | None = None) -> SourceFile:
    return SourceFile(
        kind="skill",
        layer="project",
        path=f"/p/.jido/skills/{folder}/SKILL.md",
        stem=folder,
        raw=raw if raw is not None else (FIXTURE / "SKILL.md").read_bytes(),
        scripts=SCRIPTS,
    )


def _gen(*extra: SourceFile) -> Generation:
    return compile_generation([_skill_source(), *extra], LoadedSettings(settings=Settings()))


# -- the fixture and its scripts --------------------------------------------------------------------


@pytest.mark.skipif(not SEED_001, reason="seed 001 is not on this machine")
def test_the_fixture_is_the_seed_example() -> None:
    seed = SEED_001[0].read_text(encoding="utf-8")
    start = seed.index("```yaml\n---\nname: pdf-processor") + len("```yaml\n")
    end = seed.index("- Form filling via action routes") + len("- Form filling via action routes")
    assert (FIXTURE / "SKILL.md").read_text(encoding="utf-8") == seed[start:end] + "\n"


def test_action_modules_map_to_scripts() -> None:
    skill, diags = parse_skill(
        (FIXTURE / "SKILL.md").read_bytes(),
        path="/p/skills/pdf-processor/SKILL.md",
        folder="pdf-processor",
        layer="project",
        scripts=SCRIPTS,
    )
    assert diags == [] and skill is not None
    assert [(a.module, a.script) for a in skill.actions] == [
        ("JidoCode.Actions.ExtractPdfText", "scripts/extract_pdf_text.py"),
        ("JidoCode.Actions.ExtractPdfTables", "scripts/extract_pdf_tables.py"),
        ("JidoCode.Actions.FillPdfForm", "scripts/fill_pdf_form.py"),
    ]
    action = skill.action_for("pdf/form/fill")
    assert action is not None and action.script == "scripts/fill_pdf_form.py"


def test_the_fixture_scripts_work(tmp_path: Path) -> None:
    (tmp_path / "doc.pdf").write_bytes(make_pdf(["Invoice (draft)", "item | qty", "pens | 3"]))
    text = _script("extract_pdf_text.py", {"path": "doc.pdf"}, tmp_path)
    assert text.returncode == 0, text.stderr
    assert json.loads(text.stdout) == {"path": "doc.pdf", "text": "Invoice (draft)\nitem | qty\npens | 3"}
    tables = _script("extract_pdf_tables.py", {"path": "doc.pdf"}, tmp_path)
    assert json.loads(tables.stdout)["rows"] == [["item", "qty"], ["pens", "3"]]

    (tmp_path / "form.pdf").write_bytes(make_pdf(["Form"], {"name": None, "city": "Paris"}))
    filled = _script(
        "fill_pdf_form.py", {"path": "form.pdf", "fields": {"name": "Ada"}, "output": "out.pdf"}, tmp_path
    )
    assert filled.returncode == 0, filled.stderr
    assert json.loads(filled.stdout)["fields"] == {"name": "Ada", "city": "Paris"}
    unknown = _script(
        "fill_pdf_form.py", {"path": "form.pdf", "fields": {"zip": "1"}, "output": "o.pdf"}, tmp_path
    )
    assert unknown.returncode == 2 and "no such form field(s): zip" in unknown.stderr


# -- invoking a script action -----------------------------------------------------------------------


class Ports:
    """The tool runner's bash answering from a table; records calls and hooks."""

    def __init__(self, exit_code: int = 0, output: str = '{"text": "hi"}') -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.hooks: list[HookSignal] = []
        self.exit_code, self.output = exit_code, output

    async def run(self, name: str, args: dict[str, Any], meta: ToolCallMeta) -> ToolResult:
        self.calls.append((name, args))
        return ToolResult(ok=True, data={"exit_code": self.exit_code, "output": self.output})

    async def signal(self, event: EventModel) -> None:
        pass

    async def hook(self, hook: HookSignal) -> None:
        self.hooks.append(hook)


META = ToolCallMeta(request_id="r", conversation_id="c")


async def test_a_script_action_runs_python3_with_json_params() -> None:
    ports = Ports()
    rt = AssetRuntime("p", "/p", ports, ports)
    result = await rt.invoke_skill(_gen(), "pdf-processor", "pdf/extract/text", {"path": "a b.pdf"}, META)
    assert result.ok and result.data["result"] == {"text": "hi"}
    [(tool, args)] = ports.calls
    assert tool == "bash"
    assert shlex.split(args["command"]) == [
        "python3",
        ".jido/skills/pdf-processor/scripts/extract_pdf_text.py",
        '{"path":"a b.pdf"}',
    ]
    # The seed's hooks fire around it (pre, then post with the status).
    assert [(h.signal_type, h.data.get("status")) for h in ports.hooks] == [
        ("skill/pdf_processor/pre", None),
        ("skill/pdf_processor/post", "ok"),
    ]


async def test_a_script_action_failing_or_refused() -> None:
    ports = Ports(exit_code=2, output="no such form field(s): zip\n")
    rt = AssetRuntime("p", "/p", ports, ports)
    failed = await rt.invoke_skill(_gen(), "pdf-processor", "pdf/form/fill", {"fields": {"zip": 1}}, META)
    assert not failed.ok and failed.error is not None and failed.error.type == "action_failed"
    assert "exited with 2: no such form field(s): zip" in failed.error.message
    assert ports.hooks[-1].data["status"] == "error"

    big = await rt.invoke_skill(
        _gen(), "pdf-processor", "pdf/extract/text", {"p": "x" * MAX_SCRIPT_PARAMS_BYTES}, META
    )
    assert not big.ok and big.error is not None and big.error.type == "invalid_input"
    assert f"at most {MAX_SCRIPT_PARAMS_BYTES}" in big.error.message

    # allowed-tools that do not name python: the script never runs
    narrow = (FIXTURE / "SKILL.md").read_bytes().replace(b"Bash(python:*)", b"Bash(git:*)")
    gen = compile_generation([_skill_source(raw=narrow)], LoadedSettings(settings=Settings()))
    denied = await rt.invoke_skill(gen, "pdf-processor", "pdf/extract/text", {"path": "a"}, META)
    assert not denied.ok and denied.error is not None and denied.error.type == "permission_denied"
    assert len(ports.calls) == 1  # only the first (failing) fill ran


# -- routing signals --------------------------------------------------------------------------------

OTHER = b"""---
name: other
description: Also extracts text.
jido:
  router: {"pdf/extract/text": read_file, "notes/read": read_file}
---
"""


def test_match_route() -> None:
    gen = _gen()
    assert match_route(gen, "pdf/form/fill") == "pdf-processor"
    with pytest.raises(NotFound, match="no skill of the project routes signals of type 'pdf/nope'") as info:
        match_route(gen, "pdf/nope")
    assert "pdf/extract/text" in info.value.details["routes"]
    both = _gen(_skill_source("other", OTHER))
    with pytest.raises(Conflict, match="skills other, pdf-processor all route 'pdf/extract/text'"):
        match_route(both, "pdf/extract/text")
    assert match_route(both, "pdf/extract/text", "other") == "other"
    with pytest.raises(NotFound, match="skill 'other' has no route 'pdf/form/fill'"):
        match_route(both, "pdf/form/fill", "other")
    with pytest.raises(NotFound, match="no skill named 'ghost'"):
        match_route(both, "pdf/form/fill", "ghost")


def _signal(type_: str, data: Any, **ext: str) -> Envelope:
    return Envelope(id=f"sig-{type_}", source="/test", type=type_, data=data, extensions=ext)


class Dispatch:
    """The dispatcher's tool runner and publisher; ``gate`` holds every tool call until set."""

    def __init__(self, gen: Generation) -> None:
        self.gen = gen
        self.calls: list[tuple[str, str, dict[str, Any], ToolCallMeta]] = []
        self.published: list[SkillRouteCompleted | SkillRouteFailed] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.changed = asyncio.Condition()

    async def generation(self, project_id: str) -> Generation:
        return self.gen

    async def run_tool(
        self, project_id: str, name: str, args: dict[str, Any], meta: ToolCallMeta
    ) -> ToolResult:
        async with self.changed:
            self.calls.append((project_id, name, args, meta))
            self.changed.notify_all()
        await self.gate.wait()
        return ToolResult(ok=True, data={"route": args["route"]})

    async def publish(
        self, project_id: str, event: SkillRouteCompleted | SkillRouteFailed, cause: Envelope
    ) -> None:
        async with self.changed:
            self.published.append(event)
            self.changed.notify_all()

    async def until(self, pred: Any) -> None:
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(pred), 30)

    def dispatcher(self, limit: int = 4) -> SkillSignals:
        return SkillSignals(self.generation, self.run_tool, self.publish, max_dispatches=limit)


async def test_a_routed_signal_runs_invoke_skill_and_publishes_its_outcome() -> None:
    d = Dispatch(_gen())
    signals = d.dispatcher()
    await signals.dispatch("p1", _signal("pdf/extract/text", {"path": "doc.pdf"}, correlationid="corr"))
    [(pid, tool, args, meta)] = d.calls
    assert (pid, tool) == ("p1", "invoke_skill")  # the tool's path: the tool runner authorizes it
    assert args == {"skill": "pdf-processor", "route": "pdf/extract/text", "params": {"path": "doc.pdf"}}
    assert meta.request_id == "signal-sig-pdf/extract/text" and meta.correlation_id == "corr"
    [done] = d.published
    assert isinstance(done, SkillRouteCompleted)
    assert (done.signal_id, done.skill, done.data) == (
        "sig-pdf/extract/text",
        "pdf-processor",
        {"route": "pdf/extract/text"},
    )

    await signals.dispatch("p1", _signal("pdf/nope", {}))
    await signals.dispatch("p1", _signal("pdf/form/fill", [1, 2]))
    bad_skill = _signal("pdf/form/fill", {}, skill="ghost")
    await signals.dispatch("p1", bad_skill)
    failures = d.published[1:]
    assert [type(f) for f in failures] == [SkillRouteFailed] * 3
    assert [f.error["type"] for f in failures if isinstance(f, SkillRouteFailed)] == [
        "not_found",
        "invalid_input",
        "not_found",
    ]
    assert len(d.calls) == 1  # none of them reached the tool runner


async def test_dispatches_are_limited() -> None:
    d = Dispatch(_gen())
    d.gate.clear()
    signals = d.dispatcher(limit=2)
    await signals.submit("p1", _signal("pdf/extract/text", {}))
    await signals.submit("p1", _signal("pdf/form/fill", {}))
    third = asyncio.create_task(signals.submit("p1", _signal("pdf/extract/tables", {})))
    await d.until(lambda: len(d.calls) == 2)
    assert not third.done() and signals.running == 2  # the third waits for a slot
    d.gate.set()
    await asyncio.wait_for(third, 30)
    await d.until(lambda: len(d.published) == 3)
    assert all(isinstance(e, SkillRouteCompleted) for e in d.published)
    with pytest.raises(ValueError, match="at least 1"):
        d.dispatcher(limit=0)
    await signals.close()
