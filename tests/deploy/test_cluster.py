"""Three NATS nodes on one machine: JetStream data with 3 replicas survives the loss of a node, a
conversation running across a node kill finishes with nothing lost from its journal, and one whose
tool call is running when the tool runner is killed finishes with the call's side effect done once."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import nats.errors
import nats.js.errors
import pytest
from nats.js.api import DeliverPolicy

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.events.tools import ToolCancelRequested

from .cluster import Cluster, nats_cluster, stream_leader, wait_jetstream_cluster, wait_leaders_elected
from .conversation_system import (
    FINAL,
    TOOL_FINAL,
    KillRun,
    run_conversation_across_kill,
    run_conversation_across_tool_runner_kill,
)

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with nats_cluster(tmp_path / "cluster") as c:
        yield c


@pytest.fixture
async def cluster_config(cluster: Cluster, tmp_path: Path) -> AsyncIterator[Config]:
    await wait_jetstream_cluster(cluster.url)
    home = tmp_path / "home"
    home.mkdir()
    yield Config(nats_url=cluster.url, jido_home=home, js_replicas=3, instance="cluster-test")


async def _read_subject(url: str, stream: str, subject: str) -> list[bytes]:
    """Every message of ``subject`` in ``stream``, in order, read through any live node."""
    nc = await nats.connect(url.split(","), connect_timeout=2)
    try:
        js = nc.jetstream()
        info = await js.stream_info(stream)
        total = info.state.messages
        sub = await js.subscribe(
            subject, stream=stream, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL
        )
        out = []
        try:
            while True:
                msg = await sub.next_msg(timeout=10)
                out.append(msg.data)
                if msg.metadata.sequence.stream >= total:
                    return out
        finally:
            await sub.unsubscribe()
    finally:
        await nc.close()


async def test_replicated_streams_and_kv_survive_a_leader_kill(
    cluster: Cluster, cluster_config: Config
) -> None:
    bus = await Bus.connect(cluster_config, "cluster-test")
    try:
        assert bus.replicas == 3
        await bus.ensure_stream(subjects.STREAM_JOURNAL, [subjects.journal_filter()])
        kv = await bus.kv(subjects.BUCKET_TOOL_CALLS, history=1)
        subject = subjects.journal("p1", "c1")
        before = [
            await bus.js_publish(subject, ToolCancelRequested(project_id="p1", request_id=f"r{i}"))
            for i in range(20)
        ]
        await kv.put("k1", b"before")
        info = await bus.js.stream_info(subjects.STREAM_JOURNAL)
        assert info.config.num_replicas == 3

        leader = await stream_leader(cluster.url, subjects.STREAM_JOURNAL)
        cluster.node(leader).kill()  # SIGKILL: a crash, not a graceful shutdown

        # The bus retries through the election with the same message id.
        after = [
            await bus.js_publish(subject, ToolCancelRequested(project_id="p1", request_id=f"s{i}"))
            for i in range(20)
        ]
        # Reads need the bucket's own leader (which may have been on the same node) and the meta
        # leader for new consumers: wait for the elections, then nothing may be missing.
        live = ",".join(n.url for n in cluster.alive())
        await wait_leaders_elected(live, leader)
        assert (await kv.get("k1")).value == b"before"
        await kv.put("k2", b"after")
        assert (await kv.get("k2")).value == b"after"
        assert before + after == list(range(1, 41))  # every publish acknowledged once, no gap, no duplicate
    finally:
        await bus.close()

    stored = await _read_subject(live, subjects.STREAM_JOURNAL, subjects.journal("p1", "c1"))
    ids = [json.loads(m)["data"]["request_id"] for m in stored]
    assert ids == [f"r{i}" for i in range(20)] + [f"s{i}" for i in range(20)]
    assert await stream_leader(live, subjects.STREAM_JOURNAL) != leader


async def test_bus_js_publish_rides_out_a_leader_election(cluster: Cluster, cluster_config: Config) -> None:
    bus = await Bus.connect(cluster_config, "cluster-test")
    try:
        await bus.ensure_stream(subjects.STREAM_JOURNAL, [subjects.journal_filter()])
        subject = subjects.journal("p1", "c1")
        await bus.js_publish(subject, ToolCancelRequested(project_id="p1", request_id="r0"))
        cluster.node(await stream_leader(cluster.url, subjects.STREAM_JOURNAL)).kill()
        seqs = [
            await bus.js_publish(subject, ToolCancelRequested(project_id="p1", request_id=f"s{i}"))
            for i in range(5)
        ]
        assert seqs == [2, 3, 4, 5, 6]
    finally:
        await bus.close()


def _assert_nothing_lost(result: KillRun) -> None:
    assert result.answer == FINAL
    # Every journal entry written before the kill is still there, in order, followed by the rest.
    assert result.journal_after[: len(result.journal_before_kill)] == result.journal_before_kill
    assert len(result.journal_after) > len(result.journal_before_kill)
    assert len(set(result.journal_after)) == len(result.journal_after)  # no entry twice
    assert result.history[0] == {"role": "user", "content": "What does the readme say?"}
    assert result.history[-1]["content"] == FINAL


async def test_conversation_finishes_after_its_journal_leader_is_killed(
    cluster: Cluster, cluster_config: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node leading the journal stream crashes mid-turn; once the cluster has re-elected its leaders
    (seconds), the turn completes and the journal has lost nothing."""
    result = await run_conversation_across_kill(
        cluster, cluster_config, tmp_path, monkeypatch, victim="leader", settle=True
    )
    assert result.killed == result.leader_before
    _assert_nothing_lost(result)


async def test_conversation_rides_out_the_election_itself(
    cluster: Cluster, cluster_config: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The turn continues the moment a node dies (one that is not the journal's leader, but leads
    other streams or the meta group), while streams and KV buckets elect new leaders."""
    result = await run_conversation_across_kill(
        cluster, cluster_config, tmp_path, monkeypatch, victim="follower", settle=False
    )
    _assert_nothing_lost(result)


async def test_conversation_finishes_when_its_tool_runner_is_killed_mid_call(
    cluster: Cluster, cluster_config: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kill -9 of the tool-runner process while a bash call runs (its echo done, its sleep not): the
    conversation hears nothing from the dead runner, sends the call again with the same request id
    (``tools_bridge``), and the new runner's ledger finds the dead runner's claim. Its side effect
    never runs twice; the call itself is reported ``outcome_unknown`` once the claim's lifetime
    (20 s here) has passed — it is not run again — and the model answers from that."""
    result = await run_conversation_across_tool_runner_kill(cluster, cluster_config, tmp_path, monkeypatch)
    assert result.answer == TOOL_FINAL
    assert result.side_effect == ["ran"]  # once: not lost, not run again
    assert result.tool_outcome == "outcome_unknown", result.tool_message
    assert result.tool_entries == ["conversation.tool.requested", "conversation.tool.failed"]
    print(
        f"tool runner killed mid-call: the conversation finished {result.finished_after_kill_s:.1f} s later"
    )
