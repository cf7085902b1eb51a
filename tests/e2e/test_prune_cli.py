"""``jidocode conversations prune`` on the whole system (decision 0325): a dry run names the ended
conversation and changes nothing; the prune deletes it and keeps the one still running."""

from __future__ import annotations

import json

import pytest

from jidocode.cli.dev.scripted_llm import Reply
from tests.e2e.test_chat import System
from tests.e2e.test_lifecycle import _cli

pytestmark = pytest.mark.slow


async def test_prune_from_the_cli_deletes_the_ended_conversation_only(system: System) -> None:
    system.llm.script(Reply.answer("ended answer"), Reply.answer("running answer"))
    client = await system.client()
    ended = await client.start_conversation()
    assert await client.send_message("hello", timeout=60) == "ended answer"
    await client.conversations.stop(ended)
    running = await client.start_conversation()
    assert await client.send_message("still here?", timeout=60) == "running answer"
    project = str(system.project)

    code, out, err = await _cli(system, "conversations", "prune", project, "--older-than", "0", "--dry-run")
    assert code == 0, err
    assert f"would delete {ended}" in out and running not in out
    listed = {c.conversation_id for c in (await client.conversations.list()).conversations}
    assert listed == {ended, running}  # a dry run changes nothing

    code, out, err = await _cli(system, "conversations", "prune", project, "--older-than", "0", "--json")
    assert code == 0, err
    assert json.loads(out)["conversation_ids"] == [ended]
    listed = {c.conversation_id for c in (await client.conversations.list()).conversations}
    assert listed == {running}
