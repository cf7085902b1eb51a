"""Loop records: KV ``jido_prd_loops``, one record per ``<project_id>.<prd>``, changed only by
compare-and-set on the KV revision.

A record is the :class:`LoopInfo` clients see and the options the loop was started with (so
another replica can resume it as it was asked). Why CAS everywhere: several
replicas of the prd service share the bucket; the revision is the only lock. Whoever writes
with a stale revision has lost the record (another replica took it over, or a user action
changed it) and learns so from :class:`StaleRecord`.

Whether the owner of a ``running`` record is alive is a lease of the shared primitive
(:mod:`jidocode.shared.lease`, decision 0319) on the key ``<project_id>.<prd>.lease`` of the same
bucket (three tokens, so no record's key): the owner keeps it renewed while the loop runs and
deletes it on a clean stop; a replica's recovery scan takes over a ``running`` record whose lease
is free or went unrenewed for ``lease_s`` (:meth:`LoopStore.running` lists them). A ``paused``
record is never taken over: it waits for ``resume``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import nats.js.errors
from nats.js.client import JetStreamContext
from nats.js.kv import KeyValue
from pydantic import BaseModel, ConfigDict, Field

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.errors import Conflict
from jidocode.shared.events.prd import LoopInfo, RunPrd
from jidocode.shared.kv_keys import kv_keys
from jidocode.shared.lease import LeaseBucket

from .states import TERMINAL

__all__ = ["LoopRecord", "LoopStore", "RunOptions", "StaleRecord", "Stored", "lease_key", "loop_key"]

#: Revisions kept per key (the last few transitions, for a look with ``nats kv history``).
HISTORY: Final = 5


def loop_key(project_id: str, prd: str) -> str:
    """``<project_id>.<prd>``: the record's key."""
    subjects.validate_token(project_id, "project id")
    subjects.validate_token(prd, "prd name")
    return f"{project_id}.{prd}"


def lease_key(project_id: str, prd: str) -> str:
    """``<project_id>.<prd>.lease``: the key of the loop owner's lease (beside its record)."""
    return f"{loop_key(project_id, prd)}.lease"


def _is_record_key(key: str) -> bool:
    """Whether ``key`` names a record (two tokens), not a lease."""
    return key.count(".") == 1


class RunOptions(BaseModel):
    """What ``run`` was asked (kept so a resume, here or on another replica, does the same)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    provider: str = ""
    model: str = ""
    worktree: bool = False
    branch: str = ""
    allow_dirty: bool = False

    @classmethod
    def of(cls, cmd: RunPrd) -> RunOptions:
        return cls(
            provider=cmd.provider,
            model=cmd.model,
            worktree=cmd.worktree,
            branch=cmd.branch,
            allow_dirty=cmd.allow_dirty,
        )


class LoopRecord(BaseModel):
    """One PRD's loop as stored."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    info: LoopInfo
    options: RunOptions = Field(default_factory=RunOptions)
    #: ``paused``/``stopped`` asked by a replica that does not run the loop: the owner notices it
    #: at its next record write (its CAS fails on the changed revision) and acts on it.
    request: str = ""
    request_reason: str = ""
    #: The failing checks' output the next attempt's prompt carries (kept here so a replica
    #: resuming the loop after a crash asks with it too; capped by the loop).
    failed_checks: str = ""
    #: The name of the attempt's provider iteration (``IterationRequest.metadata["iteration_id"]``),
    #: written before it starts: a replica taking the loop over abandons it first
    #: (``providers.base.Abandons``) so two iterations never work the same tree.
    iteration_id: str = ""
    #: The branch a loop of this PRD created (``git switch --create`` or a new worktree's branch):
    #: a later loop may check it out again although ``prd.json``, which the agent can edit, names
    #: it; any other existing branch must be named on the command line (decision 0300).
    created_branch: str = ""
    #: The branch the loop started from (the root's before it switched): ``finish`` merges into it.
    base_branch: str = ""


@dataclass(frozen=True)
class Stored:
    """A record and the KV revision it was read at (what the next CAS must name)."""

    record: LoopRecord
    revision: int


class StaleRecord(Conflict):
    """The record changed since it was read: this writer no longer owns what it wrote about."""


def _now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class LoopStore:
    """The records of every PRD loop (any replica, any project)."""

    def __init__(self, kv: KeyValue, js: JetStreamContext) -> None:
        self.kv = kv
        self.js = js

    @classmethod
    async def open(cls, bus: Bus) -> LoopStore:
        return cls(await bus.kv(subjects.BUCKET_PRD_LOOPS, history=HISTORY), bus.js)

    def leases(self, ttl_s: float, *, clock: Callable[[], float] = time.monotonic) -> LeaseBucket:
        """The owners' leases (``lease_key``), taken over once unrenewed for ``ttl_s`` on ``clock``."""
        return LeaseBucket(self.js, self.kv, subjects.BUCKET_PRD_LOOPS, ttl_s=ttl_s, clock=clock)

    async def get(self, project_id: str, prd: str) -> Stored | None:
        return await self._get(loop_key(project_id, prd))

    async def _get(self, key: str) -> Stored | None:
        try:
            entry = await self.kv.get(key)
        except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError):
            return None
        if not entry.value:
            return None
        return Stored(LoopRecord.model_validate_json(entry.value), int(entry.revision or 0))

    async def claim(self, record: LoopRecord) -> Stored:
        """Store a new loop's record: only where there is none, or the last loop ended
        (``stopped``/``error``/``completed``); else ``Conflict`` naming its state and owner."""
        key = loop_key(record.info.project_id, record.info.prd)
        record = _touched(record)
        current = await self._get(key)
        try:
            if current is None:
                revision = await self.kv.create(key, _dump(record))
            else:
                info = current.record.info
                if info.state not in TERMINAL:
                    raise _busy(info)
                revision = await self.kv.update(key, _dump(record), last=current.revision)
        except nats.js.errors.KeyWrongLastSequenceError:
            again = await self._get(key)
            if again is not None:
                raise _busy(again.record.info) from None
            raise Conflict(f"the loop of {record.info.prd!r} changed while starting it") from None
        return Stored(record, revision)

    async def put(self, stored: Stored, record: LoopRecord) -> Stored:
        """Replace ``stored`` with ``record`` if nobody changed it since (else :class:`StaleRecord`)."""
        key = loop_key(record.info.project_id, record.info.prd)
        record = _touched(record)
        try:
            revision = await self.kv.update(key, _dump(record), last=stored.revision)
        except nats.js.errors.KeyWrongLastSequenceError:
            raise StaleRecord(
                f"the loop record of {record.info.prd!r} changed under its writer (revision "
                f"{stored.revision} is old)",
                details={"prd": record.info.prd, "revision": stored.revision},
            ) from None
        return Stored(record, revision)

    async def take_over(self, stored: Stored, owner: str) -> Stored | None:
        """Name ``owner`` in ``stored`` (a loop whose lease it took); ``None`` when it changed."""
        info = stored.record.info.model_copy(update={"owner": owner})
        record = stored.record.model_copy(update={"info": info})
        try:
            return await self.put(stored, record)
        except StaleRecord:
            return None

    async def records(self, project_id: str) -> list[Stored]:
        """Every loop record of one project."""
        subjects.validate_token(project_id, "project id")
        out: list[Stored] = []
        for key in await kv_keys(self.kv, f"{project_id}.", one_token=True):
            stored = await self._get(key)
            if stored is not None:
                out.append(stored)
        return out

    async def running(self) -> list[Stored]:
        """The records of every ``running`` loop (any project): what a recovery scan looks at."""
        out: list[Stored] = []
        for key in filter(_is_record_key, await kv_keys(self.kv)):
            stored = await self._get(key)
            if stored is not None and stored.record.info.state == "running":
                out.append(stored)
        return out


def _busy(info: LoopInfo) -> Conflict:
    owner = f" on {info.owner}" if info.owner else ""
    return Conflict(
        f"the loop of PRD {info.prd!r} is {info.state}{owner}: one loop per PRD "
        f"({'resume or stop it' if info.state == 'paused' else 'stop it first'})",
        details={"prd": info.prd, "state": info.state, "owner": info.owner},
    )


def _touched(record: LoopRecord) -> LoopRecord:
    return record.model_copy(update={"info": record.info.model_copy(update={"updated_at": _now_iso()})})


def _dump(record: LoopRecord) -> bytes:
    return record.model_dump_json().encode()
