"""Compaction end to end (docs/compaction-and-replay.md): every service, real litellm against the
scripted model, a conversation with a small configured window.

It is driven past its window and keeps working: the threshold compacts before the next call,
an ``llm_context_overflow`` gets one compaction and one retry, ``compact()`` compacts on demand;
the model gets the summary plus the recent turns; nothing leaves the timeline; and the export
of the compacted conversation replays to the same projections.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from jidocode.cli.dev.scripted_llm import Reply
from jidocode.cli.replay import export_recording, replay_recording
from jidocode.services.conversation.compaction import COMPACT_SYSTEM_PROMPT
from jidocode.services.conversation.core.context import SUMMARY_PREFIX
from jidocode.shared.clients import ConversationsClient
from tests.e2e import test_chat
from tests.e2e.test_chat import System

#: The whole-system fixtures of ``test_chat`` (every service, the scripted LLM).
system = test_chat.system
llm_server = test_chat.llm_server

pytestmark = pytest.mark.slow

SMALL = {"context_window": 2000, "compact_at": 0.5, "compact_keep_turns": 1}
#: The first message, long enough that its summary is much shorter.
FIRST = "Remember: our API is called Falcon." + " Background we will not need again." * 60


def _conversation(request: dict[str, Any]) -> list[tuple[str, str]]:
    """The request's messages without the system prompt, as (role, content)."""
    return [(m["role"], str(m.get("content") or "")) for m in request["messages"] if m["role"] != "system"]


async def test_a_conversation_past_its_window_keeps_working_and_replays_the_same(
    system: System, tmp_path: Path
) -> None:
    snapshot = tmp_path / "snapshot"
    shutil.copytree(system.project, snapshot)
    client = await system.client(**SMALL)

    # 1. the first answer fills 61 % of the 2,000-token window
    system.llm.script(
        Reply.answer("Noted: the API is called Falcon.", prompt_tokens=1200, completion_tokens=20)
    )
    assert (await client.send_message(FIRST, timeout=60)).startswith("Noted")

    # 2. over compact_at (0.5): the next message is preceded by the summary call
    system.llm.script(
        Reply.answer("The user said the API is called Falcon.", prompt_tokens=300, completion_tokens=15),
        Reply.answer("Falcon it is.", prompt_tokens=200, completion_tokens=5),
    )
    assert await client.send_message("What is it called?", timeout=60) == "Falcon it is."
    requests = await system.llm.wait_requests(3)
    summary_call = requests[1]
    assert summary_call["messages"][0] == {"role": "system", "content": COMPACT_SYSTEM_PROMPT}
    assert "Remember: our API is called Falcon." in summary_call["messages"][1]["content"]
    assert not summary_call.get("tools")
    after = _conversation(requests[2])
    assert after[0][1].startswith(SUMMARY_PREFIX) and "called Falcon" in after[0][1]
    assert after[1:] == [("user", "What is it called?")]

    # 3. the provider says the context overflows: one compaction, one retry
    system.llm.script(
        Reply.context_overflow(),
        Reply.answer("Summary: Falcon, asked twice.", prompt_tokens=100, completion_tokens=8),
        Reply.answer("Still Falcon.", prompt_tokens=150, completion_tokens=4),
    )
    assert await client.send_message("And now?", timeout=60) == "Still Falcon."
    requests = await system.llm.wait_requests(6)
    assert requests[4]["messages"][0]["content"] == COMPACT_SYSTEM_PROMPT
    retry = _conversation(requests[5])
    assert retry[0][1].endswith("Summary: Falcon, asked twice.") and retry[1:] == [("user", "And now?")]

    # 4. on demand
    system.llm.script(
        Reply.answer("Falcon; the user checks the name.", prompt_tokens=90, completion_tokens=7)
    )
    result = await client.compact("keep the API name")
    assert result.compacted and result.tokens_after < result.tokens_before
    assert (
        "keep in particular: keep the API name"
        in (await system.llm.wait_requests(7))[6]["messages"][1]["content"]
    )

    history = await client.get_history()
    assert history[0]["content"].endswith("Falcon; the user checks the name.")
    timeline = await client.get_timeline()
    users = [e["data"]["text"] for e in timeline if e["type"] == "conversation.user.message"]
    assert users == [
        FIRST,
        "What is it called?",
        "And now?",
    ]  # nothing deleted
    done = [e["data"] for e in timeline if e["type"] == "conversation.compaction.completed"]
    assert [d["reason"] for d in done] == ["threshold", "overflow", "manual"]
    assert done[0]["tokens_before"] == 1220 and 0 < done[0]["tokens_after"] < 1220
    assert done[0]["first_id"] == timeline[0]["id"]
    assert [e["type"] for e in timeline].count("conversation.llm.failed") == 1

    # the compacted conversation replays to the same projections (summaries come from the recording)
    assert client.conversation_id is not None
    recording = await export_recording(
        ConversationsClient(system.bus, client.project_id, timeout=30),
        client.conversation_id,
        root_path=str(system.project),
        trusted=True,
    )
    assert len(recording.answers) == 7
    report = await replay_recording(recording, project_dir=snapshot, step_timeout=90)
    assert report.same, report.describe()
