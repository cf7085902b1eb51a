"""Loop records: KV ``jido_prd_loops``, one record per ``<project_id>.<prd>``, changed only by
compare-and-set on the KV revision.

A record is the :class:`LoopInfo` clients see, the options the loop was started with (so another
replica can resume it as it was asked) and the owner's heartbeat. Why CAS everywhere: several
replicas of the prd service share the bucket; the revision is the only lock. Whoever writes
with a stale revision has lost the record (another replica took it over, or a user action
changed it) and learns so from :class:`StaleRecord`.

Ownership is a lease: the owner renews ``heartbeat_at`` every ``heartbeat_s``; a record whose
state is ``running`` and whose heartbeat is older than ``lease_s`` belongs to a dead replica and
is taken over (one CAS winner) by any replica's recovery scan. A ``paused`` record is never
taken over: it waits for ``resume``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Final

import nats.js.errors
from nats.js.kv import KeyValue
from pydantic import BaseModel, ConfigDict, Field

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.errors import Conflict
from jidocode.shared.events.prd import LoopInfo, RunPrd
from jidocode.shared.kv_keys import kv_keys

from .states import TERMINAL

__all__ = ["LoopRecord", "LoopStore", "RunOptions", "StaleRecord", "Stored", "loop_key"]

#: Revisions kept per key (the last few transitions, for a look with ``nats kv history``).
HISTORY: Final = 5


def loop_key(project_id: str, prd: str) -> str:
    """``<project_id>.<prd>``: the record's key."""
    subjects.validate_token(project_id, "project id")
    subjects.validate_token(prd, "prd name")
    return f"{project_id}.{prd}"


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
    #: Wall-clock seconds of the owner's last heartbeat (0: nobody owns it).
    heartbeat_at: float = 0.0
    #: ``paused``/``stopped`` asked by a replica that does not run the loop: the owner notices it
    #: at its next heartbeat (its CAS fails on the changed revision) and acts on it.
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

    def expired(self, now: float, lease_s: float) -> bool:
        return self.heartbeat_at + lease_s < now


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

    def __init__(self, kv: KeyValue) -> None:
        self.kv = kv

    @classmethod
    async def open(cls, bus: Bus) -> LoopStore:
        return cls(await bus.kv(subjects.BUCKET_PRD_LOOPS, history=HISTORY))

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

    async def take_over(self, stored: Stored, owner: str, *, now: float | None = None) -> Stored | None:
        """Become the owner of ``stored`` (an expired one); ``None`` when another replica won."""
        info = stored.record.info.model_copy(update={"owner": owner})
        record = stored.record.model_copy(update={"info": info, "heartbeat_at": now or time.time()})
        try:
            return await self.put(stored, record)
        except StaleRecord:
            return None

    async def records(self, project_id: str) -> list[Stored]:
        """Every loop record of one project."""
        subjects.validate_token(project_id, "project id")
        out: list[Stored] = []
        for key in await kv_keys(self.kv, f"{project_id}."):
            stored = await self._get(key)
            if stored is not None:
                out.append(stored)
        return out

    async def expired(self, lease_s: float, *, now: float | None = None) -> list[Stored]:
        """Records of ``running`` loops whose owner's heartbeat is older than ``lease_s``."""
        now = now or time.time()
        out: list[Stored] = []
        for key in await kv_keys(self.kv):
            stored = await self._get(key)
            if stored is None:
                continue
            if stored.record.info.state == "running" and stored.record.expired(now, lease_s):
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
