"""Assembling a streamed completion (pure, no litellm types).

The adapter feeds what each chunk carries: text, tool-call fragments
(OpenAI streams a call as ``index``+``id``+``name`` first, then its
arguments in pieces), the finish reason and usage. :meth:`StreamAssembler.result`
returns every tool call of the turn, in index order.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from jidocode.services.conversation.ports import LlmResult, LlmTokenUsage, LlmToolCall

__all__ = ["INVALID_ARGUMENTS_KEY", "StreamAssembler"]

#: A tool call whose arguments are not a JSON object keeps the raw text under this key,
#: so the tool runner rejects it with a message the model can act on.
INVALID_ARGUMENTS_KEY = "_invalid_arguments"


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class StreamAssembler:
    text: list[str] = field(default_factory=list)
    calls: dict[int, _PartialCall] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: LlmTokenUsage | None = None
    model: str = ""

    def add_text(self, piece: str) -> None:
        if piece:
            self.text.append(piece)

    def add_tool_fragment(
        self, index: int, call_id: str | None, name: str | None, arguments: str | None
    ) -> None:
        call = self.calls.setdefault(index, _PartialCall())
        if call_id:
            call.id = call_id
        if name:
            # Some providers repeat the name on every fragment; most send it once.
            call.name = name if not call.name or call.name == name else call.name + name
        if arguments:
            call.arguments.append(arguments)

    def tool_calls(self) -> list[LlmToolCall]:
        out: list[LlmToolCall] = []
        for index in sorted(self.calls):
            call = self.calls[index]
            raw = "".join(call.arguments)
            args: dict[str, object]
            try:
                parsed = json.loads(raw) if raw.strip() else {}
                args = parsed if isinstance(parsed, dict) else {INVALID_ARGUMENTS_KEY: raw}
            except json.JSONDecodeError:
                args = {INVALID_ARGUMENTS_KEY: raw}
            out.append(LlmToolCall(id=call.id or f"call_{index}", name=call.name, arguments=args))
        return out

    def result(self) -> LlmResult:
        return LlmResult(
            content="".join(self.text),
            tool_calls=self.tool_calls(),
            usage=self.usage or LlmTokenUsage(),
            model=self.model,
            finish_reason=self.finish_reason,
        )
