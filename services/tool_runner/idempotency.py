"""The idempotency ledger: one record per call in the KV bucket ``jido_tool_calls``.

``meta.request_id`` keys the call. The first request claims the key (KV
create) with a ``running`` record; a redelivered request finds the claim and
returns the stored result, or waits for it — the side effect never runs
twice. A record moves ``running`` → ``done`` (with the result); a cancel
before the call started writes ``cancelled``, so the call never starts. A
claim older than any call can take belongs to a replica that died: it is
reported as ``outcome_unknown``, never run again.

Read-only built-ins have no side effect to protect and skip the two KV writes
(a redelivered read simply reads again): see :func:`needs_claim`.

The record logic (:func:`running_record`, :func:`settled`, :func:`time_left`,
:func:`lost_result`, :func:`claim_lifetime`) is pure; :class:`Ledger` does the I/O.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

import nats.errors
import nats.js.errors
from nats.js.kv import KeyValue

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.events.tools import ToolResult, ToolResultError
from jidocode.shared.settings import ToolSettings

from .errors import cancelled_result

__all__ = [
    "READ_ONLY",
    "RESULT_TTL_S",
    "Ledger",
    "claim_lifetime",
    "ledger_key",
    "lost_result",
    "needs_claim",
    "running_record",
    "settled",
    "time_left",
]

log = logging.getLogger("jidocode.tool_runner")

#: Built-ins without side effects: no idempotency claim needed.
READ_ONLY: frozenset[str] = frozenset({"read_file", "list_dir", "glob", "grep"})
#: How long a finished call's result is kept for redelivered requests.
RESULT_TTL_S: Final = 24 * 3600.0
#: How long a claim may wait for its result when the project cannot be read.
DEFAULT_CLAIM_LIFETIME_S: Final = 60.0

Record = dict[str, Any]


def needs_claim(name: str) -> bool:
    """Whether a call of ``name`` takes an idempotency claim (it may have side effects)."""
    return name not in READ_ONLY


def ledger_key(project_id: str, request_id: str) -> str:
    """The KV key of a call: the project, then a digest (any request id makes a valid key)."""
    digest = hashlib.sha256(f"{project_id}\0{request_id}".encode()).hexdigest()[:40]
    return f"{project_id}.{digest}"


def claim_lifetime(tools: ToolSettings | None, quota_wait_s: float) -> float:
    """The longest a call may take from claim to result: past it, its claim is lost.

    ``tools`` is ``None`` when the project's settings cannot be read.
    """
    if tools is None:
        return DEFAULT_CLAIM_LIFETIME_S
    return float(tools.timeout_s + tools.approval_timeout_s) + quota_wait_s + 10.0


def running_record(instance: str, name: str, now: float) -> Record:
    return {"state": "running", "instance": instance, "name": name, "at": now}


def cancelled_record(now: float) -> Record:
    return {"state": "cancelled", "at": now}


def done_record(result: ToolResult) -> Record:
    return {"state": "done", "result": result.model_dump(mode="json")}


def settled(record: Record) -> ToolResult | None:
    """The answer a record already gives (done or cancelled); ``None`` while it runs."""
    state = record.get("state")
    if state == "cancelled":
        return cancelled_result()
    if state == "done":
        return ToolResult.model_validate(record["result"])
    return None


def time_left(record: Record, now: float, lifetime: float) -> float:
    """How much longer a ``running`` claim may live (≤ 0: its replica is gone)."""
    return lifetime - (now - float(record.get("at", 0.0)))


def lost_result(record: Record) -> ToolResult:
    """The answer for a claim whose replica stopped before answering."""
    return ToolResult(
        ok=False,
        error=ToolResultError(
            type="outcome_unknown",
            message="the replica running this call stopped before answering; it is not run again "
            "(its side effects may or may not have happened)",
            details={"instance": record.get("instance")},
        ),
    )


def _failed_result() -> ToolResult:
    return ToolResult(ok=False, error=ToolResultError(type="internal", message="the call failed"))


class Ledger:
    """The KV records of one replica's calls (``instance`` names the replica in its claims)."""

    def __init__(self, kv: KeyValue, *, instance: str, clock: Callable[[], float] = time.time) -> None:
        self.kv = kv
        self.instance = instance
        self.clock = clock

    @classmethod
    async def open(cls, bus: Bus) -> Ledger:
        kv = await bus.kv(subjects.BUCKET_TOOL_CALLS, history=1, ttl=RESULT_TTL_S)
        return cls(kv, instance=bus.source)

    async def claim(self, key: str, name: str, lifetime: Callable[[], Awaitable[float]]) -> ToolResult | None:
        """Claim ``key``: ``None`` when this call is ours to run, else the answer another claim gives.

        A claim still running elsewhere is waited for (up to ``lifetime()`` seconds
        from its start, asked only then), and reported lost past that.
        """
        try:
            await self.kv.create(key, json.dumps(running_record(self.instance, name, self.clock())).encode())
            return None
        except nats.js.errors.KeyWrongLastSequenceError:
            pass
        entry = await self.kv.get(key)
        record: Record = json.loads(entry.value or b"{}")
        answer = settled(record)
        if answer is not None:
            return answer
        left = time_left(record, self.clock(), await lifetime())
        if left < 0:
            return await self._lose(key, record)
        return await self._await_result(key, record, left)

    async def _await_result(self, key: str, record: Record, left: float) -> ToolResult:
        """Watch ``key`` until its record is done (its result) or ``left`` seconds pass (lost)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + left
        watcher = await self.kv.watch(key)
        try:
            while (remaining := deadline - loop.time()) > 0:
                try:
                    update = await watcher.updates(timeout=remaining)  # type: ignore[no-untyped-call]
                except nats.errors.TimeoutError:
                    continue
                if update is None or not update.value:
                    continue
                record = json.loads(update.value)
                if record.get("state") == "done":
                    return ToolResult.model_validate(record["result"])
        finally:
            with contextlib.suppress(nats.errors.Error):
                await watcher.stop()  # type: ignore[no-untyped-call]
        return await self._lose(key, record)

    async def _lose(self, key: str, record: Record) -> ToolResult:
        result = lost_result(record)
        await self._store(key, done_record(result))
        return result

    async def settle(self, key: str, attempt: Awaitable[ToolResult]) -> ToolResult:
        """Await the claimed call's ``attempt`` and store its result (cancelled or failed if it raises)."""
        try:
            result = await attempt
        except asyncio.CancelledError:
            await self._store(key, done_record(cancelled_result()))
            raise
        except BaseException:
            await self._store(key, done_record(_failed_result()))
            raise
        await self._store(key, done_record(result))
        return result

    async def forbid(self, key: str) -> None:
        """A cancel: a call that has not claimed ``key`` yet must never start."""
        with contextlib.suppress(nats.js.errors.KeyWrongLastSequenceError):
            await self.kv.create(key, json.dumps(cancelled_record(self.clock())).encode())

    async def _store(self, key: str, record: Record) -> None:
        try:
            await self.kv.put(key, json.dumps(record).encode())
        except (nats.errors.Error, nats.js.errors.Error):
            log.exception("could not store the result of %s", key)
