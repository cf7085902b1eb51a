"""The signals at the pipeline's edges, and the call they describe."""

from __future__ import annotations

from jidocode.services.tool_runner.call import Call
from jidocode.services.tool_runner.report import MAX_SIGNAL_MESSAGE, finished, started
from jidocode.shared.envelope import Envelope
from jidocode.shared.events.tools import (
    RunTool,
    ToolCallMeta,
    ToolCompleted,
    ToolFailed,
    ToolResult,
    ToolResultError,
)


def _call(*, conversation_id: str | None = "c1", correlation_id: str | None = None) -> Call:
    request = RunTool(
        name="bash",
        args={"command": "ls"},
        meta=ToolCallMeta(request_id="r1", conversation_id=conversation_id, correlation_id=correlation_id),
    )
    env = Envelope.new(request, source="test", correlation_id="from-envelope")
    return Call.of("P1", request, env)


def test_call_extensions_continue_the_caller() -> None:
    request = RunTool(name="bash", meta=ToolCallMeta(request_id="r1", conversation_id="c1"))
    env = Envelope.new(request, source="test", correlation_id="K")
    call = Call.of("P1", request, env)
    assert call.ext == {
        "project_id": "P1",
        "conversation_id": "c1",
        "correlation_id": "K",
        "causation_id": env.id,
    }
    assert call.key == ("P1", "r1") and call.name == "bash" and call.request_id == "r1"


def test_call_meta_correlation_wins_over_the_envelope() -> None:
    assert _call(correlation_id="from-meta").ext["correlation_id"] == "from-meta"
    assert _call().ext["correlation_id"] == "from-envelope"
    assert _call(conversation_id=None).ext["conversation_id"] is None


def test_started() -> None:
    sig = started(_call())
    assert (sig.type, sig.project_id, sig.name, sig.request_id, sig.conversation_id) == (
        "tool.started",
        "P1",
        "bash",
        "r1",
        "c1",
    )


def test_completed_says_whether_output_was_truncated() -> None:
    done = finished(_call(), ToolResult(ok=True, data={"output": "x", "truncated": True}), 12.5)
    assert isinstance(done, ToolCompleted)
    assert done.truncated and done.duration_ms == 12.5 and done.request_id == "r1"
    plain = finished(_call(), ToolResult(ok=True, data="plain"), 1.0)
    assert isinstance(plain, ToolCompleted) and not plain.truncated


def test_failed_carries_the_error_cut_short() -> None:
    error = ToolResultError(type="timeout", message="m" * 5000, details={"big": "x" * 100})
    failed = finished(_call(), ToolResult(ok=False, error=error), 3.0)
    assert isinstance(failed, ToolFailed)
    assert failed.error.type == "timeout"
    assert failed.error.message == "m" * MAX_SIGNAL_MESSAGE
    assert failed.error.details == {}
    assert failed.duration_ms == 3.0


def test_failed_without_an_error_is_still_a_failure() -> None:
    failed = finished(_call(), ToolResult(ok=False), 1.0)
    assert isinstance(failed, ToolFailed) and failed.error.type == "internal"
