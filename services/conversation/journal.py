"""The canonical journal on JetStream and lookups in the output stream.

One stream per kind of traffic (``subjects.STREAM_JOURNAL`` holds every
conversation, read back by subject filter). Appends are fenced: each carries
``Nats-Expected-Last-Subject-Sequence``, so a replica that lost ownership of a
conversation can never interleave entries with the new owner's
(:class:`LostOwnership`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig, DeliverPolicy

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.envelope import MSG_ID_HEADER, decode
from jidocode.shared.errors import JidoError, RequestTimeout

from .codec import to_payload
from .core import Signal
from .retention import StreamLimits

__all__ = ["EXPECTED_LAST_SUBJECT_SEQ", "Journal", "LostOwnership", "ensure_streams", "publish_with_retry"]

log = logging.getLogger("jidocode.conversation.journal")

EXPECTED_LAST_SUBJECT_SEQ = "Nats-Expected-Last-Subject-Sequence"
_WRONG_LAST_SEQUENCE = 10071
_READ_TIMEOUT = 30.0
#: Entries per atomic batch (the server accepts up to 1000).
_BATCH_MAX = 500
#: Up to this many entries are appended one fenced publish after another: an atomic
#: batch costs the server about 1.8 ms whatever its size, a single append about
#: 0.15-0.3 ms (measured on nats-server 2.12 with bench/conversation.py's store), so
#: atomic batches pay off only for bursts.
SMALL_BATCH = 4


def _fast_signal(payload: bytes) -> Signal:
    """A journal entry (written by us, in structured mode) as a :class:`Signal`, without re-validation."""
    raw = json.loads(payload)
    data = raw["data"]
    return Signal.trusted(
        id=raw["id"],
        type=raw["type"],
        source=raw["source"],
        data=data if isinstance(data, dict) else {},
        correlation_id=raw.get("correlationid") or raw["id"],
        causation_id=raw.get("causationid"),
        time=raw.get("time"),
    )


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
    ``Nats-Msg-Id``: the server drops the copy if the first one was stored). Returns the sequence."""
    delay = 0.1
    for attempt in range(1, attempts + 1):
        try:
            ack = await bus.js.publish(subject, payload, timeout=2.0, headers=headers)
            return int(ack.seq)
        except nats.js.errors.ServiceUnavailableError:
            if attempt == attempts:
                raise
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
            if attempt == attempts:
                raise RequestTimeout(
                    f"JetStream did not acknowledge a publish on {subject} after {attempts} attempts",
                    details={"subject": subject, "msg_id": headers.get(MSG_ID_HEADER)},
                ) from None
        log.warning("publish on %s not acknowledged (attempt %d), retrying", subject, attempt)
        await asyncio.sleep(delay)
        delay = min(delay * 2, 2.0)
    raise AssertionError("unreachable")


class Journal:
    def __init__(self, bus: Bus, *, atomic: bool = False) -> None:
        self.bus = bus
        #: Append several entries as one atomic batch (all or none, fenced once).
        self.atomic = atomic

    async def append_many(
        self, project_id: str, conversation_id: str, entries: list[Signal], *, expected_last: int
    ) -> int:
        """Append ``entries`` in order; return the sequence of the last one.

        A burst (more than :data:`SMALL_BATCH` entries) goes as atomic batches
        when the server has them: the entries of a chunk are stored all or none,
        the first one carrying the fence. A batch is not retried: any doubt (a
        timeout, a rejected commit) stops the actor, which then rebuilds from
        what the journal really holds. A few entries are appended one at a time,
        each fenced on the one before, as on a server without atomic batches.
        """
        if not self.atomic or len(entries) <= SMALL_BATCH:
            for entry in entries:
                expected_last = await self.append(
                    project_id, conversation_id, entry, expected_last=expected_last
                )
            return expected_last
        subject = subjects.journal(project_id, conversation_id)
        for start in range(0, len(entries), _BATCH_MAX):
            chunk = entries[start : start + _BATCH_MAX]
            batch_id = secrets.token_hex(12)
            for index, entry in enumerate(chunk, 1):
                payload, headers = to_payload(entry, project_id, conversation_id)
                headers["Nats-Batch-Id"] = batch_id
                headers["Nats-Batch-Sequence"] = str(index)
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
                        raise LostOwnership(
                            f"journal of {project_id}/{conversation_id} moved past {expected_last}: "
                            "another replica owns it now",
                            details={"project_id": project_id, "conversation_id": conversation_id},
                        ) from None
                    raise
                except nats.errors.TimeoutError:
                    raise RequestTimeout(
                        f"JetStream did not acknowledge a journal batch of {len(chunk)} entries",
                        details={"subject": subject},
                    ) from None
                expected_last = int(ack.seq)
        return expected_last

    async def append(
        self, project_id: str, conversation_id: str, entry: Signal, *, expected_last: int, attempts: int = 5
    ) -> int:
        """Append ``entry``; return its stream sequence. Retries keep the same message id."""
        subject = subjects.journal(project_id, conversation_id)
        payload, headers = to_payload(entry, project_id, conversation_id)
        headers[EXPECTED_LAST_SUBJECT_SEQ] = str(expected_last)
        try:
            return await publish_with_retry(self.bus, subject, payload, headers, attempts=attempts)
        except nats.js.errors.APIError as exc:
            if exc.err_code == _WRONG_LAST_SEQUENCE:
                raise LostOwnership(
                    f"journal of {project_id}/{conversation_id} moved past {expected_last}: "
                    "another replica owns it now",
                    details={"project_id": project_id, "conversation_id": conversation_id},
                ) from None
            raise

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
            when = _fast_signal(msg.data or b"").time
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
        """Every journal entry of the conversation, in order, and the sequence of the last one."""
        subject = subjects.journal(project_id, conversation_id)
        last = await self.last_sequence(project_id, conversation_id)
        if last == 0:
            return [], 0
        info = await self.bus.js.stream_info(subjects.STREAM_JOURNAL, subjects_filter=subject)
        count = int((info.state.subjects or {}).get(subject, 0))
        entries: list[Signal] = []
        done = asyncio.Event()
        problem: list[BaseException] = []

        async def _cb(msg: Msg) -> None:
            try:
                entries.append(_fast_signal(msg.data))
            except Exception as exc:  # a corrupt journal must not be half-read silently
                problem.append(exc)
                done.set()
                return
            if len(entries) >= count:
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
                f"journal of {project_id}/{conversation_id} has an unreadable entry: {problem[0]}",
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
