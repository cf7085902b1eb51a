"""The idempotency ledger: one record per call in the KV bucket ``jido_tool_calls``.

``meta.request_id`` keys the call. The first request claims the key (KV
create) with a ``running`` record; a redelivered request finds the claim and
returns the stored result, or waits for it — the side effect never runs
twice. A record moves ``running`` → ``done`` (with the result); a cancel
before the call started writes ``cancelled``, so the call never starts. A
claim older than any call can take belongs to a replica that died: it is
reported as ``outcome_unknown``, never run again — unless it never started: a
claim is ``started: false`` while its call waits (for an approval, a quota slot)
and turns ``started: true`` by a compare-and-set just before the call runs
(:meth:`Ledger.begin`). A request sent again for a claim that never started and
whose replica is gone takes the claim over (compare-and-set) and runs the call
once; the dead replica's call can no longer begin (its compare-and-set fails:
:class:`TakenOver`).

**A replica's death is known at once.** Every claim names its replica by its
``nats.micro`` id (``replica``); a request sent again for a claim held by another
replica asks that replica whether it is there (:mod:`.replicas`), and a claim whose
replica is gone is settled at once — run here if it never started, ``outcome_unknown``
if it had — rather than after the claim's lifetime. The conversation sends an
unanswered call again every few seconds, so a runner's death is known within seconds
of its restart. Copies of one request waiting here for a live replica's result do not
pile up: a newer copy takes over the waits of the copies that have waited a while already,
whose sender has moved on (:data:`SUPERSEDE_AFTER_S`, :func:`superseded_result`).

**Whose call it is.** Every record carries the call's conversation and a
digest of its name, arguments and conversation (:func:`call_digest`). A
request reusing a request id with anything else gets ``conflict`` — never the
stored result, which is thus returned only to the very same call of the same
conversation. A cancel names its conversation too: a cancel recorded before
the call (``cancelled``) stops it only when the conversations match; one by
anybody else is taken over by the real call's claim (:meth:`Ledger.forbid`,
:meth:`Ledger.claim`). The bucket is readable by the tool runner's NATS user
alone (``shared/nats_permissions.py``), and results live :data:`RESULT_TTL_S`
(15 min, ``JIDO_TOOL_RESULT_TTL_S``): long enough for a redelivery, short
enough that a leaked secret in an output does not sit on disk for a day.

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
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, Literal

import nats.errors
import nats.js.errors
from nats.js.kv import KeyValue

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.events.tools import ToolResult, ToolResultError
from jidocode.shared.settings import ToolSettings
from jidocode.shared.tools import BUILTIN_SPECS

from .errors import cancelled_result
from .replicas import Replicas

__all__ = [
    "READ_ONLY",
    "RESULT_TTL_S",
    "CancelFound",
    "Claim",
    "Ledger",
    "TakenOver",
    "call_digest",
    "claim_lifetime",
    "conflict_result",
    "ledger_key",
    "lost_result",
    "needs_claim",
    "never_started",
    "result_ttl",
    "running_record",
    "settled",
    "superseded_result",
    "time_left",
]

log = logging.getLogger("jidocode.tool_runner")

#: Built-ins without side effects: no idempotency claim needed.
READ_ONLY: frozenset[str] = frozenset(t.name for t in BUILTIN_SPECS if t.access == "read")
#: How long a call's record (and its result) is kept for redelivered requests, by default.
RESULT_TTL_S: Final = 15 * 60.0
#: The bounds of ``JIDO_TOOL_RESULT_TTL_S``.
MIN_RESULT_TTL_S: Final = 60.0
MAX_RESULT_TTL_S: Final = 24 * 3600.0
#: A copy of a request that has waited this long for another replica's result gives its wait to
#: a newer copy (its sender sent that copy: the conversation sends one every few seconds). Copies
#: sent together (a burst of duplicates) all wait: each may have somebody listening.
SUPERSEDE_AFTER_S: Final = 2.0
#: How long a claim may wait for its result when the project cannot be read.
DEFAULT_CLAIM_LIFETIME_S: Final = 60.0

Record = dict[str, Any]
#: What a cancel found under its key (:meth:`Ledger.forbid`).
CancelFound = Literal["unknown", "owner", "other"]


def result_ttl(environ: dict[str, str] | None = None) -> float:
    """The records' time to live: ``JIDO_TOOL_RESULT_TTL_S`` (60 s … 24 h), else :data:`RESULT_TTL_S`."""
    raw = (os.environ if environ is None else environ).get("JIDO_TOOL_RESULT_TTL_S")
    if not raw:
        return RESULT_TTL_S
    try:
        ttl = float(raw)
    except ValueError:
        raise ValueError(f"JIDO_TOOL_RESULT_TTL_S={raw!r} is not a number of seconds") from None
    if not MIN_RESULT_TTL_S <= ttl <= MAX_RESULT_TTL_S:
        raise ValueError(
            f"JIDO_TOOL_RESULT_TTL_S={raw} is outside {MIN_RESULT_TTL_S:g} … {MAX_RESULT_TTL_S:g} seconds"
        )
    return ttl


def call_digest(name: str, args: dict[str, Any], conversation_id: str | None) -> str:
    """What a request id stands for: the tool, its arguments and the conversation (a digest)."""
    canonical = json.dumps([name, args, conversation_id], sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Claim:
    """One call's key in the ledger and what it must match: its digest and conversation."""

    key: str
    request_id: str
    name: str
    digest: str
    conversation_id: str | None

    @classmethod
    def of(
        cls, project_id: str, request_id: str, name: str, args: dict[str, Any], conversation_id: str | None
    ) -> Claim:
        return cls(
            key=ledger_key(project_id, request_id),
            request_id=request_id,
            name=name,
            digest=call_digest(name, args, conversation_id),
            conversation_id=conversation_id,
        )


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


def _owner(claim: Claim | None) -> Record:
    if claim is None:
        return {}
    return {"digest": claim.digest, "conversation": claim.conversation_id}


def running_record(
    instance: str,
    name: str,
    now: float,
    claim: Claim | None = None,
    *,
    started: bool = True,
    replica: str | None = None,
) -> Record:
    """A claim's record while its call waits or runs (``replica``: the holder's micro service id)."""
    record: Record = {"state": "running", "instance": instance, "name": name, "at": now, "started": started}
    if replica is not None:
        record["replica"] = replica
    return {**record, **_owner(claim)}


def never_started(record: Record) -> bool:
    """Whether a running claim's call never began (records from before this field: it may have)."""
    return record.get("state") == "running" and record.get("started") is False


class TakenOver(Exception):
    """The claim of a call that had not started was taken over by another replica (this one was
    presumed gone): the call must not run here, and its result is not stored from here."""


def cancelled_record(now: float, conversation_id: str | None = None) -> Record:
    return {"state": "cancelled", "at": now, "conversation": conversation_id}


def done_record(result: ToolResult, claim: Claim | None = None) -> Record:
    return {"state": "done", "result": result.model_dump(mode="json"), **_owner(claim)}


def same_call(record: Record, claim: Claim) -> bool:
    """Whether ``record`` was written for ``claim``'s very call (records from before digests: yes)."""
    digest = record.get("digest")
    return digest is None or digest == claim.digest


def owned_by(record: Record, conversation_id: str | None) -> bool:
    """Whether a cancel naming ``conversation_id`` is the owner's (the record's conversation)."""
    return record.get("conversation") == conversation_id


def conflict_result(request_id: str) -> ToolResult:
    """The answer to a request id reused for another call: nothing about the first one."""
    return ToolResult(
        ok=False,
        error=ToolResultError(
            type="conflict",
            message=f"request id {request_id!r} was already used for another call (another tool, "
            "other arguments or another conversation); send a new request id",
            details={"request_id": request_id},
        ),
    )


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


def superseded_result(request_id: str) -> ToolResult:
    """The answer to a copy of a request whose wait a newer copy of it took over (its sender
    sent that newer copy, so nobody is expected to read this one)."""
    return ToolResult(
        ok=False,
        error=ToolResultError(
            type="timeout",
            message=f"a newer copy of request {request_id!r} waits for its result now; ask again",
            details={"request_id": request_id, "retryable": True},
        ),
    )


def _failed_result() -> ToolResult:
    return ToolResult(ok=False, error=ToolResultError(type="internal", message="the call failed"))


async def _stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def _next_update(watcher: Any, timeout: float, superseded: asyncio.Event) -> Any:
    """The watcher's next update, or ``None`` after ``timeout`` or once ``superseded`` is set."""
    update = asyncio.ensure_future(watcher.updates(timeout=timeout))
    taken = asyncio.ensure_future(superseded.wait())
    try:
        await asyncio.wait({update, taken}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (update, taken):
            task.cancel()
        await asyncio.gather(update, taken, return_exceptions=True)
    if update.cancelled():
        return None  # superseded first
    error = update.exception()
    if isinstance(error, nats.errors.TimeoutError):
        return None
    if error is not None:
        raise error
    return update.result()


class Ledger:
    """The KV records of one replica's calls (``instance`` names the replica in its claims)."""

    def __init__(
        self,
        kv: KeyValue,
        *,
        instance: str,
        clock: Callable[[], float] = time.time,
        ttl: float = RESULT_TTL_S,
    ) -> None:
        self.kv = kv
        self.instance = instance
        self.clock = clock
        #: How long a record lives; a running claim is rewritten every third of it (see :meth:`settle`).
        self.ttl = ttl
        #: The revision of this replica's last write of each claim it holds (compare-and-set).
        self._revisions: dict[str, int] = {}
        #: The claims whose call has begun here.
        self._started: set[str] = set()
        #: Who this replica is and who else lives (``None`` until the service runs: a holder is
        #: then never known gone, and its claim lives its whole lifetime).
        self.replicas: Replicas | None = None
        #: How long a copy waits for another replica's result before a newer copy takes over.
        self.supersede_after = SUPERSEDE_AFTER_S
        #: Per key, the waits here for another replica's result: since when, and set once a newer
        #: copy of the request took the wait over.
        self._waits: dict[str, list[tuple[float, asyncio.Event]]] = {}

    @classmethod
    async def open(cls, bus: Bus, *, ttl: float | None = None) -> Ledger:
        """Bind the bucket (created with the records' TTL); a bucket made with another TTL is updated."""
        ttl = result_ttl() if ttl is None else ttl
        kv = await bus.kv(subjects.BUCKET_TOOL_CALLS, history=1, ttl=ttl)
        stream = f"KV_{subjects.BUCKET_TOOL_CALLS}"
        try:
            info = await bus.js.stream_info(stream)
            if info.config.max_age is None or abs(info.config.max_age - ttl) > 0.5:
                info.config.max_age = ttl
                await bus.js.update_stream(info.config)
                log.info("tool call records now kept %g s (was %s)", ttl, info.config.max_age)
        except (nats.errors.Error, nats.js.errors.Error) as exc:
            log.warning("could not set the TTL of %s to %g s: %s", stream, ttl, exc)
        return cls(kv, instance=bus.source, ttl=ttl)

    async def claim(self, claim: Claim, lifetime: Callable[[], Awaitable[float]]) -> ToolResult | None:
        """Claim ``claim.key``: ``None`` when this call is ours to run, else the answer the key gives.

        A claim still running elsewhere is waited for (up to ``lifetime()`` seconds
        from its start, asked only then), and reported lost past that. A record of
        another call (other digest) is a ``conflict``; a cancel recorded by anybody
        but the call's conversation is taken over.
        """
        for _ in range(8):  # a racing cancel or claim rewrote the key: look again
            try:
                self._revisions[claim.key] = await self.kv.create(claim.key, self._running(claim))
                return None
            except nats.js.errors.KeyWrongLastSequenceError:
                pass
            try:
                entry = await self.kv.get(claim.key)
            except nats.js.errors.KeyNotFoundError:
                continue  # expired or deleted since: claim it again
            record: Record = json.loads(entry.value or b"{}")
            if record.get("state") == "cancelled" and not owned_by(record, claim.conversation_id):
                try:  # somebody else's cancel never stops this call
                    self._revisions[claim.key] = await self.kv.update(
                        claim.key, self._running(claim), last=entry.revision
                    )
                    return None
                except nats.js.errors.KeyWrongLastSequenceError:
                    continue
            if record.get("state") != "cancelled" and not same_call(record, claim):
                return conflict_result(claim.request_id)
            answer = settled(record)
            if answer is not None:
                return answer
            left = await self._left(record, lifetime)
            if left >= 0:
                answer = await self._await_result(claim, left)
                if answer is not None:
                    return answer
                continue  # its time is up: look at the record again
            if never_started(record):  # its replica went before the call began: run it once here
                try:
                    self._revisions[claim.key] = await self.kv.update(
                        claim.key, self._running(claim), last=entry.revision
                    )
                except nats.js.errors.KeyWrongLastSequenceError:
                    continue
                log.info(
                    "call %s never started on %s: it runs here", claim.request_id, record.get("instance")
                )
                return None
            return await self._lose(claim, record)
        raise nats.js.errors.KeyWrongLastSequenceError(description=f"the claim of {claim.key} kept changing")

    def _running(self, claim: Claim, *, started: bool = False) -> bytes:
        replica = None if self.replicas is None else self.replicas.me
        record = running_record(
            self.instance, claim.name, self.clock(), claim, started=started, replica=replica
        )
        return json.dumps(record).encode()

    async def _left(self, record: Record, lifetime: Callable[[], Awaitable[float]]) -> float:
        """How much longer a running claim may live: ≤ 0 once its time is up or its replica is gone."""
        left = time_left(record, self.clock(), await lifetime())
        if left >= 0 and await self._holder_gone(record):
            return -1.0  # nobody will ever answer it
        return left

    async def _holder_gone(self, record: Record) -> bool:
        """Whether the replica holding ``record``'s claim is known gone (records without one: no)."""
        replica = record.get("replica")
        if self.replicas is None or not isinstance(replica, str):
            return False
        return not await self.replicas.alive(replica)

    async def begin(self, claim: Claim) -> None:
        """Mark the claimed call started, just before it runs (compare-and-set on the claim):
        :class:`TakenOver` when another replica took the claim over meanwhile."""
        await self._rewrite(claim, started=True)

    async def _rewrite(self, claim: Claim, *, started: bool) -> None:
        """Write this replica's running record again, only over its own last write."""
        revision = self._revisions.get(claim.key)
        if revision is None:
            return  # not claimed here (or settled already)
        try:
            self._revisions[claim.key] = await self.kv.update(
                claim.key, self._running(claim, started=started), last=revision
            )
        except nats.js.errors.KeyWrongLastSequenceError:
            self._revisions.pop(claim.key, None)
            raise TakenOver(claim.key) from None
        except (nats.errors.Error, nats.js.errors.Error):
            log.exception("could not rewrite the claim of %s", claim.key)
        if started:
            self._started.add(claim.key)

    async def _await_result(self, claim: Claim, left: float) -> ToolResult | None:
        """Watch the key until its record is done (its result) or ``left`` seconds pass (``None``).

        A newer copy of the request takes over the waits of the copies that have waited
        :data:`SUPERSEDE_AFTER_S` or more (they end with :func:`superseded_result`).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + left
        superseded = self._take_wait(claim.key)
        watcher = await self.kv.watch(claim.key)
        try:
            while (remaining := deadline - loop.time()) > 0:
                update = await _next_update(watcher, remaining, superseded)
                record = json.loads(update.value) if update is not None and update.value else {}
                if record.get("state") == "done":
                    return ToolResult.model_validate(record["result"])
                if superseded.is_set():
                    return superseded_result(claim.request_id)
        finally:
            self._end_wait(claim.key, superseded)
            with contextlib.suppress(nats.errors.Error):
                await watcher.stop()  # type: ignore[no-untyped-call]
        return None

    def _take_wait(self, key: str) -> asyncio.Event:
        """A new wait for ``key``'s result here, taking over those waiting for a while already."""
        now = asyncio.get_running_loop().time()
        waits = self._waits.setdefault(key, [])
        for since, earlier in [w for w in waits if now - w[0] >= self.supersede_after]:
            earlier.set()
            waits.remove((since, earlier))
        mine = asyncio.Event()
        waits.append((now, mine))
        return mine

    def _end_wait(self, key: str, wait: asyncio.Event) -> None:
        waits = [w for w in self._waits.get(key, []) if w[1] is not wait]
        if waits:
            self._waits[key] = waits
        else:
            self._waits.pop(key, None)

    async def _lose(self, claim: Claim, record: Record) -> ToolResult:
        result = lost_result(record)
        await self._store(claim.key, done_record(result, claim))
        return result

    async def _keep_alive(self, claim: Claim) -> None:
        while True:
            await asyncio.sleep(self.ttl / 3)  # a lease renewal period, not a synchronization
            with contextlib.suppress(TakenOver):  # the call itself finds out when it begins
                await self.touch(claim)

    async def settle(self, claim: Claim, attempt: Awaitable[ToolResult]) -> ToolResult:
        """Await the claimed call's ``attempt`` and store its result (cancelled or failed if it raises).

        While it runs, the claim is rewritten every third of the records' TTL: a call that runs
        longer than the TTL (a long command, a long approval wait) would otherwise see its claim
        expire, and a request sent again for it (the conversation resends a call it hears nothing
        of) would claim the key anew and run the side effect a second time.
        """
        keeper = asyncio.create_task(self._keep_alive(claim))
        try:
            result = await attempt
        except TakenOver:
            await _stop(keeper)  # the claim is another replica's now: nothing is stored from here
            self._forget(claim)
            return lost_result({"instance": self.instance})
        except asyncio.CancelledError:
            await _stop(keeper)  # before the final record: a late renewal must not overwrite it
            await self._store(claim.key, done_record(cancelled_result(), claim))
            self._forget(claim)
            raise
        except BaseException:
            await _stop(keeper)
            await self._store(claim.key, done_record(_failed_result(), claim))
            self._forget(claim)
            raise
        await _stop(keeper)
        await self._store(claim.key, done_record(result, claim))
        self._forget(claim)
        return result

    def _forget(self, claim: Claim) -> None:
        self._revisions.pop(claim.key, None)
        self._started.discard(claim.key)

    async def forbid(self, key: str, conversation_id: str | None) -> CancelFound:
        """A cancel by ``conversation_id``: a call of that conversation that has not claimed ``key``
        yet never starts. What the key held: ``"unknown"`` (nothing: the cancel is kept for a call
        still on its way), ``"owner"`` (a call of that conversation) or ``"other"`` (another
        conversation's call, which the cancel does not touch)."""
        try:
            await self.kv.create(key, json.dumps(cancelled_record(self.clock(), conversation_id)).encode())
            return "unknown"
        except nats.js.errors.KeyWrongLastSequenceError:
            pass
        try:
            entry = await self.kv.get(key)
        except nats.js.errors.KeyNotFoundError:
            return "unknown"
        return "owner" if owned_by(json.loads(entry.value or b"{}"), conversation_id) else "other"

    async def touch(self, claim: Claim) -> None:
        """Restart the TTL of a running claim (after a long wait, e.g. for an approval);
        :class:`TakenOver` when another replica took it over meanwhile."""
        await self._rewrite(claim, started=claim.key in self._started)

    async def ended(self, key: str) -> bool:
        """Whether the call of ``key`` has ended (done or cancelled); unknown keys have not."""
        try:
            entry = await self.kv.get(key)
        except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError):
            return False
        return json.loads(entry.value or b"{}").get("state") in ("done", "cancelled")

    async def _store(self, key: str, record: Record) -> None:
        try:
            await self.kv.put(key, json.dumps(record).encode())
        except (nats.errors.Error, nats.js.errors.Error):
            log.exception("could not store the result of %s", key)
