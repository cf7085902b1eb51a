"""Claude Code as a provider: ``claude -p --output-format stream-json --verbose``.

Command line: ``claude [args] -p --output-format stream-json --verbose [--model m]
--permission-mode <mode>`` with the prompt on stdin (``-p`` without a prompt argument reads it
there). ``--permission-mode``: ``acceptEdits`` for ``approval_policy="never"`` (file edits go
through; a tool that would ask is refused, since nobody answers in print mode), ``default`` else.

Native events (one JSON object per line): ``system`` (``subtype: "init"``, ``session_id``,
``model``, ``tools``), ``assistant`` / ``user`` messages (``message.content`` blocks: ``text``,
``thinking``, ``tool_use`` (``id``, ``name``, ``input``); ``tool_result`` (``tool_use_id``,
``content`` as text or text blocks, ``is_error``)), and the final ``result`` (``subtype``:
``success`` / ``error_max_turns`` / ``error_during_execution``, ``is_error``, ``result``,
``usage``, ``total_cost_usd``, ``num_turns``, ``duration_ms``). Assumed where the documentation is
silent: an API failure is a ``result`` with ``subtype: "success"`` and ``is_error: true`` whose
``result`` is the message (what the CLI prints for a bad key).
"""

from __future__ import annotations

from typing import Any, Final

from jidocode.services.prd.config import ProviderSettings

from .base import IterationRequest, ProviderCapabilities, ProviderContext, ProviderEvent, full_prompt
from .cli_stream import CliFlavor, CliProvider
from .login import CLAUDE
from .sequence import classify, clip_input, usage_metadata

__all__ = ["FLAVOR", "build", "create", "normalize"]


def build(request: IterationRequest, settings: ProviderSettings, model: str) -> tuple[list[str], str | None]:
    """``-p --output-format stream-json --verbose …`` and the prompt for stdin."""
    mode = "acceptEdits" if request.approval_policy == "never" else "default"
    args = ["-p", "--output-format", "stream-json", "--verbose"]
    if model:
        args += ["--model", model]
    return [*args, "--permission-mode", mode], full_prompt(request)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _blocks(native: dict[str, Any]) -> list[dict[str, Any]]:
    message = native.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _result_text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(_text(b.get("text")) for b in content if isinstance(b, dict))
    return _text(content)


def _result(native: dict[str, Any]) -> list[ProviderEvent]:
    subtype = _text(native.get("subtype"))
    text = _text(native.get("result"))
    meta = usage_metadata(native.get("usage"))
    for key in ("num_turns", "duration_ms"):
        value = native.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            meta[f"usage.{key}"] = str(value)
    cost = native.get("total_cost_usd")
    if isinstance(cost, int | float) and not isinstance(cost, bool):
        meta["cost_usd"] = f"{cost:.6f}"
    if subtype == "success" and not native.get("is_error"):
        return [ProviderEvent(kind="iteration_finished", text=text, metadata=meta)]
    message = text or f"claude ended with {subtype or 'an error'}"
    failure = "transient" if subtype.startswith("error_") else classify(message)
    return [
        ProviderEvent(kind="error", text=message, metadata={**meta, "failure": failure, "subtype": subtype})
    ]


def normalize(native: dict[str, Any]) -> list[ProviderEvent]:
    """One ``stream-json`` line of Claude Code to normalized events (pure)."""
    match native.get("type"):
        case "system" if native.get("subtype") == "init":
            meta = {k: _text(native.get(k)) for k in ("session_id", "model") if native.get(k)}
            return [ProviderEvent(kind="iteration_started", metadata=meta)]
        case "assistant":
            out: list[ProviderEvent] = []
            for block in _blocks(native):
                if block.get("type") == "text" and _text(block.get("text")):
                    out.append(ProviderEvent(kind="assistant_text", text=_text(block.get("text"))))
                elif block.get("type") == "tool_use":
                    name = _text(block.get("name"))
                    raw = block.get("input")
                    args: dict[str, Any] = raw if isinstance(raw, dict) else {}
                    out.append(
                        ProviderEvent(
                            kind="tool_started",
                            tool=name,
                            call_id=_text(block.get("id")),
                            input=clip_input(args),
                            command=_text(args.get("command")) if name == "Bash" else "",
                        )
                    )
            return out
        case "user":
            return [
                ProviderEvent(
                    kind="tool_finished",
                    call_id=_text(block.get("tool_use_id")),
                    ok=not block.get("is_error"),
                    text=_result_text(block.get("content")),
                )
                for block in _blocks(native)
                if block.get("type") == "tool_result"
            ]
        case "result":
            return _result(native)
    return []


FLAVOR: Final = CliFlavor(
    key="claude",
    default_command="claude",
    login=CLAUDE,
    build=build,
    normalize=normalize,
    capabilities=ProviderCapabilities(
        streaming=True,
        tool_calls=True,
        sandbox_control=False,
        approval_modes=["never", "on-request"],
        max_context_hint=200_000,
    ),
)


def create(settings: ProviderSettings, context: ProviderContext) -> CliProvider:
    """The registry's factory."""
    return CliProvider(FLAVOR, settings, context)
