"""Every service in this process on a NATS cluster, a gated scripted LLM, and a conversation
that is paused at its second LLM call while a NATS node is killed; and a conversation whose tool
call is running when its tool-runner process (here a process of its own) is killed."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.js.api import DeliverPolicy

from jidocode.cli.dev.scripted_llm import Reply, ScriptedLlm, call
from jidocode.client import JidoClient
from jidocode.services.conversation.codec import journal_entries
from jidocode.services.conversation.llm import make_llm_port
from jidocode.services.registry import SERVICES, load_serve
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.errors import JidoError
from jidocode.shared.events.conversation import ToolCallCompleted, ToolCallFailed

from .cluster import Cluster, stream_leader, wait_leaders_elected
from .services import ServiceProcess, killed_on_exit, wait_answering

log = logging.getLogger(__name__)

_RESTARTS = 3
FINAL = "The readme says hello."
FAST = {"retry_backoff_s": 0.01, "retry_backoff_max_s": 0.05}


class GatedLlm(ScriptedLlm):  # type: ignore[misc]
    """A scripted LLM that holds request number ``gate_at`` until ``gate`` is set."""

    def __init__(self, gate_at: int, final: str) -> None:
        # A call re-asked after a crash (the actor rebuilds from its journal and asks again)
        # gets the same final answer, as a real model would give one.
        super().__init__(responder=lambda body: Reply.answer(final))
        self.gate = asyncio.Event()
        self.gate_at = gate_at

    async def _record(self, body: dict[str, Any], headers: dict[str, str]) -> Reply:
        reply = await super()._record(body, headers)
        if len(self.requests) == self.gate_at:
            await self.gate.wait()
        return reply


async def journal_ids(url: str, project_id: str, conversation_id: str) -> list[str]:
    """The event ids of a conversation's journal, in stream order, read through the live nodes."""
    nc = await nats.connect(url.split(","), connect_timeout=2)
    try:
        js = nc.jetstream()
        subject = subjects.journal(project_id, conversation_id)
        last = int((await js.get_last_msg(subjects.STREAM_JOURNAL, subject)).seq or 0)
        sub = await js.subscribe(
            subject, stream=subjects.STREAM_JOURNAL, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL
        )
        ids = []
        try:
            while True:
                msg = await sub.next_msg(timeout=10)
                ids.extend(entry.id for entry in journal_entries(msg.data))  # a message: one step's entries
                if msg.metadata.sequence.stream >= last:
                    return ids
        finally:
            await sub.unsubscribe()
    finally:
        await nc.close()


@dataclass(frozen=True)
class KillRun:
    answer: str
    history: list[dict[str, Any]]
    journal_before_kill: list[str]
    journal_after: list[str]
    leader_before: str
    killed: str


async def _restarting(name: str, start: Callable[[], Awaitable[None]], stop: asyncio.Event) -> None:
    """Run a service and start it again if it dies before ``stop`` — compose's ``restart:
    unless-stopped`` and Kubernetes' restart policy. A service meeting a JetStream API timeout
    while the young cluster settles exits; the platform restarts it."""
    for attempt in range(1, _RESTARTS + 1):
        try:
            await start()
            return
        except Exception:
            if stop.is_set() or attempt == _RESTARTS:
                raise
            log.warning("service %s stopped with an error; restarting it (%d)", name, attempt, exc_info=True)


async def _history_once_settled(client: JidoClient, timeout: float = 30.0) -> list[dict[str, Any]]:
    """``get_history``, asked again while the cluster elects a new meta leader.

    Reading the journal creates a consumer, which needs the JetStream meta leader; killing the node
    that held it makes such reads time out for the few seconds of an election.
    """

    async def attempt() -> list[dict[str, Any]]:
        while True:
            try:
                return list(await client.get_history())
            except JidoError as exc:
                log.info("get_history during failover: %s; asking again", exc)
                await asyncio.sleep(0.2)  # waiting out an election; bounded by wait_for

    return await asyncio.wait_for(attempt(), timeout)


async def run_conversation_across_kill(
    cluster: Cluster,
    config: Config,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    victim: str,
    settle: bool,
) -> KillRun:
    """Start a conversation turn, hold it at its second LLM call, SIGKILL one NATS node (the journal
    stream's ``leader`` or a ``follower``), release the turn (after the cluster re-elected every
    leader when ``settle``, else at once), and collect what the journal holds."""
    project = tmp_path / "proj"
    (project / ".jido").mkdir(parents=True)
    (project / ".jido" / "settings.json").write_text(json.dumps({"permissions": {"allow": ["Read"]}}))
    (project / "README.md").write_text("hello from the readme\n")

    async with GatedLlm(gate_at=2, final=FINAL) as llm:
        llm.script(Reply.tools(call("read_file", path="README.md")), Reply.answer(FINAL))
        monkeypatch.setenv("JIDO_LLM_MODEL", "openai/scripted")
        monkeypatch.setenv("JIDO_LLM_API_BASE", llm.api_base)
        others = tuple(
            n
            for n in SERVICES
            if n != "conversation" and importlib.util.find_spec(f"jidocode.services.{n}.service") is not None
        )
        from jidocode.services.conversation.service import serve as serve_conversation

        stop = asyncio.Event()
        llm_bus = await Bus.connect(config, "conversation-llm")
        starters: dict[str, Callable[[], Awaitable[None]]] = {
            n: partial(load_serve(n), config, stop) for n in others
        }
        starters["conversation"] = lambda: serve_conversation(
            config, stop, llm=make_llm_port(config, bus=llm_bus)
        )
        tasks = [asyncio.create_task(_restarting(name, start, stop)) for name, start in starters.items()]
        bus = await Bus.connect(config, "cluster-client")
        try:
            # Wait for every service, unless one of them crashes first (then its error is the failure).
            ready = asyncio.ensure_future(wait_answering(bus.nc, (*others, "conversation")))
            done, _ = await asyncio.wait([ready, *tasks], return_when=asyncio.FIRST_COMPLETED)
            if ready not in done:
                ready.cancel()
                for task in done:
                    task.result()
                raise AssertionError("a service stopped before every service answered")
            ready.result()
            client = await JidoClient.connect(project_dir=project, bus=bus, settings=FAST)
            turn = asyncio.ensure_future(client.send_message("What does the readme say?", timeout=60))
            await llm.wait_requests(2, timeout=30)  # mid-conversation: the tool ran, the answer is pending
            assert client.conversation_id is not None
            pid = client.project_id
            cid = client.conversation_id
            before = await journal_ids(cluster.url, pid, cid)
            leader_before = await stream_leader(cluster.url, subjects.STREAM_JOURNAL)
            killed = (
                leader_before
                if victim == "leader"
                else next(n.server_name for n in cluster.nodes if n.server_name != leader_before)
            )
            cluster.node(killed).kill()
            live = ",".join(n.url for n in cluster.alive())
            if settle:
                await wait_leaders_elected(live, killed)
            llm.gate.set()
            answer = await asyncio.wait_for(turn, 60)
            # Reading back needs live leaders too (the journal's, and the meta leader for a consumer).
            await wait_leaders_elected(live, killed)
            history = await _history_once_settled(client)
            after = await journal_ids(live, pid, cid)
        finally:
            llm.gate.set()
            stop.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
            await bus.close()
            await llm_bus.close()
    return KillRun(
        answer=answer,
        history=history,
        journal_before_kill=before,
        journal_after=after,
        leader_before=leader_before,
        killed=killed,
    )


TOOL_FINAL = "The script ran."
#: What the tool call does: a side effect (a line in side.txt), then a wait the runner's kill cuts short.
TOOL_COMMAND = "echo ran >> side.txt && sleep 20"


@dataclass(frozen=True)
class ToolRunnerKillRun:
    answer: str
    #: side.txt's lines: one per time the call's side effect ran
    side_effect: list[str]
    #: what the model was told about the call: ``completed`` or the error type (``outcome_unknown`` …)
    tool_outcome: str
    tool_message: str
    #: seconds from the kill to the answer
    finished_after_kill_s: float
    #: the runs of the tool call the timeline holds (requested, completed/failed)
    tool_entries: list[str]


async def run_conversation_across_tool_runner_kill(
    cluster: Cluster, config: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> ToolRunnerKillRun:
    """A conversation turn whose bash call (``echo … >> side.txt && sleep 20``) is running when its
    tool-runner process gets SIGKILL; a new runner process starts at once (the platform's restart).
    The other services run in this process. Returns what the turn ended with."""
    project = tmp_path / "proj"
    project.mkdir()
    # The global layer (the project is not trusted). Short tool limits keep the lifetime of a claim
    # whose runner died (timeout + approval + quota wait + 10 s) at 20 s.
    (config.jido_home / "settings.json").write_text(
        json.dumps(
            {
                "permissions": {"allow": ["Bash(echo:*)", "Bash(sleep:*)"]},
                "tools": {"timeout_s": 8, "approval_timeout_s": 1},
            }
        )
    )
    side = project / "side.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith("NATS_")}
    env.update(
        NATS_URL=config.nats_url,
        JIDO_CODE_HOME=str(config.jido_home),
        JIDO_DATA_HOME=str(tmp_path / "data"),
        JIDO_JS_REPLICAS=str(config.js_replicas or 3),
        JIDO_TOOL_QUOTA_WAIT_S="1",
        PYTHONUNBUFFERED="1",
    )
    runner = ServiceProcess("tool_runner", env, tmp_path / "tool_runner.log")

    async with ScriptedLlm(responder=lambda body: Reply.answer(TOOL_FINAL)) as llm:
        llm.script(Reply.tools(call("bash", command=TOOL_COMMAND)))
        monkeypatch.setenv("JIDO_LLM_MODEL", "openai/scripted")
        monkeypatch.setenv("JIDO_LLM_API_BASE", llm.api_base)
        # the project service's policy reads the global layer from the environment, not the config
        monkeypatch.setenv("JIDO_CODE_HOME", str(config.jido_home))
        others = tuple(
            n
            for n in SERVICES
            if n not in ("conversation", "tool_runner")
            and importlib.util.find_spec(f"jidocode.services.{n}.service") is not None
        )
        from jidocode.services.conversation.service import serve as serve_conversation

        stop = asyncio.Event()
        llm_bus = await Bus.connect(config, "conversation-llm")
        starters: dict[str, Callable[[], Awaitable[None]]] = {
            n: partial(load_serve(n), config, stop) for n in others
        }
        starters["conversation"] = lambda: serve_conversation(
            config, stop, llm=make_llm_port(config, bus=llm_bus)
        )
        tasks = [asyncio.create_task(_restarting(name, start, stop)) for name, start in starters.items()]
        bus = await Bus.connect(config, "cluster-client")
        with killed_on_exit([runner]):
            try:
                runner.start()
                names = (*others, "conversation", "tool_runner")
                ready = asyncio.ensure_future(wait_answering(bus.nc, names, processes=(runner,)))
                done, _ = await asyncio.wait([ready, *tasks], return_when=asyncio.FIRST_COMPLETED)
                if ready not in done:
                    ready.cancel()
                    for task in done:
                        task.result()
                    raise AssertionError("a service stopped before every service answered")
                ready.result()
                client = await JidoClient.connect(project_dir=project, bus=bus, settings=FAST)
                turn = asyncio.ensure_future(client.send_message("Run the script.", timeout=90))

                async def side_effect_done() -> None:
                    # the file the call writes: no event says its shell got past the echo
                    while not (side.exists() and side.read_text()):  # noqa: ASYNC110
                        await asyncio.sleep(0.05)

                try:
                    await asyncio.wait_for(side_effect_done(), 30)  # the call runs: echoed, now sleeping
                except TimeoutError:
                    held = [(e["type"], e.get("data")) for e in await client.get_timeline()]
                    raise AssertionError(
                        f"the tool call did not run: the conversation holds {held}"
                    ) from None
                assert not turn.done()
                runner.kill()  # SIGKILL, mid-call
                killed_at = time.monotonic()
                runner.start()  # restart: unless-stopped
                answer = await asyncio.wait_for(turn, 90)
                finished = time.monotonic() - killed_at
                timeline = await client.get_timeline()
            except BaseException:
                log.error("tool runner output:\n%s", runner.output()[-4000:])
                raise
            finally:
                stop.set()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
                with contextlib.suppress(TimeoutError, AssertionError):
                    await runner.terminate()
                await bus.close()
                await llm_bus.close()
    tool_entries = [
        str(e["type"]) for e in timeline if str(e.get("type", "")).startswith("conversation.tool.")
    ]
    results = [e for e in timeline if e.get("type") in (ToolCallCompleted.TYPE, ToolCallFailed.TYPE)]
    assert len(results) == 1, results
    data = results[0].get("data") or {}
    outcome = "completed" if results[0]["type"] == ToolCallCompleted.TYPE else str(data.get("error_type"))
    return ToolRunnerKillRun(
        answer=answer,
        side_effect=side.read_text().splitlines(),
        tool_outcome=outcome,
        tool_message=str(data.get("message") or ""),
        finished_after_kill_s=finished,
        tool_entries=tool_entries,
    )
