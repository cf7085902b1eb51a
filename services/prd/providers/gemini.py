"""Gemini CLI as a provider: ``gemini --output-format stream-json``.

Command line: ``gemini [args] --output-format stream-json [-m model] --approval-mode <mode>
-p <prompt>``; the prompt is one argv item (the CLI appends stdin to ``-p``, so stdin stays
empty), at most :data:`PROMPT_CAP` bytes (the kernel's limit of one argument is 128 KiB).
``--approval-mode``: ``auto_edit`` for ``approval_policy="never"``, ``default`` else.

Native events (``JsonStreamEventType``): ``init`` (``session_id``, ``model``), ``message``
(``role`` user/assistant, ``content``, ``delta``: a piece of a streamed answer), ``tool_use``
(``tool_name``, ``tool_id``, ``parameters``), ``tool_result`` (``tool_id``, ``status``
success/error, ``output``, ``error.message``), ``error`` (``severity`` warning/error,
``message``), ``result`` (``status``, ``error``, ``stats``: ``total_tokens``, ``input_tokens``,
``output_tokens``, ``duration_ms``, ``tool_calls``). Assumed: the shell tool is
``run_shell_command`` with a ``command`` parameter (its output is then the command's output).
"""

from __future__ import annotations

from typing import Any, Final

from jidocode.services.prd.config import ProviderSettings

from .base import (
    IterationRequest,
    ProviderCapabilities,
    ProviderContext,
    ProviderError,
    ProviderEvent,
    full_prompt,
)
from .cli_stream import CliFlavor, CliProvider
from .login import GEMINI
from .sequence import classify, clip_input, usage_metadata

__all__ = ["FLAVOR", "PROMPT_CAP", "build", "create", "normalize"]

#: Bytes of a prompt passed as one argument.
PROMPT_CAP: Final = 120_000
_SHELL: Final = "run_shell_command"


def build(request: IterationRequest, settings: ProviderSettings, model: str) -> tuple[list[str], str | None]:
    """``--output-format stream-json … -p <prompt>`` (no stdin)."""
    prompt = full_prompt(request)
    size = len(prompt.encode())
    if size > PROMPT_CAP:
        raise ProviderError(
            "fatal", f"the prompt is {size} bytes; gemini takes it as one argument of at most {PROMPT_CAP}"
        )
    mode = "auto_edit" if request.approval_policy == "never" else "default"
    args = ["--output-format", "stream-json"]
    if model:
        args += ["-m", model]
    return [*args, "--approval-mode", mode, "-p", prompt], None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _error_message(native: dict[str, Any]) -> str:
    error = native.get("error")
    return _text(error.get("message")) if isinstance(error, dict) else ""


def normalize(native: dict[str, Any]) -> list[ProviderEvent]:
    """One ``stream-json`` line of Gemini CLI to normalized events (pure)."""
    match native.get("type"):
        case "init":
            meta = {k: _text(native.get(k)) for k in ("session_id", "model") if native.get(k)}
            return [ProviderEvent(kind="iteration_started", metadata=meta)]
        case "message" if native.get("role") == "assistant":
            text = _text(native.get("content"))
            if not text:
                return []
            meta = {"delta": "true"} if native.get("delta") is True else {}
            return [ProviderEvent(kind="assistant_text", text=text, metadata=meta)]
        case "tool_use":
            name = _text(native.get("tool_name"))
            raw = native.get("parameters")
            args: dict[str, Any] = raw if isinstance(raw, dict) else {}
            return [
                ProviderEvent(
                    kind="tool_started",
                    tool=name,
                    call_id=_text(native.get("tool_id")),
                    input=clip_input(args),
                    command=_text(args.get("command")) if name == _SHELL else "",
                )
            ]
        case "tool_result":
            ok = native.get("status") == "success"
            text = (
                _text(native.get("output")) if ok else _error_message(native) or _text(native.get("output"))
            )
            return [
                ProviderEvent(kind="tool_finished", call_id=_text(native.get("tool_id")), ok=ok, text=text)
            ]
        case "error" if native.get("severity") != "warning":
            message = _text(native.get("message")) or "gemini reported an error"
            return [ProviderEvent(kind="error", text=message, metadata={"failure": classify(message)})]
        case "result":
            if native.get("status") == "success":
                return [
                    ProviderEvent(kind="iteration_finished", metadata=usage_metadata(native.get("stats")))
                ]
            message = _error_message(native) or "gemini ended with an error"
            return [ProviderEvent(kind="error", text=message, metadata={"failure": classify(message)})]
    return []


FLAVOR: Final = CliFlavor(
    key="gemini",
    default_command="gemini",
    login=GEMINI,
    build=build,
    normalize=normalize,
    capabilities=ProviderCapabilities(
        streaming=True,
        tool_calls=True,
        sandbox_control=True,
        approval_modes=["never", "on-request"],
        max_context_hint=1_000_000,
    ),
)


def create(settings: ProviderSettings, context: ProviderContext) -> CliProvider:
    """The registry's factory."""
    return CliProvider(FLAVOR, settings, context)
