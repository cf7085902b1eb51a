"""Recording and replaying a conversation (docs/compaction-and-replay.md; the file format and
its reader are in :mod:`.recording`).

``jidocode conversations export <dir> <id>`` writes a conversation's journal, the model's
recorded answers and its live projections to a *recording*: JSON lines, the first a header::

    {"kind": "header", "format": "jidocode.conversation-recording", "version": 1,
     "project_id": …, "conversation_id": …, "root_path": …, "trusted": …, "settings": {…},
     "entries": N, "answers": M, "exported_at": …}
    {"kind": "entry", "entry": {<timeline entry: id, type, source, data, correlation_id, …>}}   (N lines)
    {"kind": "answer", "request_id": …, "status": "completed" | "failed", …}                  (M lines)
    {"kind": "projection", "name": "timeline", "value": …}                                   (6 lines)

``jidocode replay <file>`` runs it again through the real services: an embedded nats-server
with a fresh store, every service in this process, a temporary copy of the project, and a
loopback OpenAI-compatible server that answers each model call (summaries included) with the
next recorded answer. The recorded inputs (user messages, cancel, resume, approval answers,
compact) are sent with their own ids, each once the replay has journaled everything that came
before it in the recording. Then every projection is compared with the recorded one; the
report names the first difference. Run-specific values are left out of the comparison: times,
``duration_ms``, the project id and root (a fresh store mints its own), and the id of the tool
runner's approval message.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import typer
from pydantic import BaseModel, ConfigDict

from jidocode.shared import subjects
from jidocode.shared.bus import Bus, gather
from jidocode.shared.clients import ConversationsClient
from jidocode.shared.config import Config
from jidocode.shared.errors import InvalidInput, RequestTimeout
from jidocode.shared.events.conversation import EXTERNAL_TYPES

from .dev.scripted_llm import ScriptedLlm
from .recording import (
    FORMAT,
    LIVE_PROJECTIONS,
    VERSION,
    Answer,
    Recording,
    RecordingHeader,
    answers_of,
    export_recording,
    read_recording,
    reply_of,
    write_recording,
)

if TYPE_CHECKING:
    from .replay_mcp import RecordedMcp

__all__ = [
    "FORMAT",
    "LIVE_PROJECTIONS",
    "VERSION",
    "Answer",
    "Recording",
    "RecordingHeader",
    "ReplayReport",
    "answers_of",
    "export_command",
    "export_recording",
    "first_difference",
    "normalise",
    "read_recording",
    "replay_command",
    "replay_recording",
    "replay_recordings",
    "reply_of",
    "write_recording",
]

#: Sources of the entries a replay produces by itself (everything else is input it sends).
_PRODUCED: Final = frozenset(
    {
        "conversation/core",
        "conversation/llm",
        "conversation/tools",
        "tool_runner/approval",
        "conversation/ingest",
    }
)
#: Keys whose values belong to one run, never compared.
_RUN_SPECIFIC: Final = frozenset({"time", "duration_ms"})


class ReplayReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    same: bool
    #: The projection and the path (``timeline[3].data.text``) of the first difference.
    projection: str | None = None
    path: str | None = None
    recorded: Any = None
    replayed: Any = None
    entries: int = 0
    answers_used: int = 0

    def describe(self) -> str:
        if self.same:
            return (
                f"same: every projection matches ({self.entries} entries, {self.answers_used} model answers)"
            )
        return (
            f"different: {self.projection} at {self.path}\n"
            f"  recorded: {json.dumps(self.recorded, ensure_ascii=False, sort_keys=True)[:2000]}\n"
            f"  replayed: {json.dumps(self.replayed, ensure_ascii=False, sort_keys=True)[:2000]}"
        )


# -- comparing --------------------------------------------------------------------------------


def normalise(value: Any, replacements: Sequence[tuple[str, str]] = ()) -> Any:
    """``value`` without run-specific parts: no times or durations, ids and paths of the run
    replaced (``replacements``: (this run's, the common name)), no causation id of an input or of
    an approval question (the request and the message that carried them), no sender of an input."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    for old, new in replacements:
        if old:
            text = text.replace(old, new)
    return _strip(json.loads(text))


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        out = {k: _strip(v) for k, v in value.items() if k not in _RUN_SPECIFIC}
        # what caused an input is the request that carried it; an approval question, the tool
        # runner's message: both ids of one run
        if "source" in out and (out["source"] == "tool_runner/approval" or out["source"] not in _PRODUCED):
            out.pop("causation_id", None)
        if "source" in out and out["source"] not in _PRODUCED:
            out["source"] = "(input)"  # the sender's bus identity
        return out
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def first_difference(recorded: Any, replayed: Any, path: str = "") -> tuple[str, Any, Any] | None:
    """The path of the first place where two JSON values differ, with both values there."""
    if isinstance(recorded, dict) and isinstance(replayed, dict):
        for key in sorted(recorded.keys() | replayed.keys()):
            if key not in recorded or key not in replayed:
                return f"{path}.{key}", recorded.get(key), replayed.get(key)
            found = first_difference(recorded[key], replayed[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(recorded, list) and isinstance(replayed, list):
        for index, (a, b) in enumerate(zip(recorded, replayed, strict=False)):
            found = first_difference(a, b, f"{path}[{index}]")
            if found:
                return found
        if len(recorded) != len(replayed):
            n = min(len(recorded), len(replayed))
            return (
                f"{path}[{n}]",
                recorded[n] if n < len(recorded) else "(absent)",
                replayed[n] if n < len(replayed) else "(absent)",
            )
        return None
    return None if recorded == replayed else (path or "(value)", recorded, replayed)


# -- replaying --------------------------------------------------------------------------------


async def _serve_system(config: Config, stop: asyncio.Event, mcp: RecordedMcp) -> None:
    """Every service until ``stop``; the tool runner with ``mcp`` for its MCP servers."""
    from jidocode.services.registry import SERVICES, serve_many
    from jidocode.services.tool_runner.service import ToolRunner

    async def tool_runner() -> None:
        bus = await Bus.connect(config, "tool_runner")
        try:
            runner = ToolRunner(bus, config, mcp=mcp)
            await runner.start()
            try:
                await stop.wait()
            finally:
                await runner.stop()
        finally:
            await bus.close()

    async with asyncio.TaskGroup() as group:
        group.create_task(serve_many(config, stop, tuple(n for n in SERVICES if n != "tool_runner")))
        group.create_task(tool_runner())


@contextlib.asynccontextmanager
async def _embedded_system(home: Path, mcp: RecordedMcp) -> AsyncIterator[Config]:
    """A nats-server with a fresh store and every service, in this process; the MCP tools are
    the recordings' (``mcp``): no MCP server starts."""
    from jidocode.services.registry import SERVICES
    from jidocode.shared.natsserver import NatsServer

    # the store beside the home, not in it: the asset loader watches the home (global assets)
    server = NatsServer(store_dir=home.parent / "js", sync="default").start()
    stop = asyncio.Event()
    config = Config(nats_url=server.url, jido_home=home, instance="replay")
    task = asyncio.create_task(_serve_system(config, stop, mcp))
    try:
        bus = await Bus.connect(config, "replay")
        try:
            wanted = {subjects.SERVICE_NAMES[n] for n in SERVICES}
            async with asyncio.timeout(60):
                while True:
                    if task.done():
                        task.result()
                    replies = await gather(bus.nc, subjects.srv("PING"), wait=0.3)
                    if wanted <= {json.loads(m.data)["name"] for m in replies}:
                        break
        finally:
            await bus.close()
        yield config
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 30)
        server.stop()


class _JournalCount:
    """The replayed conversation's journal, followed live: how many entries, and whether one
    already differs in type from the recorded entry at its place (then nothing more is awaited)."""

    def __init__(self, recorded: Sequence[dict[str, Any]]) -> None:
        self.recorded = recorded
        self.count = 0
        self.diverged = False
        self.changed = asyncio.Condition()

    async def on_message(self, msg: Any) -> None:
        from jidocode.services.conversation.codec import journal_entries

        try:  # a journal message carries one or more entries (decision 0322)
            kinds: list[str | None] = [entry.type for entry in journal_entries(msg.data)]
        except Exception:  # an unreadable entry differs from any recorded one
            kinds = [None]
        async with self.changed:
            for kind in kinds:
                if self.count >= len(self.recorded) or self.recorded[self.count].get("type") != kind:
                    self.diverged = True
                self.count += 1
            self.changed.notify_all()

    async def reach(self, n: int, timeout: float) -> None:
        """Until ``n`` entries are journaled (or one diverged); ``RequestTimeout`` after ``timeout``."""

        async def wait() -> None:
            async with self.changed:
                await self.changed.wait_for(lambda: self.count >= n or self.diverged)

        try:
            await asyncio.wait_for(wait(), timeout)
        except TimeoutError:
            raise RequestTimeout(
                f"the replay journaled {self.count} entries and waited {timeout:g} s for entry {n}",
                details={"journaled": self.count, "waiting_for": n},
            ) from None


async def replay_recording(
    recording: Recording, *, project_dir: Path | None = None, step_timeout: float = 60.0
) -> ReplayReport:
    """Run ``recording`` again through the real services and compare every projection."""
    return (await replay_recordings([recording], project_dirs=[project_dir], step_timeout=step_timeout))[0]


async def replay_recordings(
    recordings: Sequence[Recording],
    *,
    project_dirs: Sequence[Path | None] | None = None,
    step_timeout: float = 60.0,
) -> list[ReplayReport]:
    """Replay several recordings, one after the other, in one embedded system with a fresh store
    (each conversation on its own copy of its project); one report each."""
    from jidocode.shared.trust import trust_project

    from .replay_mcp import RecordedMcp

    dirs = list(project_dirs or [None] * len(recordings))
    if len(dirs) != len(recordings):
        raise InvalidInput("one project directory (or None) per recording")
    with tempfile.TemporaryDirectory(prefix="jido-replay-") as tmp:
        work = Path(tmp)
        home = work / "home"
        home.mkdir()
        projects: list[Path] = []
        mcp = RecordedMcp(jido_home=home)
        for n, (recording, chosen) in enumerate(zip(recordings, dirs, strict=True)):
            header = recording.header
            source = chosen or (Path(header.root_path) if header.root_path else None)
            if source is None or not source.is_dir():
                raise InvalidInput(
                    f"the recorded project {header.root_path or '(none)'} is not here: pass --project <dir>",
                    details={"root_path": header.root_path},
                )
            project = work / f"project-{n}"
            shutil.copytree(source, project, symlinks=True, ignore=shutil.ignore_patterns(".git"))
            if header.trusted:
                trust_project(project, home=home)
            mcp.add(project, recording.entries)
            projects.append(project)
        previous_home = os.environ.get("JIDO_CODE_HOME")
        os.environ["JIDO_CODE_HOME"] = str(home)
        try:
            async with _embedded_system(home, mcp) as config:
                bus = await Bus.connect(config, "replay-client")
                try:
                    reports = []
                    for recording, project in zip(recordings, projects, strict=True):
                        async with ScriptedLlm() as llm:
                            llm.script(*(reply_of(a) for a in recording.answers))
                            reports.append(await _drive(recording, bus, llm, project, step_timeout))
                    return reports
                finally:
                    await bus.close()
        finally:
            if previous_home is None:
                os.environ.pop("JIDO_CODE_HOME", None)
            else:
                os.environ["JIDO_CODE_HOME"] = previous_home


async def _drive(
    recording: Recording, bus: Bus, llm: ScriptedLlm, project: Path, step_timeout: float
) -> ReplayReport:
    from jidocode.client import JidoClient

    header = recording.header
    # the recorded model's own name when litellm speaks OpenAI to it (so the entries name it the
    # same), else one stand-in name, and the names are left out of the comparison
    models = sorted({a.model for a in recording.answers if a.model})
    model = models[0] if len(models) == 1 and models[0].startswith("openai/") else "openai/replay"
    settings = {
        **header.settings,
        "model": model,
        "api_base": llm.api_base,
        "max_retries": 0,
    }
    client = await JidoClient.connect(project_dir=project, bus=bus, settings=settings)
    try:
        conversations = ConversationsClient(bus, client.project_id, timeout=30)
        await conversations.start(conversation_id=header.conversation_id, settings=settings)
        counter = _JournalCount(recording.entries)
        sub = await bus.js.subscribe(
            subjects.journal(client.project_id, header.conversation_id),
            stream=subjects.STREAM_JOURNAL,
            cb=counter.on_message,
            ordered_consumer=True,
        )
        try:
            for index, entry in enumerate(recording.entries):
                if entry.get("source") in _PRODUCED or entry.get("type") not in EXTERNAL_TYPES:
                    continue
                await counter.reach(index, step_timeout)
                if counter.diverged:
                    break  # the rest of the recording's input no longer fits: report the difference
                # ids the core minted (an approval's tool call) carry the project id: this run's
                data = json.loads(
                    json.dumps(entry.get("data") or {}).replace(header.project_id, client.project_id)
                )
                await conversations.send_event(
                    header.conversation_id,
                    str(entry["type"]),
                    data,
                    event_id=str(entry["id"]),
                    correlation_id=str(entry.get("correlation_id") or entry["id"]),
                )
            await counter.reach(len(recording.entries), step_timeout)
            replayed = {
                name: (await conversations.get_projection(header.conversation_id, name)).value
                for name in LIVE_PROJECTIONS
            }
        finally:
            await sub.unsubscribe()
    finally:
        await client.close()
    recorded_names = [("jido-project", header.project_id), ("jido-root", header.root_path)]
    replay_names = [("jido-project", client.project_id), ("jido-root", str(project))]
    if model == "openai/replay":
        recorded_names += [("jido-model", name) for name in models]
        replay_names.append(("jido-model", model))
    for name in LIVE_PROJECTIONS:
        if name not in recording.projections:
            continue
        a = normalise(recording.projections[name], [(old, new) for new, old in recorded_names])
        b = normalise(replayed[name], [(old, new) for new, old in replay_names])
        found = first_difference(a, b)
        if found is not None:
            path, was, now = found
            return ReplayReport(
                same=False,
                projection=name,
                path=f"{name}{path}",
                recorded=was,
                replayed=now,
                entries=len(recording.entries),
                answers_used=len(llm.requests),
            )
    return ReplayReport(same=True, entries=len(recording.entries), answers_used=len(llm.requests))


# -- the commands -----------------------------------------------------------------------------


def replay_command(
    file: Path = typer.Argument(..., help="a recording written by `jidocode conversations export`"),
    project: Path | None = typer.Option(
        None, "--project", help="the project directory to copy for the replay (default: the recorded root)"
    ),
    json_out: bool = typer.Option(False, "--json", help="print the report as JSON"),
) -> None:
    """Run a recorded conversation again through the real services; exit 0 when every projection
    comes out the same, 1 with the first difference otherwise."""
    from .common import console, print_json, run

    async def main() -> ReplayReport:
        return await replay_recording(read_recording(file), project_dir=project)

    report = run(main)
    if json_out:
        print_json(report.model_dump(mode="json"))
    else:
        console.print(report.describe(), highlight=False, markup=False)
    raise typer.Exit(0 if report.same else 1)


def export_command(
    project_dir: str = typer.Argument(..., help="the project's directory"),
    conversation_id: str = typer.Argument(..., help="the conversation"),
    output: Path | None = typer.Option(None, "--output", "-o", help="the file (default: <id>.jsonl here)"),
) -> None:
    """Write a conversation's journal, the model's recorded answers and its projections to a
    recording (JSON lines; see docs/compaction-and-replay.md) for `jidocode replay`."""
    from jidocode.shared.settings import global_home
    from jidocode.shared.trust import trust_state

    from .common import cli_bus, console, resolve_project, run

    async def main() -> tuple[Path, Recording]:
        async with cli_bus("conversations") as bus:
            info = await resolve_project(bus, project_dir)
            client = ConversationsClient(bus, info.project_id, timeout=30)
            trusted = trust_state(info.root_path, home=global_home()).trusted
            recording = await export_recording(
                client, conversation_id, root_path=info.root_path, trusted=trusted
            )
        target = output or Path(f"{conversation_id}.jsonl")
        write_recording(target, recording)
        return target, recording

    target, recording = run(main)
    console.print(
        f"wrote {target}: {recording.header.entries} entries, {recording.header.answers} model answers",
        highlight=False,
    )
