"""The canonical journal on JetStream and lookups in the output stream.

One stream per kind of traffic (``subjects.STREAM_JOURNAL`` holds every
conversation, read back by subject filter). Appends are fenced: each carries
``Nats-Expected-Last-Subject-Sequence``, so a replica that lost ownership of a
conversation can never interleave entries with the new owner's
(:class:`LostOwnership`).

A message carries the entries of one reducer step (format 2, :mod:`.codec`;
decision 0322), so a step is one acknowledged append. An append is idempotent
by its message id: a retry after a lost acknowledgement, refused by the fence
because the first try was stored, is recognised as the same write.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig, DeliverPolicy

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.envelope import MSG_ID_HEADER, decode
from jidocode.shared.errors import JidoError, RequestTimeout, StorageFull
from jidocode.shared.store_space import format_bytes, full_store

from .codec import journal_entries, journal_messages
from .core import Signal
from .retention import StreamLimits

__all__ = [
    "EXPECTED_LAST_SUBJECT_SEQ",
    "Journal",
    "LostOwnership",
    "ensure_streams",
    "publish_with_retry",
    "unacknowledged",
]

log = logging.getLogger("jidocode.conversation.journal")

EXPECTED_LAST_SUBJECT_SEQ = "Nats-Expected-Last-Subject-Sequence"
_WRONG_LAST_SEQUENCE = 10071
_READ_TIMEOUT = 30.0
#: Entries per atomic batch (the server accepts up to 1000).
_BATCH_MAX = 500
#: Up to this many messages are appended one fenced publish after another: an atomic
#: batch costs the server about 1.8 ms whatever its size, a single append about
#: 0.15-0.3 ms (measured on nats-server 2.12 with bench/conversation.py's store), so
#: atomic batches pay off only for bursts. (A message holds as many entries as fit
#: the payload limit: a step of the reducer is one message.)
SMALL_BATCH = 4


class LostOwnership(JidoError):  # type: ignore[misc]
    """Another replica appended to this conversation's journal: stop acting for it."""

    error_type = "lost_ownership"


async def ensure_streams(
    bus: Bus, *, events_max_age_s: float | None = None, limits: StreamLimits | None = None
) -> bool:
    """The three conversation streams with their retention (idempotent; every replica calls it,
    and an existing stream is updated to the limits: :mod:`.retention`).

    ``limits`` default to the environment's (:meth:`StreamLimits.from_env`);
    ``events_max_age_s`` (the runtime setting) overrides the events stream's age.
    Returns whether the journal accepts atomic batch publishes (nats-server >= 2.12).
    """
    limits = limits or StreamLimits.from_env()
    if events_max_age_s is not None:
        limits = limits.model_copy(update={"events_max_age_s": events_max_age_s})
    await bus.ensure_stream(
        subjects.STREAM_CONV_IN, [subjects.conversation_in_filter()], **limits.stream_config("input")
    )
    journal = limits.stream_config("journal")
    try:
        await bus.ensure_stream(
            subjects.STREAM_JOURNAL, [subjects.journal_filter()], allow_atomic=True, **journal
        )
        # An older server may ignore the unknown setting: trust only what it reports back.
        info = await bus.js.stream_info(subjects.STREAM_JOURNAL)
        atomic = bool(info.config.allow_atomic)
    except nats.js.errors.APIError as exc:
        log.info("journal without atomic batches (%s): one acknowledged append per entry", exc)
        await bus.ensure_stream(subjects.STREAM_JOURNAL, [subjects.journal_filter()], **journal)
        atomic = False
    await bus.ensure_stream(
        subjects.STREAM_EVENTS, [subjects.conversation_out_filter()], **limits.stream_config("events")
    )
    return atomic


async def publish_with_retry(
    bus: Bus, subject: str, payload: bytes, headers: dict[str, str], *, attempts: int = 5
) -> int:
    """JetStream publish; a timed-out attempt is retried with the same headers (so the same
    ``Nats-Msg-Id``: the server drops the copy if the first one was stored). Returns the sequence.

    A store whose disk is full (as ``up`` names it) is ``storage_full`` at once: the server
    would drop the write without answering."""
    if full_store(os.environ) is not None:
        raise unacknowledged(
            f"JetStream's store has no room for a publish on {subject}", {"subject": subject}
        )
    delay = 0.1
    for attempt in range(1, attempts + 1):
        try:
            ack = await bus.js.publish(subject, payload, timeout=2.0, headers=headers)
            return int(ack.seq)
        except nats.js.errors.ServiceUnavailableError:
            if attempt == attempts:
                raise
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
            # a full store's disk is an answer at once: asking again cannot make room
            if attempt == attempts or full_store(os.environ) is not None:
                raise unacknowledged(
                    f"JetStream did not acknowledge a publish on {subject} (attempts: {attempt})",
                    {"subject": subject, "msg_id": headers.get(MSG_ID_HEADER)},
                ) from None
        log.warning("publish on %s not acknowledged (attempt %d), retrying", subject, attempt)
        await asyncio.sleep(delay)
        delay = min(delay * 2, 2.0)
    raise AssertionError("unreachable")


def unacknowledged(message: str, details: dict[str, object]) -> JidoError:
    """The error of a write JetStream never acknowledged: ``storage_full`` naming the store when its
    disk is full (nats-server drops a write that does not fit without answering; ``up`` names the
    store in :data:`~jidocode.shared.store_space.STORE_ENV`), else a timeout."""
    full = full_store(os.environ)
    if full is None:
        return RequestTimeout(message, details=details)
    store, free = full
    return StorageFull(
        f"{message}: the disk of the JetStream store {store} is full ({format_bytes(free)} free). "
        "Free space on that disk (`jidocode doctor` shows what the streams use); what was accepted "
        "before is kept, and the conversation carries on once there is room",
        details={**details, "store": str(store), "free_bytes": free},
    )


class Journal:
    def __init__(self, bus: Bus, *, atomic: bool = False) -> None:
        self.bus = bus
        #: Append several entries as one atomic batch (all or none, fenced once).
        self.atomic = atomic

    async def append_many(
        self, project_id: str, conversation_id: str, entries: list[Signal], *, expected_last: int
    ) -> int:
        """Append ``entries`` in order; return the sequence of the last message.

        They are packed into as few messages as fit (one for a step of the reducer).
        Up to :data:`SMALL_BATCH` messages are appended one at a time, each fenced
        on the one before (:meth:`append_message`). More go as atomic batches when
        the server has them: a chunk's messages are stored all or none, the first
        one carrying the fence. A batch is not retried: any doubt (a timeout, a
        rejected commit) stops the actor, which then rebuilds from what the journal
        really holds.
        """
        messages = list(journal_messages(entries, project_id, conversation_id))
        if not self.atomic or len(messages) <= SMALL_BATCH:
            for payload, headers in messages:
                expected_last = await self.append_message(
                    project_id, conversation_id, payload, headers, expected_last=expected_last
                )
            return expected_last
        for start in range(0, len(messages), _BATCH_MAX):
            expected_last = await self._append_batch(
                project_id, conversation_id, messages[start : start + _BATCH_MAX], expected_last
            )
        return expected_last

    async def _append_batch(
        self,
        project_id: str,
        conversation_id: str,
        chunk: list[tuple[bytes, dict[str, str]]],
        expected_last: int,
    ) -> int:
        """One atomic batch of journal messages, fenced at its first; the sequence of its last."""
        subject = subjects.journal(project_id, conversation_id)
        batch_id = secrets.token_hex(12)
        for index, (payload, headers) in enumerate(chunk, 1):
            headers = {**headers, "Nats-Batch-Id": batch_id, "Nats-Batch-Sequence": str(index)}
            if index == 1:
                headers[EXPECTED_LAST_SUBJECT_SEQ] = str(expected_last)
            if index < len(chunk):
                await self.bus.nc.publish(subject, payload, headers=headers)
                continue
            headers["Nats-Batch-Commit"] = "1"
            try:
                ack = await self.bus.js.publish(subject, payload, timeout=5.0, headers=headers)
            except nats.js.errors.APIError as exc:
                if exc.err_code == _WRONG_LAST_SEQUENCE:
                    raise _lost(project_id, conversation_id, expected_last) from None
                raise
            except nats.errors.TimeoutError:
                raise unacknowledged(
                    f"JetStream did not acknowledge a journal batch of {len(chunk)} messages",
                    {"subject": subject},
                ) from None
        return int(ack.seq)

    async def append(
        self, project_id: str, conversation_id: str, entry: Signal, *, expected_last: int, attempts: int = 5
    ) -> int:
        """Append ``entry`` as a message of its own; return its stream sequence."""
        ((payload, headers),) = journal_messages([entry], project_id, conversation_id)
        return await self.append_message(
            project_id, conversation_id, payload, headers, expected_last=expected_last, attempts=attempts
        )

    async def append_message(
        self,
        project_id: str,
        conversation_id: str,
        payload: bytes,
        headers: dict[str, str],
        *,
        expected_last: int,
        attempts: int = 5,
    ) -> int:
        """Append one journal message fenced on ``expected_last``; return its stream sequence.

        Retries keep the same message id. The fence refusing it while the journal's last
        message carries that id is not a rival: it is this write, stored by an attempt
        whose acknowledgement was lost, and its sequence is returned.
        """
        subject = subjects.journal(project_id, conversation_id)
        headers = {**headers, EXPECTED_LAST_SUBJECT_SEQ: str(expected_last)}
        try:
            return await publish_with_retry(self.bus, subject, payload, headers, attempts=attempts)
        except nats.js.errors.APIError as exc:
            if exc.err_code != _WRONG_LAST_SEQUENCE:
                raise
        stored = await self._last_with_id(subject, headers[MSG_ID_HEADER], after=expected_last)
        if stored is None:
            raise _lost(project_id, conversation_id, expected_last)
        log.info(
            "journal append %s was stored by an earlier attempt (seq %d)", headers[MSG_ID_HEADER], stored
        )
        return stored

    async def _last_with_id(self, subject: str, msg_id: str, *, after: int) -> int | None:
        """The sequence of ``subject``'s last message when it is past ``after`` and is ``msg_id``."""
        try:
            msg = await self.bus.js.get_last_msg(subjects.STREAM_JOURNAL, subject)
        except nats.js.errors.NotFoundError:
            return None
        seq = int(msg.seq or 0)
        if seq > after and (msg.headers or {}).get(MSG_ID_HEADER) == msg_id:
            return seq
        return None

    async def last_sequence(self, project_id: str, conversation_id: str) -> int:
        try:
            msg = await self.bus.js.get_last_msg(
                subjects.STREAM_JOURNAL, subjects.journal(project_id, conversation_id)
            )
        except nats.js.errors.NotFoundError:
            return 0
        return int(msg.seq or 0)

    async def last_activity(self, project_id: str, conversation_id: str) -> tuple[int, str | None]:
        """How many entries the journal holds up to its last (its sequence) and that entry's time."""
        try:
            msg = await self.bus.js.get_last_msg(
                subjects.STREAM_JOURNAL, subjects.journal(project_id, conversation_id)
            )
        except nats.js.errors.NotFoundError:
            return 0, None
        try:
            when = journal_entries(msg.data or b"")[-1].time
        except Exception:  # an unreadable entry: its time is unknown, the journal still there
            when = None
        return int(msg.seq or 0), when

    async def last_input_sequence(self, project_id: str, conversation_id: str) -> int:
        """The ``JIDO_CONV_IN`` sequence of the conversation's latest input (0: none)."""
        try:
            msg = await self.bus.js.get_last_msg(
                subjects.STREAM_CONV_IN, subjects.conversation_in(project_id, conversation_id)
            )
        except nats.js.errors.NotFoundError:
            return 0
        return int(msg.seq or 0)

    async def read(self, project_id: str, conversation_id: str) -> tuple[list[Signal], int]:
        """Every journal entry of the conversation, in order, and the sequence of the last message."""
        subject = subjects.journal(project_id, conversation_id)
        last = await self.last_sequence(project_id, conversation_id)
        if last == 0:
            return [], 0
        info = await self.bus.js.stream_info(subjects.STREAM_JOURNAL, subjects_filter=subject)
        count = int((info.state.subjects or {}).get(subject, 0))
        entries: list[Signal] = []
        read = 0
        done = asyncio.Event()
        problem: list[BaseException] = []

        async def _cb(msg: Msg) -> None:
            nonlocal read
            try:
                entries.extend(journal_entries(msg.data))
            except Exception as exc:  # a corrupt journal must not be half-read silently
                problem.append(exc)
                done.set()
                return
            read += 1
            if read >= count:
                done.set()

        sub = await self.bus.js.subscribe(
            subject,
            stream=subjects.STREAM_JOURNAL,
            cb=_cb,
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.ALL,
            pending_msgs_limit=count + 1024,
        )
        try:
            await asyncio.wait_for(done.wait(), _READ_TIMEOUT)
        finally:
            await sub.unsubscribe()
        if problem:
            raise JidoError(
                f"journal of {project_id}/{conversation_id} has an unreadable message: {problem[0]}",
                error_type="journal_corrupt",
            )
        return entries, last

    async def find_event_sequence(self, project_id: str, conversation_id: str, event_id: str) -> int | None:
        """The ``STREAM_EVENTS`` sequence of output event ``event_id`` of the conversation, if stored."""
        found: list[int] = []
        done = asyncio.Event()

        async def _cb(msg: Msg) -> None:
            if done.is_set():
                return
            try:
                env = decode(msg.data, msg.headers)
            except JidoError:
                env = None
            if env is not None and env.id == event_id:
                found.append(msg.metadata.sequence.stream)
                done.set()
            elif msg.metadata.num_pending == 0:
                done.set()

        sub = await self.bus.js.subscribe(
            subjects.conversation_out_filter(project_id, conversation_id),
            stream=subjects.STREAM_EVENTS,
            cb=_cb,
            ordered_consumer=True,
            config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL),
        )
        try:
            info = await sub.consumer_info()
            if info.num_pending == 0 and not (info.delivered and info.delivered.stream_seq):
                return None
            await asyncio.wait_for(done.wait(), _READ_TIMEOUT)
        finally:
            await sub.unsubscribe()
        return found[0] if found else None


def _lost(project_id: str, conversation_id: str, expected_last: int) -> LostOwnership:
    return LostOwnership(
        f"journal of {project_id}/{conversation_id} moved past {expected_last}: another replica owns it now",
        details={"project_id": project_id, "conversation_id": conversation_id},
    )
