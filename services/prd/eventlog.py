"""One ordered writer per PRD: every loop event gets the next gapless ``seq``, one line in
``events.jsonl`` and the same CloudEvent on ``jido.prd.<p>.<prd>.<type>`` (stream ``JIDO_PRD``).

Why one writer: the file and the stream must carry the same events in the same order, and a
reader (the CLI, the TUI, a replay) must be able to trust ``seq`` as a line number. So
:meth:`EventLog.emit` numbers the event under a lock and hands it to a bounded queue; a single
task takes events from the queue in order, appends the line (flushed) and publishes it with
``Nats-Msg-Id = <p>.<prd>.<seq>`` (a retried publish, or a replica re-publishing the last line
after a crash, is dropped by the stream's duplicate window, never doubled).

Backpressure, not loss: when the writer is slow (a JetStream hiccup, a slow disk) the queue
fills and :meth:`emit` waits for room, which slows the loop down; nothing is ever dropped.

``seq`` survives restarts: :meth:`EventLog.open` reads the last complete line of
``events.jsonl`` (a torn last line, from a crash in the middle of a write, is cut off) and
takes the larger of that and the loop record's ``seq``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final, TypeVar

from nats.js.api import DiscardPolicy

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.envelope import Envelope, encode
from jidocode.shared.events.prd import PrdEvent

__all__ = [
    "DEFAULT_QUEUE_SIZE",
    "STREAM_MAX_AGE_S",
    "STREAM_MAX_BYTES",
    "EventLog",
    "Publisher",
    "ensure_stream",
    "last_seq",
    "msg_id",
]

log = logging.getLogger("jidocode.prd.eventlog")

E = TypeVar("E", bound=PrdEvent)

#: Events between the loop and the writer before ``emit`` waits.
DEFAULT_QUEUE_SIZE: Final = 256
#: The stream keeps a week of loop events (``events.jsonl`` keeps them all).
STREAM_MAX_AGE_S: Final = 7 * 24 * 3600.0
STREAM_MAX_BYTES: Final = 1 << 30
#: Bytes read from the end of ``events.jsonl`` to find its last line (one event is far smaller).
_TAIL_BYTES: Final = 1 << 20

#: ``(subject, envelope, message id)``: how the writer puts an event on the bus.
Publisher = Callable[[str, Envelope, str], Awaitable[None]]


async def ensure_stream(bus: Bus) -> None:
    """``JIDO_PRD`` over ``jido.prd.>``: a week, at most 1 GiB, oldest discarded first."""
    await bus.ensure_stream(
        subjects.STREAM_PRD,
        [subjects.prd_event_filter()],
        max_age=STREAM_MAX_AGE_S,
        max_bytes=STREAM_MAX_BYTES,
        discard=DiscardPolicy.OLD,
    )


def msg_id(project_id: str, prd: str, seq: int) -> str:
    """The stream's de-duplication id of one event: ``<p>.<prd>.<seq>``."""
    return f"{project_id}.{prd}.{seq}"


def last_seq(path: Path) -> tuple[int, dict[str, Any] | None]:
    """The ``seq`` of the last complete line of ``path`` and that line (0 and ``None`` when none).

    A torn last line (no newline: the process died while writing it) is cut off the file, so the
    next append starts a line of its own.
    """
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return 0, None
    with path.open("rb+") as f:
        start = max(0, size - _TAIL_BYTES)
        f.seek(start)
        tail = f.read()
        if tail and not tail.endswith(b"\n"):
            cut = tail.rfind(b"\n")
            keep = start + cut + 1 if cut >= 0 else start
            log.warning("%s: cutting a torn last line (%d bytes)", path, size - keep)
            f.truncate(keep)
            tail = tail[: cut + 1] if cut >= 0 else b""
    for line in reversed(tail.splitlines()):
        try:
            doc = json.loads(line)
            seq = int(doc["data"]["seq"])
        except (ValueError, KeyError, TypeError):
            continue
        return seq, doc
    return 0, None


class EventLog:
    """The ordered event writer of one PRD. Make it with :meth:`open`; :meth:`close` drains it."""

    def __init__(
        self,
        bus: Bus,
        project_id: str,
        prd: str,
        path: Path,
        *,
        seq: int = 0,
        queue_size: int = DEFAULT_QUEUE_SIZE,
        publish: Publisher | None = None,
    ) -> None:
        if queue_size < 1:
            raise ValueError(f"queue_size must be at least 1, got {queue_size}")
        self.bus = bus
        self.project_id = project_id
        self.prd = prd
        self.path = path
        #: The seq of the last event handed out.
        self.seq = seq
        self._publish: Publisher = publish or self._js_publish
        self._queue: asyncio.Queue[Envelope | None] = asyncio.Queue(queue_size)
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None
        #: The seq of the last event written and published.
        self.written = seq

    @classmethod
    async def open(
        cls,
        bus: Bus,
        project_id: str,
        prd: str,
        path: Path,
        *,
        record_seq: int = 0,
        queue_size: int = DEFAULT_QUEUE_SIZE,
        publish: Publisher | None = None,
    ) -> EventLog:
        """The writer, numbering on from the file's last line (or the record's seq, if later).

        The last line is published again: if the previous writer died between the file and the
        bus, the stream gets it now (and drops it as a duplicate otherwise).
        """
        path.parent.mkdir(parents=True, exist_ok=True)
        file_seq, last = await asyncio.to_thread(last_seq, path)
        log_ = cls(
            bus, project_id, prd, path, seq=max(file_seq, record_seq), queue_size=queue_size, publish=publish
        )
        if last is not None:
            env = Envelope(
                id=str(last["id"]),
                source=str(last["source"]),
                type=str(last["type"]),
                data=last.get("data"),
                time=last.get("time"),
                extensions={k: str(last[k]) for k in ("projectid",) if k in last},
            )
            subject = subjects.prd_event(project_id, prd, env.type)
            with contextlib.suppress(Exception):  # best effort: the next events go out regardless
                if not await log_._stored(subject, env.id):
                    await log_._publish(subject, env, env.id)
        log_.start()
        return log_

    async def _stored(self, subject: str, event_id: str) -> bool:
        """Whether the stream's last message on ``subject`` is event ``event_id`` (a re-publish
        would be dropped by the stream but still reach live subscribers twice)."""
        import nats.js.errors

        try:
            msg = await self.bus.js.get_last_msg(subjects.STREAM_PRD, subject)
        except nats.js.errors.NotFoundError:
            return False
        return msg.data is not None and json.loads(msg.data).get("id") == event_id

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"prd-eventlog-{self.prd}")

    async def emit(self, cls: type[E], **fields: Any) -> E:
        """Number a ``cls`` event (``project_id``, ``prd`` and ``seq`` filled in) and queue it.

        Waits while the queue is full (backpressure). Raises the writer's failure, if it failed.
        """
        if self._failure is not None:
            raise RuntimeError(f"event writer of {self.prd} failed: {self._failure}") from self._failure
        async with self._lock:
            event = cls(project_id=self.project_id, prd=self.prd, seq=self.seq + 1, **fields)
            env = Envelope.new(
                event,
                source=self.bus.source,
                id=msg_id(self.project_id, self.prd, event.seq),
                project_id=self.project_id,
            )
            await self._queue.put(env)
            self.seq = event.seq
        return event

    async def flush(self) -> None:
        """Wait until every event emitted so far is in the file and on the bus."""
        await self._queue.join()

    async def close(self) -> None:
        """Write what is queued, then stop the writer."""
        if self._task is None:
            return
        if not self._task.done():
            await self._queue.put(None)
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._task = None

    def abort(self) -> None:
        """Stop the writer at once (what is queued is lost: the process is going away)."""
        if self._task is not None:
            self._task.cancel()
            self._task = None

    @property
    def pending(self) -> int:
        """Events queued and not written yet."""
        return self._queue.qsize()

    async def _run(self) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            while True:
                env = await self._queue.get()
                try:
                    if env is None:
                        return
                    await self._write(fd, env)
                finally:
                    self._queue.task_done()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("event writer of %s/%s failed", self.project_id, self.prd)
            self._failure = exc
            self._drain()
        finally:
            os.close(fd)

    def _drain(self) -> None:
        """After a failure: release whoever waits on the queue (their emit raises next time)."""
        while not self._queue.empty():
            self._queue.get_nowait()
            self._queue.task_done()

    async def _write(self, fd: int, env: Envelope) -> None:
        payload, _ = encode(env)
        os.write(fd, payload + b"\n")  # one write of one line: O_APPEND keeps lines whole
        await self._publish(subjects.prd_event(self.project_id, self.prd, env.type), env, env.id)
        self.written = int(env.data["seq"])

    async def _js_publish(self, subject: str, env: Envelope, message_id: str) -> None:
        # the envelope's id is the message id (``msg_id``): Bus.js_publish sends it as Nats-Msg-Id
        assert env.id == message_id
        await self.bus.js_publish(subject, env, deadline=60.0)
