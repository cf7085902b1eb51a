"""Every service in this process on a NATS cluster, a gated scripted LLM, and a conversation
that is paused at its second LLM call while a NATS node is killed."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import logging
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
from jidocode.services.conversation.llm import make_llm_port
from jidocode.services.registry import SERVICES, load_serve
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.envelope import decode
from jidocode.shared.errors import JidoError

from .cluster import Cluster, stream_leader, wait_leaders_elected
from .services import wait_answering

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
                ids.append(decode(msg.data, msg.headers).id)
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
