"""Run one built-in tool call in-process: validate, authorize, execute under limits, normalise.

The service (:mod:`.service`) adds what needs the bus around this: asking for
approval, idempotency, quotas, signals, cancellation. The benchmark and the
unit tests call it directly.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from jidocode.shared.egress import Pass
from jidocode.shared.errors import (
    InvalidInput,
    JidoError,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    RequestTimeout,
)
from jidocode.shared.events.tools import ToolResult, ToolResultError
from jidocode.shared.policy import Decision, Effect, Policy, authorize

from .tools import BUILTINS, DEFAULT_OUTPUT_CAP, DEFAULT_TIMEOUT_S, ToolContext

__all__ = [
    "DEFAULT_MAX_ARGS_BYTES",
    "MAX_RESULT_BYTES",
    "Limits",
    "check_args",
    "error_result",
    "execute",
    "fit_result",
    "run_authorized",
]

#: Arguments larger than this (as JSON) are refused before anything runs.
DEFAULT_MAX_ARGS_BYTES: Final = 512 * 1024
#: No result is larger than this as JSON (the reply and the stored result must fit a NATS message).
MAX_RESULT_BYTES: Final = 768 * 1024
#: Extra time the runner gives a tool to clean up (kill its process group) after its own timeout.
_GRACE_S: Final = 5.0


class Limits(BaseModel):
    """Limits of one call (from the project's ``tools`` settings)."""

    model_config = ConfigDict(frozen=True)

    timeout_s: float = Field(default=DEFAULT_TIMEOUT_S, gt=0)
    output_cap: int = Field(default=DEFAULT_OUTPUT_CAP, ge=1024)
    max_args_bytes: int = Field(default=DEFAULT_MAX_ARGS_BYTES, ge=1024)


def error_result(exc: BaseException, *, logs: list[str] | None = None) -> ToolResult:
    """The seed's error result for ``exc``."""
    if isinstance(exc, JidoError):
        details, _ = fit_result(exc.details, MAX_RESULT_BYTES // 2)
        err = ToolResultError(type=exc.type, message=exc.message[:4000], details=details)
    elif isinstance(exc, TimeoutError):
        err = ToolResultError(type="timeout", message="the tool did not finish in time")
    elif isinstance(exc, OSError):
        err = ToolResultError(type="io_error", message=f"{exc.strerror or exc}", details={"errno": exc.errno})
    else:
        err = ToolResultError(type="internal", message=f"{type(exc).__name__}: {exc}")
    return ToolResult(ok=False, error=err, logs=logs or [])


def _json_size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, default=str).encode("utf-8", "surrogatepass"))


def result_limit(limits: Limits) -> int:
    """The JSON size a result may have: twice the output cap plus room for its fields, at most 768 KiB."""
    return min(MAX_RESULT_BYTES, 2 * limits.output_cap + 16 * 1024)


def fit_result(data: Any, limit: int) -> tuple[Any, bool]:
    """``data`` cut down until its JSON fits ``limit`` (lists halved, long strings halved), and whether it was.

    The tools cap their own text by bytes; escaping (``\\u0001`` is six bytes)
    can still blow a result up, and a result that does not fit a NATS message
    would be lost instead of truncated.
    """
    if _json_size(data) <= limit:
        return data, False
    if not isinstance(data, dict):
        text = json.dumps(data, ensure_ascii=False, default=str)
        while _json_size(text) > limit:
            text = text[: len(text) // 2]
        return text + "[… truncated …]", True
    out = dict(data)
    for key, value in list(out.items()):
        if isinstance(value, list):
            while value and _json_size(out) > limit:
                value = value[: len(value) // 2]
                out[key] = value
    for key, value in list(out.items()):
        if isinstance(value, str):
            while len(value) > 64 and _json_size(out) > limit:
                value = value[: len(value) // 2]
                out[key] = value + "\n[… truncated to fit the result size limit …]"
    out["truncated"] = True
    return out, True


def check_args(name: str, args: Any, limits: Limits) -> dict[str, Any]:
    """Refuse non-object or oversize arguments before anything else looks at them."""
    if not isinstance(args, dict):
        raise InvalidInput(f"{name}: arguments must be an object")
    size = len(json.dumps(args, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    if size > limits.max_args_bytes:
        raise PayloadTooLarge(
            f"{name}: arguments are {size} bytes, more than the limit of {limits.max_args_bytes}",
            details={"size": size, "limit": limits.max_args_bytes},
        )
    return args


async def run_authorized(
    policy: Policy,
    name: str,
    args: dict[str, Any],
    decision: Decision,
    limits: Limits,
    *,
    egress: Pass | None = None,
) -> ToolResult:
    """Run a built-in whose call was authorized (``decision`` allows it, or a human approved);
    ``egress`` is the call's pass of the replica's egress proxy."""
    tool = BUILTINS.get(name)
    if tool is None:
        raise NotFound(f"unknown tool {name!r}", details={"tool": name})
    try:
        inp = tool.input_model.model_validate(args)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise InvalidInput(f"{name}: invalid arguments: {problems}") from None
    ctx = ToolContext(
        policy=policy,
        decision=decision,
        timeout_s=limits.timeout_s,
        output_cap=limits.output_cap,
        egress=egress,
    )
    try:
        data = await asyncio.wait_for(tool.run(inp, ctx), timeout=limits.timeout_s + _GRACE_S)
    except TimeoutError:
        raise RequestTimeout(f"{name} did not finish within {limits.timeout_s:g} s") from None
    data, cut = fit_result(data, result_limit(limits))
    truncated = cut or (isinstance(data, dict) and bool(data.get("truncated")))
    logs = ["output truncated"] if truncated else []
    return ToolResult(ok=True, data=data, logs=logs)


async def execute(
    policy: Policy, name: str, args: Any, *, limits: Limits | None = None, approved: bool = False
) -> ToolResult:
    """Authorize and run one built-in call in-process. ``approved``: a human approved an ``ask``."""
    limits = limits or Limits()
    try:
        args = check_args(name, args, limits)
        if name not in BUILTINS:
            raise NotFound(f"unknown tool {name!r}", details={"tool": name})
        decision = authorize(policy, name, args)
        if decision.effect is Effect.DENY or (decision.effect is Effect.ASK and not approved):
            raise PermissionDenied(
                decision.reason if decision.effect is Effect.DENY else f"needs approval: {decision.reason}",
                details={"decision": decision.effect.value, "rule": decision.rule, **decision.details},
            )
        return await run_authorized(policy, name, args, decision, limits)
    except (JidoError, OSError, TimeoutError) as exc:
        return error_result(exc)
