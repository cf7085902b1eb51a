"""Quotas: how many calls of a project, and of a conversation, run at once.

Each quota is a counting slot per key with a bounded wait: a call waits at
most ``wait_s`` for a free slot, then is refused with :class:`QuotaExceeded`.
A cancel interrupts its call's wait (:meth:`Quotas.interrupt`).

Two tiers, taken in this order and freed in the reverse one:

1. **this replica**: counters per key; a freed slot wakes the oldest waiter here
   (first come, first served, and at most ``limit`` calls per key of this replica
   go on to the second tier);
2. **the cluster** (when :class:`Quotas` has :class:`Leases`, as the service's
   does: :mod:`.quota_leases`): a lease per running call in a KV bucket every
   replica shares, so the limit holds across replicas.

A call's slots (its project's, then its conversation's) are taken in that order: this
replica's count of each, then their leases, **tried at once** (the writes go out together,
one round trip when they are free); from the first lease that was not free on, they are taken
one after the other with waiting, the later ones given back first, so a call never waits for a
slot while holding a later one (decision 0349). The pipeline frees a call's slots **after its
answer** (:meth:`Quotas.free_later`): the answer does not wait for the leases' writes.
A conversation's quota that cannot bind (its limit is not below its project's: every call of
the conversation holds a project slot) is not taken (:func:`slots_for`).

**Waiting costs no request slot** (:class:`WaitingRoom`, decision 0306). The
pipeline waits for the quotas (and for a project's MCP server to start, and a
request sent again for its first attempt's result) inside the room, which gives the request's slot of the service host back for the wait
(``ServiceHost.released``) and takes one again once the wait is over: a call
holds one of the replica's shared slots only to run (and for the short steps
before its wait), never while it queues behind its own project's quota, so 300
calls queued in one project leave the slots to the other projects. What bounds
the queue instead is :data:`MAX_QUEUED_PER_PROJECT` waiting calls per project
and replica (``JIDO_MAX_QUEUED_CALLS``); past it a call is refused at once with
``quota_exceeded`` (retryable) naming the bound.

:func:`slots_for` (which quotas a call takes) and :func:`queue_limit` are pure.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, TypeVar

from jidocode.shared.errors import JidoError
from jidocode.shared.settings import ToolSettings

from .call import Call, CallKey
from .errors import QuotaExceeded

__all__ = [
    "MAX_QUEUED_PER_PROJECT",
    "HeldLease",
    "HeldSlots",
    "Leases",
    "Quotas",
    "Slot",
    "WaitingRoom",
    "cancel_and_wait",
    "queue_limit",
    "slots_for",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Slot:
    """One quota a call takes: its key, its limit and what it limits ("project", "conversation")."""

    key: str
    limit: int
    scope: str


def slots_for(call: Call, tools: ToolSettings) -> tuple[Slot, ...]:
    """The quotas of ``call``, in the order they are taken: its project's, then its conversation's
    when that one can bind (its limit is below the project's: else the project's holds it)."""
    project = Slot(f"p:{call.project_id}", tools.max_concurrent_per_project, "project")
    if call.conversation_id is None or tools.max_concurrent_per_conversation >= project.limit:
        return (project,)
    conversation = Slot(
        f"c:{call.project_id}:{call.conversation_id}", tools.max_concurrent_per_conversation, "conversation"
    )
    return (project, conversation)


class HeldLease(Protocol):
    """A slot of a cluster-wide quota, held until released."""

    async def release(self) -> None:
        """Free the slot (never raises: a lease not freed runs out on its own)."""
        ...


class Leases(Protocol):
    """The cluster tier of the quotas (:class:`.quota_leases.QuotaLeases` over NATS)."""

    async def take_at_once(self, slot: Slot) -> HeldLease | None:
        """A slot of ``slot``'s quota if one is free now (``None``: none was), without waiting."""
        ...

    async def take(self, slot: Slot, wait_s: float, *, tried: bool = False) -> HeldLease:
        """A slot of ``slot``'s quota within ``wait_s``, else :class:`QuotaExceeded`; ``tried``:
        :meth:`take_at_once` just found none free (the wait starts at once)."""
        ...


#: How long a cancelled task may take to end before it is cancelled again.
_RECANCEL_S = 1.0


async def cancel_and_wait(task: asyncio.Task[T]) -> T | None:
    """Cancel ``task`` and wait for its end: what it returned all the same, else ``None``.

    The cancel is sent again while the task goes on: asyncio.wait_for (CPython 3.11, inside
    nats-py's requests) swallows a cancel that comes with the reply it waited for.
    """
    while not task.done():
        task.cancel()
        try:
            await asyncio.wait((task,), timeout=_RECANCEL_S)
        except asyncio.CancelledError:
            task.cancel()
            raise
    if task.cancelled() or task.exception() is not None:
        return None
    return task.result()


@dataclass
class _Quota:
    limit: int
    running: int = 0
    waiters: list[asyncio.Future[None]] = field(default_factory=list)


@dataclass(eq=False)
class _Taken:
    """One slot a call took: this replica's count of it, and the cluster's lease once taken."""

    slot: Slot
    quota: _Quota
    lease: HeldLease | None = None


class HeldSlots:
    """The slots one call holds, in the order taken (:meth:`Quotas.take`); freed by
    :meth:`Quotas.free` or :meth:`Quotas.free_later`, in the reverse order."""

    def __init__(self) -> None:
        self.taken: list[_Taken] = []
        #: Set once the call lets go: a lease taken after that is given back at once.
        self.freed = False


class Quotas:
    """Counting slots per key, with a bounded wait; cluster-wide with ``leases``."""

    def __init__(self, leases: Leases | None = None) -> None:
        self.leases = leases
        self._q: dict[str, _Quota] = {}
        self._waiting: dict[CallKey, asyncio.Future[None]] = {}
        #: Frees running after their call's answer (:meth:`free_later`) and leases given back late.
        self._background: set[asyncio.Task[None]] = set()

    @property
    def queued(self) -> int:
        """How many calls wait for a slot now."""
        return len(self._waiting)

    def running(self, key: str) -> int:
        """How many calls of this replica hold (or are taking) a slot of ``key``."""
        q = self._q.get(key)
        return 0 if q is None else q.running

    def interrupt(self, owner: CallKey, error: JidoError) -> None:
        """Stop ``owner``'s wait for a slot with ``error`` (a cancelled call)."""
        fut = self._waiting.get(owner)
        if fut is not None and not fut.done():
            fut.set_exception(error)

    @contextlib.asynccontextmanager
    async def hold(
        self, slots: Sequence[Slot], wait_s: float, *, owner: CallKey | None = None
    ) -> AsyncIterator[None]:
        """Hold every slot of ``slots`` (:meth:`take`) for the block; free them on exit."""
        held = await self.take(slots, wait_s, owner=owner)
        try:
            yield
        finally:
            await self.free(held)

    def slot(
        self, slot: Slot, wait_s: float, *, owner: CallKey | None = None
    ) -> AbstractAsyncContextManager[None]:
        """Hold one slot of ``slot.key``; :class:`QuotaExceeded` when none frees up within ``wait_s``."""
        return self.hold((slot,), wait_s, owner=owner)

    async def take(self, slots: Sequence[Slot], wait_s: float, *, owner: CallKey | None = None) -> HeldSlots:
        """Take every slot of ``slots`` within ``wait_s`` in all: this replica's count of each, in
        order, then the cluster's leases (:meth:`_lease_all`). :class:`QuotaExceeded` (or the
        interrupt's error) when one cannot be had; whatever was taken is then given back."""
        deadline = asyncio.get_running_loop().time() + wait_s
        held = HeldSlots()
        try:
            for slot in slots:
                held.taken.append(_Taken(slot, await self._count(slot, deadline, owner)))
            if self.leases is not None:
                await self._lease_all(self.leases, held, deadline, owner)
        except BaseException:
            await self.free(held)
            raise
        return held

    async def free(self, held: HeldSlots) -> None:
        """Free ``held``'s slots in the reverse order: each one's lease, then this replica's count."""
        held.freed = True
        try:
            while held.taken:
                taken = held.taken.pop()
                try:
                    if taken.lease is not None:
                        await taken.lease.release()
                finally:
                    self._uncount(taken)
        finally:
            self._abandon(held)

    def _abandon(self, held: HeldSlots) -> None:
        """Free what a cancelled :meth:`free` left: the counts now, the leases in the background."""
        while held.taken:
            taken = held.taken.pop()
            if taken.lease is not None:
                self._in_background(taken.lease.release())
            self._uncount(taken)

    def free_later(self, held: HeldSlots) -> None:
        """Free ``held``'s slots in a task of their own: the call's answer does not wait for the
        leases' writes (its slots stay busy the moment those take; :meth:`drain` waits for them)."""
        self._in_background(self.free(held))

    async def drain(self) -> None:
        """Wait until every slot freed in the background is free (a stopping replica)."""
        while self._background:
            await asyncio.wait(set(self._background))

    def _in_background(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(work, name="quota slots")
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def _count(self, slot: Slot, deadline: float, owner: CallKey | None) -> _Quota:
        """This replica's slot of ``slot.key`` by ``deadline`` (first come, first served)."""
        loop = asyncio.get_running_loop()
        while True:
            # looked up again after each wait: the last release may have dropped an idle record
            q = self._q.setdefault(slot.key, _Quota(slot.limit))
            q.limit = slot.limit
            if q.running < q.limit:
                q.running += 1
                return q
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise QuotaExceeded(slot.scope, slot.limit)
            await self._wait(q, remaining, slot, owner)

    def _uncount(self, taken: _Taken) -> None:
        q = taken.quota
        q.running -= 1
        self._wake(q)
        if q.running == 0 and not q.waiters and self._q.get(taken.slot.key) is q:
            del self._q[taken.slot.key]

    async def _lease_all(
        self, leases: Leases, held: HeldSlots, deadline: float, owner: CallKey | None
    ) -> None:
        """The cluster's leases of ``held``'s slots: every one tried at once (their writes go out
        together: one round trip for all when they are free), then, from the first one that was
        not free, one after the other with waiting, the later ones given back first: a call never
        waits for a slot while it holds a later one (the order of decision 0176)."""
        loop = asyncio.get_running_loop()
        await self._interruptible(self._all_at_once(leases, held), owner)
        missing = next((i for i, taken in enumerate(held.taken) if taken.lease is None), None)
        if missing is None:
            return
        for taken in reversed(held.taken[missing + 1 :]):
            lease, taken.lease = taken.lease, None
            if lease is not None:
                await lease.release()
        for i, taken in enumerate(held.taken[missing:]):
            wait_s = max(deadline - loop.time(), 0.0)
            await self._interruptible(self._one_waiting(leases, taken, held, wait_s, tried=i == 0), owner)

    async def _all_at_once(self, leases: Leases, held: HeldSlots) -> None:
        """Try every slot's lease at once, each in a task of its own that a stopped wait does not
        cancel (what it takes then is given back: :meth:`_keep`); the first error is raised."""
        if len(held.taken) == 1:  # nothing to send beside it
            await self._one_at_once(leases, held.taken[0], held)
            return
        tries = [self._in_background(self._one_at_once(leases, taken, held)) for taken in held.taken]
        await asyncio.wait(tries)
        errors = [task.exception() for task in tries if not task.cancelled()]  # each one retrieved
        for error in errors:
            if error is not None:
                raise error

    async def _one_at_once(self, leases: Leases, taken: _Taken, held: HeldSlots) -> None:
        await self._keep(held, taken, await leases.take_at_once(taken.slot))

    async def _one_waiting(
        self, leases: Leases, taken: _Taken, held: HeldSlots, wait_s: float, *, tried: bool
    ) -> None:
        await self._keep(held, taken, await leases.take(taken.slot, wait_s, tried=tried))

    @staticmethod
    async def _keep(held: HeldSlots, taken: _Taken, lease: HeldLease | None) -> None:
        """Record ``lease`` as ``taken``'s, or give it back when the call has let go meanwhile."""
        if lease is None:
            return
        if held.freed:
            await lease.release()
        else:
            taken.lease = lease

    async def _interruptible(self, work: Coroutine[Any, Any, None], owner: CallKey | None) -> None:
        """Run ``work`` (a lease take, which records what it takes) in a task ``owner``'s
        interrupt stops like a wait here."""
        loop = asyncio.get_running_loop()
        task = loop.create_task(work)
        stop: asyncio.Future[None] = loop.create_future()
        if owner is not None:
            self._waiting[owner] = stop
        interrupted = False
        try:
            await asyncio.wait((task, stop), return_when=asyncio.FIRST_COMPLETED)
            interrupted = stop.done()
        finally:
            if owner is not None and self._waiting.get(owner) is stop:
                del self._waiting[owner]
            if stop.done():
                stop.exception()  # retrieved, also when a cancel of this call came first
            if interrupted or not task.done():  # interrupted, or this call was cancelled
                await cancel_and_wait(task)
        if interrupted:
            stop.result()  # raises the interrupt's error
        task.result()

    async def _wait(self, q: _Quota, remaining: float, slot: Slot, owner: CallKey | None) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        q.waiters.append(fut)
        if owner is not None:
            self._waiting[owner] = fut
        try:
            await asyncio.wait_for(fut, remaining)
        except TimeoutError:
            raise QuotaExceeded(slot.scope, slot.limit) from None
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self._wake(q)  # pass the wake-up on: this waiter will not take the slot
            raise
        finally:
            if fut in q.waiters:
                q.waiters.remove(fut)
            if owner is not None and self._waiting.get(owner) is fut:
                del self._waiting[owner]

    @staticmethod
    def _wake(q: _Quota) -> None:
        while q.waiters:
            w = q.waiters.pop(0)
            if not w.done():
                w.set_result(None)
                return


#: Calls of one project that may wait at once, holding no request slot, per replica
#: (``JIDO_MAX_QUEUED_CALLS``).
MAX_QUEUED_PER_PROJECT: Final = 512
#: The bounds of ``JIDO_MAX_QUEUED_CALLS``.
QUEUE_LIMIT_RANGE: Final = (1, 100_000)


def queue_limit(environ: Mapping[str, str] | None = None) -> int:
    """``JIDO_MAX_QUEUED_CALLS`` (1 … 100000), else :data:`MAX_QUEUED_PER_PROJECT`; ``ValueError``
    naming the variable when it is not a whole number in range."""
    raw = (os.environ if environ is None else environ).get("JIDO_MAX_QUEUED_CALLS")
    if not raw:
        return MAX_QUEUED_PER_PROJECT
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"JIDO_MAX_QUEUED_CALLS={raw!r} is not a whole number of calls") from None
    low, high = QUEUE_LIMIT_RANGE
    if not low <= value <= high:
        raise ValueError(f"JIDO_MAX_QUEUED_CALLS={raw} is outside {low} … {high}")
    return value


def _no_release() -> AbstractAsyncContextManager[None]:
    return contextlib.nullcontext()


class WaitingRoom:
    """Where a call waits holding no request slot of the replica; bounded per project.

    ``release`` gives the request's slot back for the block (``ServiceHost.released``: outside a
    request of the host it does nothing); ``limit`` bounds the calls of one project inside.
    """

    def __init__(
        self,
        *,
        release: Callable[[], AbstractAsyncContextManager[None]] = _no_release,
        limit: int | None = None,
    ) -> None:
        self.release = release
        self.limit = queue_limit() if limit is None else limit
        low, high = QUEUE_LIMIT_RANGE
        if not low <= self.limit <= high:
            raise ValueError(f"the queue limit must be {low} … {high} calls per project, not {self.limit}")
        self._per_project: dict[str, int] = {}

    def waiting(self, project_id: str) -> int:
        """Calls of ``project_id`` in the room now."""
        return self._per_project.get(project_id, 0)

    @property
    def total(self) -> int:
        """Calls of every project in the room now."""
        return sum(self._per_project.values())

    @contextlib.asynccontextmanager
    async def wait(self, project_id: str, what: str) -> AsyncIterator[None]:
        """Run the block (a wait for ``what``) holding no request slot; a slot is taken again
        (waiting like a new request) when it ends. A project with :attr:`limit` calls inside
        already gets :class:`QuotaExceeded` at once."""
        count = self.waiting(project_id)
        if count >= self.limit:
            raise QuotaExceeded(
                "project (calls waiting)",
                self.limit,
                message=(
                    f"this call would wait for {what}, but {count} calls of its project wait already: "
                    f"the limit per replica (JIDO_MAX_QUEUED_CALLS={self.limit}); retry later"
                ),
            )
        self._per_project[project_id] = count + 1
        try:
            async with self.release():
                yield
        finally:
            left = self.waiting(project_id) - 1
            if left > 0:
                self._per_project[project_id] = left
            else:
                self._per_project.pop(project_id, None)
