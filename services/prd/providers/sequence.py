"""The contract's order over normalized events (pure): what every provider's stream is folded through.

A provider's own mapping (``normalize(native) -> [ProviderEvent]`` of a CLI adapter, the
conversation mapping of the ``jidocode`` provider) looks at one native event at a time and knows
nothing of the ones before. :class:`Sequencer` keeps the little state the contract needs:

- ``iteration_started`` comes first, once (a native one only adds its metadata to the result);
- streamed text pieces (``metadata.delta == "true"``) are joined into one ``assistant_text``;
- a tool call is started once and finished once; a finish without a start gets its start; a tool
  call that ran a command (its start names ``command``) gets one ``command_output`` before its
  finish, whether the native stream had one or not (and none after it);
- terminal events (``iteration_finished``, ``error``; the last error counts) are held back: :meth:`Sequencer.finish`
  emits exactly one of them, last, and the :class:`IterationResult` that goes with it, from what
  was held, how the process ended and whether the run was stopped (cancel, timeout, limits).

Usage travels in the terminal event's metadata as ``usage.<name>`` = integer text; the result
reads it back into ``usage``. Failure kinds of a native error travel as ``metadata.failure``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from typing import Any, Final, get_args

from .base import FailureKind, IterationResult, ProviderEvent

__all__ = [
    "INPUT_CAP",
    "TEXT_CAP",
    "Normalize",
    "Sequencer",
    "classify",
    "clip",
    "clip_input",
    "parse_line",
    "replay",
    "safe_normalize",
    "usage_metadata",
]

#: Characters of tool output, command output or text kept in one event.
TEXT_CAP: Final = 16_384
#: Characters of a tool call's input (as JSON) kept in one event.
INPUT_CAP: Final = 8_192
#: Characters of a process's stderr quoted in an error.
STDERR_QUOTE: Final = 2_000

#: One native event to normalized events (pure; never raises on unexpected shapes).
Normalize = Callable[[dict[str, Any]], list[ProviderEvent]]

_FAILURES: Final = frozenset(get_args(FailureKind))
_CONFIG: Final = re.compile(
    r"\b(401|403|unauthori[sz]ed|forbidden|api[ _-]?key|not logged in|log ?in required|authenticat\w*|"
    r"credentials?|unknown model|invalid model|model \S+ (?:is )?not (?:found|supported)|"
    r"not supported|no such model)\b",
    re.IGNORECASE,
)
_FATAL: Final = re.compile(r"\b(refus\w*|content policy|safety|violat\w*)\b", re.IGNORECASE)


def clip(text: str, cap: int = TEXT_CAP) -> str:
    """``text`` cut to ``cap`` characters, saying how much was cut."""
    if len(text) <= cap:
        return text
    return f"{text[:cap]}… [{len(text) - cap} more characters]"


def clip_input(value: Any, cap: int = INPUT_CAP) -> dict[str, object]:
    """A tool call's input as an event carries it: the mapping, or ``{"truncated": json}`` when large."""
    if not isinstance(value, dict):
        value = {} if value is None else {"value": value}
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return {"unserializable": clip(repr(value), cap)}
    if len(text) <= cap:
        return dict(value)
    return {"truncated": clip(text, cap)}


def classify(message: str) -> FailureKind:
    """The failure kind of a provider's error message: ``config`` (credentials, model), ``fatal``
    (a refusal), else ``transient`` (rate limits, network, crashes: worth another attempt)."""
    if _CONFIG.search(message):
        return "config"
    if _FATAL.search(message):
        return "fatal"
    return "transient"


def usage_metadata(usage: Any, prefix: str = "usage.") -> dict[str, str]:
    """The integer fields of a native usage mapping as terminal-event metadata."""
    out: dict[str, str] = {}
    if isinstance(usage, dict):
        for key, value in usage.items():
            if isinstance(value, bool):
                continue
            if isinstance(value, int):
                out[f"{prefix}{key}"] = str(value)
            elif isinstance(value, float) and key.endswith("_usd"):
                out[f"{prefix}{key}"] = f"{value:.6f}"
    return out


def _usage(metadata: dict[str, str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for key, value in metadata.items():
        if key.startswith("usage.") and value.lstrip("-").isdigit():
            out[key.removeprefix("usage.")] = int(value)
    return out


class Sequencer:
    """Folds one iteration's normalized events into the contract's order (see the module doc)."""

    def __init__(self, provider: str, metadata: dict[str, str] | None = None) -> None:
        self.provider = provider
        self.metadata: dict[str, str] = dict(metadata or {})
        self._opened = False
        self._started: dict[str, ProviderEvent] = {}
        self._outputs: set[str] = set()
        self._finished: set[str] = set()
        self._deltas: list[str] = []
        self._last_text = ""
        self._done: ProviderEvent | None = None
        self._errors: list[ProviderEvent] = []
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def open(self) -> list[ProviderEvent]:
        """The ``iteration_started`` event (once)."""
        if self._opened:
            return []
        self._opened = True
        return [
            ProviderEvent(kind="iteration_started", metadata={"provider": self.provider, **self.metadata})
        ]

    def _flush(self) -> list[ProviderEvent]:
        if not self._deltas:
            return []
        text, self._deltas = "".join(self._deltas), []
        self._last_text = text
        return [ProviderEvent(kind="assistant_text", text=clip(text))]

    def feed(self, events: Iterable[ProviderEvent]) -> list[ProviderEvent]:
        """The events to emit now for ``events`` (terminal ones are held for :meth:`finish`)."""
        out = self.open()
        if self._closed:
            return out
        for ev in events:
            if ev.kind == "assistant_text" and ev.metadata.get("delta") == "true":
                self._deltas.append(ev.text)
                continue
            out += self._flush()
            out += self._one(ev)
        return out

    def _one(self, ev: ProviderEvent) -> list[ProviderEvent]:
        """The events to emit now for one event that is no text delta (none for a terminal one)."""
        match ev.kind:
            case "iteration_started":
                self.metadata.update(ev.metadata)
            case "assistant_text":
                if ev.text:
                    self._last_text = ev.text
                    return [ev.model_copy(update={"text": clip(ev.text)})]
            case "tool_started":
                return self._tool_started(ev)
            case "command_output":
                return self._command_output(ev)
            case "tool_finished":
                return self._tool_finished(ev)
            case "iteration_finished":
                if self._done is None:
                    self._done = ev
            case "error":
                self._errors.append(ev)
        return []

    def _command_output(self, ev: ProviderEvent) -> list[ProviderEvent]:
        """A call's one ``command_output`` (its start first when missing); none after its first or its finish."""
        if not ev.call_id:
            return [ev.model_copy(update={"text": clip(ev.text)})]
        if ev.call_id in self._outputs or ev.call_id in self._finished:
            return []
        out: list[ProviderEvent] = []
        if ev.call_id not in self._started:
            out += self._tool_started(
                ProviderEvent(kind="tool_started", tool=ev.tool, call_id=ev.call_id, command=ev.command)
            )
        self._outputs.add(ev.call_id)
        start = self._started.get(ev.call_id)
        if start is not None and not ev.command:
            ev = ev.model_copy(update={"command": start.command})
        out.append(ev.model_copy(update={"text": clip(ev.text)}))
        return out

    def _tool_started(self, ev: ProviderEvent) -> list[ProviderEvent]:
        if ev.call_id and ev.call_id in self._started:
            return []
        if ev.call_id:
            self._started[ev.call_id] = ev
        return [ev]

    def _tool_finished(self, ev: ProviderEvent) -> list[ProviderEvent]:
        out: list[ProviderEvent] = []
        if ev.call_id and ev.call_id in self._finished:
            return out
        if ev.call_id and ev.call_id not in self._started:
            out += self._tool_started(
                ProviderEvent(kind="tool_started", tool=ev.tool, call_id=ev.call_id, command=ev.command)
            )
        start = self._started.get(ev.call_id)
        command = ev.command or (start.command if start is not None else "")
        if ev.call_id and command and ev.call_id not in self._outputs:
            self._outputs.add(ev.call_id)
            out.append(
                ProviderEvent(
                    kind="command_output",
                    call_id=ev.call_id,
                    tool=ev.tool or (start.tool if start is not None else ""),
                    command=command,
                    text=clip(ev.text),
                    exit_code=ev.exit_code,
                )
            )
        if ev.call_id:
            self._finished.add(ev.call_id)
        tool = ev.tool or (start.tool if start is not None else "")
        out.append(ev.model_copy(update={"text": clip(ev.text), "tool": tool}))
        return out

    def finish(
        self,
        *,
        exit_code: int | None = 0,
        stderr: str = "",
        stopped: tuple[FailureKind, str] | None = None,
    ) -> tuple[list[ProviderEvent], IterationResult]:
        """The last events (open tool calls closed, then exactly one terminal event) and the result.

        ``stopped``: the run was ended from outside (``cancelled``, a timeout, a limit), which wins
        over whatever the stream said.
        """
        out = self.open() if not self._closed else []
        if self._closed:
            raise RuntimeError("the sequence is finished already")
        self._closed = True
        out += self._flush()
        out += self._close_open_calls()
        meta = dict(self.metadata)
        if exit_code is not None:
            meta["exit_code"] = str(exit_code)
        if stopped is None and self._done is not None and exit_code in (0, None) and self._errors:
            meta["recovered_errors"] = str(len(self._errors))  # a reconnect, a warning
        failure, message = stopped if stopped is not None else self._failure(exit_code, stderr)
        if failure is not None:
            errmeta: dict[str, str] = {"failure": failure}
            if self._errors and stopped is None:
                errmeta.update(self._errors[-1].metadata)
                errmeta["failure"] = failure
            out.append(ProviderEvent(kind="error", text=message, metadata=errmeta))
            usage = _usage(self._done.metadata) if self._done is not None else {}
            return out, IterationResult(
                ok=False, failure=failure, error=message, usage=usage, metadata=meta, summary=self._last_text
            )
        assert self._done is not None
        meta.update({k: v for k, v in self._done.metadata.items() if not k.startswith("usage.")})
        summary = self._done.text or self._last_text
        out.append(self._done.model_copy(update={"text": clip(summary)}))
        return out, IterationResult(
            ok=True, summary=summary, usage=_usage(self._done.metadata), metadata=meta
        )

    def _close_open_calls(self) -> list[ProviderEvent]:
        """A failed ``tool_finished`` for every call started and never finished."""
        out: list[ProviderEvent] = []
        for call_id, start in self._started.items():
            if call_id not in self._finished:
                self._finished.add(call_id)
                out.append(
                    ProviderEvent(
                        kind="tool_finished",
                        tool=start.tool,
                        call_id=call_id,
                        ok=False,
                        text="the tool call did not finish",
                        metadata={"unfinished": "true"},
                    )
                )
        return out

    def _failure(self, exit_code: int | None, stderr: str) -> tuple[FailureKind | None, str]:
        """How the stream and the process's end say the iteration failed (``None``: it did not)."""
        if self._done is not None and exit_code in (0, None):
            return None, ""  # errors the provider recovered from do not count
        quote = clip(stderr.strip()[-STDERR_QUOTE:], STDERR_QUOTE)
        said = f": {quote}" if quote else ""
        if self._errors:
            last = self._errors[-1]  # the last word (a turn's failure after its retry notices)
            kind = last.metadata.get("failure", "")
            failure = kind if kind in _FAILURES else classify(last.text)
            return failure, last.text or "the provider reported an error"  # type: ignore[return-value]
        if exit_code not in (0, None):
            return "transient", f"{self.provider} exited with status {exit_code}{said}"
        return "transient", f"{self.provider} ended without a result{said}"


def replay(
    provider: str,
    normalize: Normalize,
    lines: Iterable[str | bytes],
    *,
    exit_code: int | None = 0,
    stderr: str = "",
) -> tuple[list[ProviderEvent], IterationResult]:
    """A whole recorded native stream through ``normalize`` and a :class:`Sequencer` (the goldens).

    Lines that are not JSON objects are skipped (and counted in the result's ``skipped_lines``).
    """
    seq = Sequencer(provider)
    events = seq.open()
    skipped = 0
    for line in lines:
        native = parse_line(line)
        if native is None:
            skipped += 1 if line.strip() else 0
            continue
        events += seq.feed(safe_normalize(normalize, native))
    if skipped:
        seq.metadata["skipped_lines"] = str(skipped)
    tail, result = seq.finish(exit_code=exit_code, stderr=stderr)
    return events + tail, result


def parse_line(line: str | bytes) -> dict[str, Any] | None:
    """One JSON-lines record as a mapping (``None``: blank, not JSON, or not an object)."""
    if not line.strip():
        return None
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def safe_normalize(normalize: Normalize, native: dict[str, Any]) -> list[ProviderEvent]:
    """``normalize(native)``, or nothing when a native event of an unexpected shape trips it."""
    try:
        return normalize(native)
    except (KeyError, TypeError, ValueError, AttributeError):
        return []
