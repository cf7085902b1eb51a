"""``jidocode prd draft``: the model writes a PRD from prose; the user reads it and accepts it.

One conversation of the project (through :class:`ConversationsClient`, so the project's policy,
sandbox and LLM settings apply) is shown only the read-only built-in tools (``read_file``,
``list_dir``, ``glob``, ``grep``): a tool the model was not offered never reaches the tool runner.
An approval it asks for is denied (nobody is asked while the model writes) and said on stderr.
Its text streams to stderr as it is written (control characters shown as U+FFFD); the answer
is parsed (:func:`jidocode.services.prd.draft.parse_draft`: a malformed one is an error naming
what it lacks, and nothing is written), shown, and created (``prd.json`` and ``prd.md``) once
the user accepts (``--yes`` for scripts).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from rich.text import Text

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.clients import ConversationsClient
from jidocode.shared.envelope import Envelope, new_id
from jidocode.shared.errors import InvalidInput, JidoError, RequestTimeout
from jidocode.shared.events.conversation import (
    ApprovalRequested,
    ApprovalResponse,
    AssistantDelta,
    UserMessage,
)
from jidocode.shared.tools.specs import BUILTIN_SPECS

from .common import cli_bus, err_console, resolve_project
from .prd_render import safe

if TYPE_CHECKING:
    from jidocode.services.prd.draft import Draft
    from jidocode.services.prd.providers.turn import Outcome

__all__ = ["READ_ONLY_TOOLS", "DraftRun", "ask_for_draft", "feature_text", "show_draft"]

#: The tools a drafting conversation is shown: the built-ins that change nothing.
READ_ONLY_TOOLS: Final = tuple(t.name for t in BUILTIN_SPECS if t.access == "read")
#: Seconds one request to a service is waited for.
_REQUEST_S: Final = 30.0


def feature_text(description: str, notes_file: str) -> str:
    """The prose to draft from: the description argument or the ``--from`` file (one of them)."""
    from jidocode.services.prd.draft import MAX_FEATURE_CHARS

    if bool(description) == bool(notes_file):
        raise InvalidInput('give the feature as one argument ("<description>") or as --from <notes.md>')
    if description:
        text = description
    else:
        try:
            with Path(notes_file).expanduser().open(encoding="utf-8") as fh:
                text = fh.read(MAX_FEATURE_CHARS + 1)
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidInput(f"cannot read {notes_file}: {exc}", details={"path": notes_file}) from None
    if not text.strip():
        raise InvalidInput("the feature description is empty")
    if len(text) > MAX_FEATURE_CHARS:
        raise InvalidInput(f"the feature description is over {MAX_FEATURE_CHARS} characters")
    return text


@dataclass
class DraftRun:
    """One drafting turn: the conversation started, the prompt sent, its output followed."""

    bus: Bus
    project_id: str
    on_text: Callable[[str], None]
    on_note: Callable[[str], None]
    model: str = ""

    async def ask(self, prompt: str, *, timeout_s: float) -> str:
        """The model's final answer to ``prompt`` (``JidoError`` when the turn did not answer)."""
        from jidocode.services.prd.providers.turn import Turn

        conversation_id = new_id().lower()
        message_id = new_id()
        turn = Turn(message_id=message_id)
        client = ConversationsClient(self.bus, self.project_id, timeout=_REQUEST_S)
        ended: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()

        async def on_event(env: Envelope) -> None:
            data: dict[str, Any] = env.data if isinstance(env.data, dict) else {}
            outcome = turn.feed(env.type, data, event_id=env.id, correlation_id=env.correlation_id)
            if turn.started and not ended.done():
                await self._seen(client, conversation_id, env.type, data)
            if outcome is not None and not ended.done():
                ended.set_result(outcome)

        sub = await self.bus.subscribe(
            subjects.conversation_out_filter(self.project_id, conversation_id), on_event
        )
        try:
            await self.bus.nc.flush()
            settings: dict[str, Any] = {"tools": {"expose": list(READ_ONLY_TOOLS)}}
            if self.model:
                settings["model"] = self.model
            await client.start(conversation_id, settings=settings)
            message = UserMessage(text=prompt)
            await client.send_event(
                conversation_id,
                message.type,
                message.to_data(),
                event_id=message_id,
                correlation_id=message_id,
            )
            outcome = await _within(ended, timeout_s)
        finally:
            with contextlib.suppress(JidoError, OSError):
                await sub.unsubscribe()
            with contextlib.suppress(JidoError):
                await client.stop(conversation_id, reason="PRD draft written")
        if outcome.status != "answered":
            kind = f"{outcome.error_type}: " if outcome.error_type else ""
            raise JidoError(f"the model did not write the draft ({outcome.status}): {kind}{outcome.message}")
        return outcome.text

    async def _seen(
        self, client: ConversationsClient, conversation_id: str, kind: str, data: dict[str, Any]
    ) -> None:
        if kind == AssistantDelta.TYPE and isinstance(data.get("text"), str):
            self.on_text(safe(data["text"]))
        elif kind == ApprovalRequested.TYPE:
            tool = safe(str(data.get("tool", "")))
            self.on_note(f"{tool} needs an approval: denied while the draft is written")
            answer = ApprovalResponse(request_id=str(data.get("request_id", "")), decision="deny")
            with contextlib.suppress(JidoError):
                await client.send_event(conversation_id, answer.type, answer.to_data())


async def _within(ended: asyncio.Future[Outcome], timeout_s: float) -> Outcome:
    try:
        return await asyncio.wait_for(ended, timeout_s)
    except TimeoutError:
        raise RequestTimeout(f"the model did not finish the draft within {timeout_s:g} s") from None


def show_draft(name: str, draft: Draft) -> list[Text]:
    """The draft as lines for the terminal (model text: never markup, no control characters)."""
    lines = [Text.assemble(("PRD ", "dim"), (name, "bold"), "  ", safe(draft.title))]
    if draft.description:
        lines.append(Text(safe(draft.description), style="dim"))
    for n, story in enumerate(draft.stories, start=1):
        sid = story.id or f"US-{n:03d}"
        lines.append(
            Text.assemble(
                (safe(sid), "bold"), " ", safe(story.title), (f"  priority {story.priority}", "dim")
            )
        )
        lines.extend(Text(safe(f"    - {c}")) for c in story.acceptance_criteria)
    return lines


async def ask_for_draft(project_dir: str, name: str, feature: str, model: str, timeout_s: float) -> Draft:
    """The model's draft of PRD ``name`` (its text streamed to stderr as it comes), parsed."""
    from jidocode.services.prd.draft import draft_prompt, parse_draft

    def on_text(piece: str) -> None:
        sys.stderr.write(piece)
        sys.stderr.flush()

    def on_note(note: str) -> None:
        err_console.print(Text(f"\n({note})", style="yellow"), highlight=False)

    async with cli_bus("prd") as bus:
        info = await resolve_project(bus, project_dir)
        err_console.print(Text.assemble("drafting ", (name, "bold"), " …", style="dim"), highlight=False)
        answer = await DraftRun(bus, info.project_id, on_text, on_note, model=model).ask(
            draft_prompt(name, feature), timeout_s=timeout_s
        )
    sys.stderr.write("\n")
    return parse_draft(answer)
