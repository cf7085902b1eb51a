"""Retention (decision 0325): a prune deletes the conversations that ended days ago — journal,
stored output and input, records and token ledger, checked on the server — and keeps a running or
recently active one; a dry run changes nothing; ``conversations.retention_days`` prunes by itself."""

from __future__ import annotations

import asyncio
import json
import secrets

import pytest

from jidocode.services.conversation import deletion
from jidocode.services.conversation.ports import LlmToolSpec
from jidocode.services.conversation.record import record_key
from jidocode.shared import subjects
from jidocode.shared.bus import Bus, subject_of
from jidocode.shared.clients import ConversationsClient
from jidocode.shared.config import Config
from jidocode.shared.errors import NotFound
from jidocode.shared.events.conversation import ConversationStopped
from jidocode.shared.ledger import BUCKET_LEDGER, ledger_key, subagent_key

from ._support import (
    Outputs,
    ScriptLlm,
    ToolsDouble,
    answer,
    answer_list_tools,
    conversations,
    follow,
    register_project,
    running_service,
)


async def _stored(bus: Bus, stream: str, subject: str) -> int:
    """Messages of ``subject`` in ``stream``, as the server counts them."""
    info = await bus.js.stream_info(stream, subjects_filter=subject)
    return sum((info.state.subjects or {}).values())


async def _ledger_messages(bus: Bus, project: str, cid: str) -> int:
    key = ledger_key(project, cid)
    stream = f"KV_{BUCKET_LEDGER}"
    return await _stored(bus, stream, f"$KV.{BUCKET_LEDGER}.{key}") + await _stored(
        bus, stream, f"$KV.{BUCKET_LEDGER}.{key}.>"
    )


async def _record_messages(bus: Bus, project: str, cid: str) -> int:
    bucket = subjects.BUCKET_CONVERSATIONS
    return await _stored(bus, f"KV_{bucket}", f"$KV.{bucket}.{record_key(project, cid)}")


async def _until_purged(bus: Bus, subject: str, patience_s: float = 60.0) -> None:
    """Until nothing of ``subject`` is left in the journal (the stream has no change notification
    for a purge: its count is read again, a short pause between reads), or fail at ``patience_s``."""

    async def purged() -> None:
        while await _stored(bus, subjects.STREAM_JOURNAL, subject):  # noqa: ASYNC110  (a purge has no event)
            await asyncio.sleep(0.05)

    try:
        await asyncio.wait_for(purged(), patience_s)
    except TimeoutError:
        pytest.fail(f"{subject} still has journal messages after {patience_s:g} s")


async def _stored_of(bus: Bus, project: str, cid: str) -> tuple[int, int, int, int]:
    """Journal entries, stored output, inputs and ledger messages of ``cid`` on the server."""
    return (
        await _stored(bus, subjects.STREAM_JOURNAL, subjects.journal(project, cid)),
        await _stored(bus, subjects.STREAM_EVENTS, subjects.conversation_out_filter(project, cid)),
        await _stored(bus, subjects.STREAM_CONV_IN, subjects.conversation_in(project, cid)),
        await _ledger_messages(bus, project, cid),
    )


async def _with_usage(bus: Bus, project: str, cid: str) -> None:
    """Ledger entries as the LLM calls leave them: the conversation's totals and a sub-agent's."""
    ledger = await bus.kv(BUCKET_LEDGER, history=1)
    await ledger.put(ledger_key(project, cid), json.dumps({"total_tokens": 13}).encode())
    await ledger.put(subagent_key(project, cid, f"{cid}-child"), json.dumps({"total_tokens": 5}).encode())


async def _own_project(config: Config) -> str:
    """A project of this test alone: a prune of another test's project (the server is shared
    by the session) must not see this one's conversations, nor this one theirs."""
    project = f"prune{secrets.token_hex(4)}"
    await register_project(config, project)
    return project


async def _one_turn(bus: Bus, client: ConversationsClient, cid: str) -> None:
    out = await follow(bus, cid, client.project_id)
    await client.start(cid)
    await client.send_message(cid, f"hello {cid}")
    await out.wait_type("conversation.assistant.message")


async def _setup(bus: Bus, config: Config) -> ConversationsClient:
    """A client of a project of this test's own, whose ``list_tools`` is answered."""
    project = await _own_project(config)
    await answer_list_tools(bus, [LlmToolSpec(name="read_file")], project)
    return conversations(bus, project)


async def test_prune_deletes_an_ended_conversation_and_keeps_a_running_one(bus: Bus, config: Config) -> None:
    llm = ScriptLlm(answer("old answer"), answer("live answer"))
    client = await _setup(bus, config)
    p = client.project_id
    async with running_service(config, llm, ToolsDouble()) as runtime:
        for cid in ("old-1", "live-1"):
            await _one_turn(bus, client, cid)
            await _with_usage(bus, p, cid)
        await client.stop("old-1")
        assert record_key(p, "live-1") in runtime.owned  # loaded: it runs here
        old, live = await _stored_of(bus, p, "old-1"), await _stored_of(bus, p, "live-1")
        assert all(old) and all(live)

        # last active seconds ago: not older than a day
        recent = await client.prune(1.0)
        assert recent.conversation_ids == []

        dry = await client.prune(0.0, dry_run=True)
        assert (dry.dry_run, dry.conversation_ids) == (True, ["old-1"])
        assert await _stored_of(bus, p, "old-1") == old  # a dry run changes nothing
        assert (await client.list(conversation_id="old-1")).conversations

        pruned = await client.prune(0.0)
        assert pruned.conversation_ids == ["old-1"]
        assert await _stored_of(bus, p, "old-1") == (0, 0, 0, 0)
        with pytest.raises(NotFound):
            await client.get_projection("old-1", "timeline")
        assert await _stored_of(bus, p, "live-1") == live  # the running one is untouched
        assert (await client.get_projection("live-1", "timeline")).value


async def test_a_later_prune_drops_the_tombstone_once_the_id_is_free(
    bus: Bus, config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    llm = ScriptLlm(answer("old answer"), answer("fresh answer"))
    client = await _setup(bus, config)
    p = client.project_id
    async with running_service(config, llm, ToolsDouble()):
        await _one_turn(bus, client, "old-2")
        await client.stop("old-2")
        assert (await client.prune(0.0)).conversation_ids == ["old-2"]
        assert await _record_messages(bus, p, "old-2")  # its tombstone, inside the duplicate window
        assert (await client.prune(0.0)).tombstones == 0

        monkeypatch.setattr(deletion, "REUSE_AFTER_S", -1.0)  # as if the window had passed
        assert (await client.prune(0.0, dry_run=True)).tombstones == 0  # a dry run keeps it
        assert (await client.prune(0.0)).tombstones == 1
        assert await _record_messages(bus, p, "old-2") == 0  # nothing of it left in the records
        again = await client.start("old-2")
        assert not again.reopened


async def test_retention_days_prunes_without_being_asked(
    bus: Bus, config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a retention of about nine seconds, swept every half second
    (config.jido_home / "settings.json").write_text(json.dumps({"conversations": {"retention_days": 1e-4}}))
    monkeypatch.setenv("JIDO_RETENTION_SWEEP_S", "0.5")
    llm = ScriptLlm(answer("old answer"), answer("live answer"))
    client = await _setup(bus, config)
    p = client.project_id
    async with running_service(config, llm, ToolsDouble()) as runtime:
        for cid in ("old-3", "live-3"):
            await _one_turn(bus, client, cid)
        await client.stop("old-3")
        # the stop's own signal is out; the next one is the prune's delete
        signals = Outputs()
        stopped = ConversationStopped(project_id=p, conversation_id="old-3")
        await bus.subscribe(subject_of(stopped, p, "old-3"), signals.handler)
        await bus.nc.flush()

        [deleted] = await signals.wait_type(ConversationStopped.TYPE, timeout=60)
        assert deleted.data["reason"] == "deleted"
        # the stop is said before the purge that follows it: wait for the purge to be done
        await _until_purged(bus, subjects.journal(p, "old-3"))
        assert not (await client.list(conversation_id="old-3")).conversations
        assert record_key(p, "live-3") in runtime.owned
        assert (await client.get_projection("live-3", "timeline")).value
