"""Chaos: the real system (`jidocode up`) under load while each of its processes is killed with SIGKILL.

50 conversations of one project take one turn per wave, a wave per victim and a last wave with no
kill (so 7 turns each): every conversation is mid-conversation at every kill. Each turn the scripted model (stateless: it reads the
request) answers the user's ``append <conv>-<turn>`` with one ``bash`` call appending that line to
``out/<conv>.txt``, then, given the tool's result, with a short text. During wave *k* victim *k* gets
``kill -9``: the engine, project, conversation and asset-loader services (pids from their
``$SRV.PING`` metadata) once a quarter of the wave's turns are answered and the rest are in flight;
the tool runner and nats-server itself (``up`` restarts it on the same store and port) once the
model has tool calls out. The next wave starts once the system answers ``$SRV.PING`` again (the
recovery time, printed with the rest of the report) and every turn of the wave is answered, or a
minute later: a turn still unanswered then is stuck, and its conversation takes no further turns.
The last wave kills nothing: its turns' p99 is the calm figure the conversation-service kill's p99
is compared with in the report (issue 31, point 4: at most twice it; printed, not asserted).

What must hold at the end: every conversation answered every turn; every ``out/<conv>.txt`` holds
exactly the lines of its answered turns, each once (no tool side effect lost or run twice; the one
exception is a call that had begun on a killed tool runner, whose outcome the model is told is
unknown: under bubblewrap its sandbox dies with the runner, so its line may be missing); every
timeline holds each user message exactly once. Every violation is listed, with what the model was
told about the turn's tool call.

The client rides out the outages as any client must: each user message has a fixed event id (a retry
after a timeout or "no responders" is dropped as a duplicate, never a second turn), and a turn's answer
is read from the conversation's ``timeline`` projection, asked again through errors, so nothing
depends on a core-NATS subscription that would miss events published while the client was cut off.

Not in the default run: only a run whose ``-m`` names it (``./dev test -m chaos -n 0 -s``: in one process, so its table is printed) selects it
(``tests/conftest.py``); ``.ci/run`` runs it after the main suite. About 80 s on 2 cores.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import nats.errors
import pytest

from jidocode.cli.dev.scripted_llm import Reply, ScriptedLlm, ScriptedToolCall
from jidocode.services.registry import SERVICES
from jidocode.shared import subjects
from jidocode.shared.bus import Bus, connect_nats
from jidocode.shared.clients import ConversationsClient, EngineClient
from jidocode.shared.errors import InvalidEnvelope, InvalidInput, JidoError, PayloadTooLarge, PermissionDenied
from jidocode.shared.events.conversation import (
    LlmCompleted,
    LlmFailed,
    LoopStopped,
    ToolCallCompleted,
    ToolCallFailed,
    UserMessage,
)
from tests.e2e.test_up import UpProcess
from tests.helpers import ping_services, wait_for_services

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(480)]

T = TypeVar("T")

CONVERSATIONS = 50
NATS = "nats-server"
VICTIMS = ("engine", "project", "conversation", "tool_runner", "asset_loader", NATS)
#: One wave of turns per victim: every conversation is mid-conversation at every kill.
TURNS = len(VICTIMS) + 1  # the last wave kills nothing
#: How long one turn may take, outages included (a backstop: the waves' deadlines come first).
TURN_DEADLINE = 240.0
#: How long a wave's turns may take once the system answers again after its kill: more than the
#: lifetime of a claim whose tool runner died (30 s here), after which the call is reported lost.
WAVE_DEADLINE = 60.0
#: How long the system may take to answer ``$SRV.PING`` again after a kill.
RECOVERY_DEADLINE = 90.0
#: One request's timeout: a request lost in an outage is asked again after this (the SDK's send
#: attempt's, ``client/_send.py``: a turn's time includes it when its poll met the killed service).
REQUEST_TIMEOUT = 2.5
#: Victims killed once the model has this many tool calls out (running, queued or being reported).
TOOL_VICTIMS = ("tool_runner", NATS)
TOOLS_IN_FLIGHT = 3
#: Errors that are never transient: asking again cannot help.
PERMANENT = (InvalidInput, InvalidEnvelope, PermissionDenied, PayloadTooLarge)
TRANSIENT = (JidoError, nats.errors.Error, OSError, TimeoutError)

_APPEND = re.compile(r"append (?P<tag>(?P<conv>c\d+)-\d+)")


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def responder(body: dict[str, Any]) -> Reply:
    """The model: ``append <tag>`` -> one bash call appending ``<tag>``; a tool result -> a short text.

    Stateless (it reads only the request), so it answers a call asked again after a crash as it did
    the first time; the tool call's id is the tag, the same every time it is asked.
    """
    last = (body.get("messages") or [{}])[-1]
    if last.get("role") == "tool":
        return Reply.answer("appended")
    m = _APPEND.search(_text(last))
    if m is None:
        return Reply.error(400, f"chaos model: unexpected message {_text(last)[:200]!r}")
    command = f"echo {m['tag']} >> out/{m['conv']}.txt"
    return Reply.tools(ScriptedToolCall(name="bash", arguments={"command": command}, id=f"call_{m['tag']}"))


class ModelView:
    """The responder, counting the tool calls the model asked for and those whose result came back
    (an observation only: the answers stay those of :func:`responder`)."""

    def __init__(self) -> None:
        self.asked: set[str] = set()
        self.returned: set[str] = set()

    def __call__(self, body: dict[str, Any]) -> Reply:
        last = (body.get("messages") or [{}])[-1]
        if last.get("role") == "tool":
            self.returned.add(str(last.get("tool_call_id")))
        reply = responder(body)
        self.asked.update(c.id for c in reply.tool_calls)
        return reply

    def tools_in_flight(self) -> int:
        return len(self.asked - self.returned)


def event_id(conv: str, turn: int) -> str:
    return f"{conv}-m{turn}"


def tag(conv: str, turn: int) -> str:
    return f"{conv}-{turn}"


def turn_outcome(timeline: list[dict[str, Any]], message_id: str) -> str | None:
    """``answered`` once the turn opened by ``message_id`` has its final answer, the failure's
    description when it ended without one, else ``None`` (still running)."""
    for entry in timeline:
        if entry.get("correlation_id") != message_id:
            continue
        data = entry.get("data") or {}
        if _is_answer(entry):
            return "answered"
        if entry.get("type") in (LlmFailed.TYPE, LoopStopped.TYPE):
            return f"{entry['type']}: {json.dumps(data)[:300]}"
    return None


def _is_answer(entry: dict[str, Any]) -> bool:
    return entry.get("type") == LlmCompleted.TYPE and not (entry.get("data") or {}).get("tool_calls")


def answered_at(timeline: list[dict[str, Any]], message_id: str) -> float:
    """The wall-clock time the turn opened by ``message_id`` was answered: its answer event's own
    ``time``, so a turn's figure does not depend on when the client's poll happened to look."""
    for entry in timeline:
        if entry.get("correlation_id") == message_id and _is_answer(entry):
            return datetime.fromisoformat(str(entry["time"]).replace("Z", "+00:00")).timestamp()
    raise AssertionError(f"{message_id}: no answer in the timeline")


@dataclass
class Load:
    """The conversations' drivers and what they have done."""

    convs: ConversationsClient
    conversations: list[str]
    waves: list[asyncio.Event] = field(default_factory=lambda: [asyncio.Event() for _ in range(TURNS)])
    #: per wave, the conversations whose turn of that wave is answered
    answered: list[set[str]] = field(default_factory=lambda: [set() for _ in range(TURNS)])
    #: the turns whose message was sent, per conversation
    sent: dict[str, list[int]] = field(default_factory=dict)
    #: conversations that stopped (a turn failed or never ended), and why
    out: dict[str, str] = field(default_factory=dict)
    tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    retries: Counter[str] = field(default_factory=Counter)
    #: per wave, the seconds each answered turn took from its message being sent to its answer
    #: event's time (same machine, same clock)
    took: list[list[float]] = field(default_factory=lambda: [[] for _ in range(TURNS)])

    def start(self) -> None:
        for conv in self.conversations:
            self.sent[conv] = []
            self.tasks[conv] = asyncio.create_task(self.drive(conv))

    def live(self) -> list[str]:
        return [c for c in self.conversations if c not in self.out]

    def pending(self, wave: int) -> list[str]:
        return [c for c in self.live() if c not in self.answered[wave]]

    async def retrying(self, what: str, attempt: Callable[[], Awaitable[T]], deadline: float) -> T:
        """``attempt()`` until it succeeds, asked again through transient errors with backoff, until
        the monotonic ``deadline``."""
        delay = 0.1
        while True:
            try:
                return await attempt()
            except PERMANENT:
                raise
            except TRANSIENT as exc:
                kind = exc.type if isinstance(exc, JidoError) else type(exc).__name__
                self.retries[f"{what}: {kind}"] += 1
                if time.monotonic() + delay >= deadline:
                    raise AssertionError(f"{what}: still failing at its deadline: {exc!r}") from exc
            await asyncio.sleep(delay)  # backoff between attempts, bounded by the deadline
            delay = min(delay * 2, 1.0)

    async def drive(self, conv: str) -> None:
        try:
            await self.retrying(
                "start",
                lambda: self.convs.start(
                    conv, settings={"retry_backoff_s": 0.05, "retry_backoff_max_s": 0.5}
                ),
                time.monotonic() + TURN_DEADLINE,
            )
            for wave in range(TURNS):
                await self.waves[wave].wait()
                await self.turn(conv, wave + 1)
                async with self.changed:
                    self.answered[wave].add(conv)
                    self.changed.notify_all()
        except Exception as exc:
            async with self.changed:
                self.out[conv] = f"{type(exc).__name__}: {exc}"
                self.changed.notify_all()

    async def turn(self, conv: str, turn: int) -> None:
        began = time.monotonic()
        sent_at = time.time()
        deadline = began + TURN_DEADLINE
        message_id = event_id(conv, turn)
        message = UserMessage(text=f"append {tag(conv, turn)}")
        self.sent[conv].append(turn)
        # a fixed event id: asked again after a timeout, the message is a duplicate, not a second turn
        await self.retrying(
            "send_event",
            lambda: self.convs.send_event(
                conv, message.type, message.to_data(), event_id=message_id, correlation_id=message_id
            ),
            deadline,
        )
        delay = 0.1
        while True:
            timeline = await self.retrying(
                "get_projection", lambda: self.convs.get_projection(conv, "timeline"), deadline
            )
            entries = list(timeline.value or [])
            outcome = turn_outcome(entries, message_id)
            if outcome == "answered":
                self.took[turn - 1].append(answered_at(entries, message_id) - sent_at)
                return
            if outcome is not None:
                raise AssertionError(f"turn {turn} ended without an answer: {outcome}")
            if time.monotonic() + delay >= deadline:
                raise AssertionError(f"turn {turn} not answered within {TURN_DEADLINE:g} s")
            await asyncio.sleep(delay)  # polling the projection, bounded by the turn's deadline
            delay = min(delay * 1.5, 1.0)

    async def until(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Whether ``predicate()`` (re-checked whenever a driver reports) came true within ``timeout``."""

        async def wait() -> None:
            async with self.changed:
                await self.changed.wait_for(predicate)

        try:
            await asyncio.wait_for(wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def give_up(self, conv: str, turn: int, why: str) -> None:
        """Stop driving ``conv``; say what its turn ``turn`` holds."""
        self.tasks[conv].cancel()
        await asyncio.gather(self.tasks[conv], return_exceptions=True)
        message_id = event_id(conv, turn)
        try:
            timeline = await self.retrying(
                "get_projection", lambda: self.convs.get_projection(conv, "timeline"), time.monotonic() + 10
            )
            held = [
                entry.get("type", "?").removeprefix("conversation.")
                for entry in timeline.value or []
                if entry.get("correlation_id") == message_id
            ]
            state = f"its timeline for the turn: {held}"
        except (AssertionError, JidoError) as exc:
            state = f"its timeline could not be read: {exc}"
        async with self.changed:
            self.out[conv] = f"turn {turn} {why}; {state}"
            self.changed.notify_all()


@dataclass(frozen=True)
class Kill:
    victim: str
    pid: int
    in_flight: int
    tools_in_flight: int
    recovered_s: float
    wave_s: float


def percentiles(took: list[float]) -> tuple[float, float]:
    """The median and the p99 of a wave's turn times (0 for a wave with none)."""
    ordered = sorted(took) or [0.0]
    return ordered[len(ordered) // 2], ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


async def _poll(predicate: Callable[[], bool], timeout: float) -> bool:
    """Whether ``predicate()`` (a counter of this process, no event to wait on) came true within ``timeout``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.01)  # polling a local counter, bounded by the deadline
    return True


async def _pids(nc: nats.aio.client.Client, name: str) -> list[int]:
    infos = (await ping_services(nc, wait=0.5)).get(subjects.SERVICE_NAMES[name], [])
    return [int(i["metadata"]["pid"]) for i in infos]


async def _healthy(nc: nats.aio.client.Client, victim: str, dead: int) -> None:
    """Return once every service answers ``$SRV.PING``, and the victim (a service) from a new process."""
    wanted = {subjects.SERVICE_NAMES[n] for n in SERVICES}
    while True:
        try:
            found = await ping_services(nc, wait=0.5)
        except (nats.errors.Error, OSError):  # NATS is down or we are reconnecting: ask again
            await asyncio.sleep(0.2)  # retry backoff; the caller bounds the wait
            continue
        if not wanted <= set(found):
            continue
        if victim == NATS:
            return
        pids = [int(i["metadata"]["pid"]) for i in found[subjects.SERVICE_NAMES[victim]]]
        if pids and dead not in pids:
            return


async def _victim_pid(nc: nats.aio.client.Client, victim: str, data_home: Path) -> int:
    if victim == NATS:
        return int((data_home / "nats" / "nats-server.pid").read_text().strip())
    pids = await _pids(nc, victim)
    assert len(pids) == 1, f"{victim}: expected one process, found {pids}"
    return pids[0]


def tool_outcome(timeline: list[dict[str, Any]], conv: str, turn: int) -> str:
    """What the model heard from the turn's tool call: ``completed``, or ``failed: <error type>``."""
    for entry in timeline:
        if entry.get("correlation_id") != event_id(conv, turn):
            continue
        if entry.get("type") == ToolCallCompleted.TYPE:
            return f"completed: {json.dumps((entry.get('data') or {}).get('data'))[:300]}"
        if entry.get("type") == ToolCallFailed.TYPE:
            return f"failed: {(entry.get('data') or {}).get('error_type')}"
    return "no result"


def told_maybe(timeline: list[dict[str, Any]], conv: str, turn: int) -> bool:
    """Whether the turn's call had begun on the tool runner killed in its wave, so the model was told
    ``outcome_unknown`` (its side effect may or may not have happened): under bubblewrap the call's
    sandbox dies with the killed runner, so a call that began may not have written its line. Such a
    line may be missing; it is never written twice. A call that had not begun is run once by the
    restarted runner (its claim is taken over), so its line must be there."""
    return (
        turn <= len(VICTIMS)
        and VICTIMS[turn - 1] in TOOL_VICTIMS
        and tool_outcome(timeline, conv, turn) == "failed: outcome_unknown"
    )


def side_effect_problems(project: Path, load: Load, timelines: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Each answered turn's line is in its conversation's file exactly once (or, where the model was
    told the outcome is unknown after a tool-runner kill, at most once); nothing else is."""
    problems = []
    for conv in load.conversations:
        path = project / "out" / f"{conv}.txt"
        lines = path.read_text().splitlines() if path.exists() else []
        answered = [w + 1 for w in range(TURNS) if conv in load.answered[w]]
        counts = Counter(lines)
        lost = [
            f"{tag(conv, t)} (tool {tool_outcome(timelines[conv], conv, t)})"
            for t in answered
            if counts[tag(conv, t)] == 0 and not told_maybe(timelines[conv], conv, t)
        ]
        doubled = sorted(line for line, n in counts.items() if n > 1)
        foreign = sorted(set(lines) - {tag(conv, t) for t in load.sent[conv]})
        if lost or doubled or foreign:
            problems.append(
                f"{path.name}: lost {lost}, doubled {doubled}, unexpected {foreign}; holds {lines}"
            )
    return problems


async def test_every_process_killed_mid_load_loses_and_doubles_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    t_start = time.monotonic()
    home = tmp_path / "home"
    home.mkdir()
    # The global layer: an untrusted project's own allow rules would not count. `echo … >> out/x` is
    # a write inside the project, which Bash(echo:*) allows (no Edit rule needed). Short tool limits
    # keep the lifetime of a claim whose runner died (timeout + approval + quota wait + 10 s) at 30 s.
    (home / "settings.json").write_text(
        json.dumps(
            {
                "permissions": {"allow": ["Bash(echo:*)"]},
                "tools": {"timeout_s": 10, "approval_timeout_s": 5},
            }
        )
    )
    project = tmp_path / "proj"
    (project / "out").mkdir(parents=True)

    model = ModelView()
    async with ScriptedLlm(responder=model) as llm:
        monkeypatch.setenv("JIDO_LLM_MODEL", "openai/scripted")
        monkeypatch.setenv("JIDO_LLM_API_BASE", llm.api_base)
        monkeypatch.setenv("JIDO_TOOL_QUOTA_WAIT_S", "5")
        # a killed tool runner's quota slots come back after their lease: shorter than the wait
        monkeypatch.setenv("JIDO_TOOL_QUOTA_LEASE_S", "2")
        monkeypatch.setenv("JIDO_UP_SPARES", "conversation")  # up's default (the suite's `up`s keep none)
        up = UpProcess(tmp_path)  # its environment: ours, with its own data home and JIDO_CODE_HOME=home
        await up.start_reader()
        drain: asyncio.Task[None] | None = None
        bus: Bus | None = None
        monitor: nats.aio.client.Client | None = None
        load: Load | None = None
        try:
            url = (await up.wait_line(r"NATS listening on (nats://\S+)")).group(1)

            async def keep_log() -> None:  # up's output, kept for the failure message
                while (line := await up._queue.get()) != "<eof>":
                    up.lines.append(line)

            drain = asyncio.create_task(keep_log())
            client = up.client_config(url)
            await wait_for_services(client, SERVICES, timeout=90)
            t_ready = time.monotonic()
            bus = await Bus.connect(client, "chaos")
            monitor = await connect_nats(client, "chaos-monitor", wait=False)
            info = await EngineClient(bus, timeout=REQUEST_TIMEOUT).start_project(str(project))
            load = Load(
                ConversationsClient(bus, info.project_id, timeout=REQUEST_TIMEOUT),
                [f"c{i:02d}" for i in range(CONVERSATIONS)],
            )
            load.start()

            kills: list[Kill] = []
            for wave, victim in enumerate(VICTIMS):
                wave_started = time.monotonic()
                load.waves[wave].set()
                if victim in TOOL_VICTIMS:
                    # with tool calls out: running, waiting for a slot in the runner, or being reported
                    started = await _poll(lambda: model.tools_in_flight() >= TOOLS_IN_FLIGHT, TURN_DEADLINE)
                else:
                    # a quarter of the wave's turns answered: the rest are in the model, in a tool, queued
                    started = await load.until(
                        lambda w=wave: (
                            len(load.answered[w]) >= max(1, len(load.live()) // 4)  # type: ignore[misc]
                            or not load.pending(w)
                        ),  # type: ignore[misc]
                        TURN_DEADLINE,
                    )
                assert started, f"wave {wave + 1}: the load did not get under way within {TURN_DEADLINE:g} s"
                in_flight = len(load.pending(wave))
                tools_in_flight = model.tools_in_flight()
                pid = await _victim_pid(monitor, victim, Path(up.data_home))
                killed_at = time.monotonic()
                os.kill(pid, signal.SIGKILL)
                try:
                    await asyncio.wait_for(_healthy(monitor, victim, pid), RECOVERY_DEADLINE)
                except TimeoutError:
                    raise AssertionError(
                        f"the system did not answer $SRV.PING within {RECOVERY_DEADLINE:g} s of killing "
                        f"{victim} (pid {pid})"
                    ) from None
                recovered = time.monotonic() - killed_at
                if not await load.until(lambda w=wave: not load.pending(w), WAVE_DEADLINE):  # type: ignore[misc]
                    for conv in load.pending(wave):
                        await load.give_up(
                            conv,
                            wave + 1,
                            f"not answered {WAVE_DEADLINE:g} s after the system recovered from the {victim} kill",
                        )
                kills.append(
                    Kill(victim, pid, in_flight, tools_in_flight, recovered, time.monotonic() - wave_started)
                )
            calm = len(VICTIMS)  # the last wave: no kill, the baseline of the turns' times
            calm_started = time.monotonic()
            load.waves[calm].set()
            if not await load.until(lambda: not load.pending(calm), TURN_DEADLINE):
                for conv in load.pending(calm):
                    await load.give_up(
                        conv, calm + 1, f"not answered within {TURN_DEADLINE:g} s, nothing killed"
                    )
            calm_s = time.monotonic() - calm_started
            await asyncio.wait_for(asyncio.gather(*load.tasks.values(), return_exceptions=True), 30)

            timelines: dict[str, list[dict[str, Any]]] = {}
            for conv in load.conversations:
                timeline = await load.retrying(
                    "get_projection",
                    lambda c=conv: load.convs.get_projection(c, "timeline"),  # type: ignore[misc]
                    time.monotonic() + 30,
                )
                timelines[conv] = list(timeline.value or [])
            problems = [f"{conv}: {why}" for conv, why in sorted(load.out.items())]
            problems += side_effect_problems(project, load, timelines)
            # every user message exactly once in its timeline
            tool_failures: Counter[str] = Counter()
            failure_notes: list[str] = []
            for conv, entries in timelines.items():
                users = [e["id"] for e in entries if e.get("type") == UserMessage.TYPE]
                expected_ids = [event_id(conv, t) for t in load.sent[conv]]
                if users != expected_ids:
                    problems.append(
                        f"{conv}: the timeline's user messages are {users}, expected {expected_ids}"
                    )
                for e in entries:
                    if e.get("type") == ToolCallFailed.TYPE:
                        data = e.get("data") or {}
                        tool_failures[str(data.get("error_type"))] += 1
                        failure_notes.append(
                            f"{e.get('correlation_id')}: {data.get('error_type')}: {str(data.get('message'))[:160]}"
                        )
            restarts = [line for line in up.lines if re.search(r"exited with code -9; restart", line)]
            total = time.monotonic() - t_start
            with capsys.disabled():
                print(
                    f"\nchaos: {CONVERSATIONS} conversations x {TURNS} turns on `jidocode up`, a kill -9 "
                    f"per wave of turns; system ready in {t_ready - t_start:.1f} s, test {total:.1f} s"
                )
                print(
                    f"  {'victim':<13}{'pid':>8}{'turns in flight':>17}{'tool calls out':>16}"
                    f"{'recovered in':>14}{'wave took':>11}{'turn p50':>10}{'turn p99':>10}"
                )
                for wave, k in enumerate(kills):
                    p50, p99 = percentiles(load.took[wave])
                    print(
                        f"  {k.victim:<13}{k.pid:>8}{k.in_flight:>17}{k.tools_in_flight:>16}"
                        f"{k.recovered_s:>12.1f} s{k.wave_s:>9.1f} s{p50:>8.1f} s{p99:>8.1f} s"
                    )
                p50, calm_p99 = percentiles(load.took[calm])
                print(
                    f"  {'(no kill)':<13}{'':>8}{'':>17}{'':>16}{'':>14}{calm_s:>9.1f} s{p50:>8.1f} s{calm_p99:>8.1f} s"
                )
                conversation_p99 = percentiles(load.took[VICTIMS.index("conversation")])[1]
                print(
                    f"  turn p99 with the conversation service killed / with nothing killed: "
                    f"{conversation_p99 / max(calm_p99, 1e-9):.2f} (issue 31, point 4: at most 2)"
                )
                print(
                    f"  LLM requests: {len(llm.requests)}; tool failures the model saw: {dict(tool_failures)}; "
                    f"client retries: {dict(load.retries)}"
                )
                for note in failure_notes:
                    print(f"  tool failure {note}")
                for problem in problems:
                    print(f"  PROBLEM {problem}")
            assert len(restarts) == len(VICTIMS), restarts
            assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems)
        except BaseException:
            tail = "\n".join(up.lines[-60:])
            print(f"last lines of jidocode up:\n{tail}")
            raise
        finally:
            if load is not None:
                for task in load.tasks.values():
                    task.cancel()
                await asyncio.gather(*load.tasks.values(), return_exceptions=True)
            if bus is not None:
                await bus.close()
            if monitor is not None:
                with contextlib.suppress(nats.errors.Error):
                    await monitor.close()
            if up.proc.poll() is None:
                up.proc.send_signal(signal.SIGINT)
                try:
                    await asyncio.wait_for(asyncio.to_thread(up.proc.wait), 60)
                except TimeoutError:
                    up.proc.kill()
            if drain is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(drain, 10)
