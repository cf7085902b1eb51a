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

``events.jsonl`` lies in the project, where a model or a repository may have put anything: it is
opened through :class:`jidocode.shared.nofollow.AppendFile` (docs/decisions/0301). No link is
followed on the way or at the file, a FIFO or a file with a second name (a hard link) is refused,
and an existing file whose first line is not an event of this PRD is refused rather than appended
to or cut: the torn-line repair only ever cuts the loop's own log. A file swapped in between two
writes stops the writer (:class:`~jidocode.shared.nofollow.UnsafePath`, reason ``replaced``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Final, TypeVar

from nats.js.api import DiscardPolicy

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.envelope import Envelope, encode
from jidocode.shared.errors import NotFound
from jidocode.shared.events.prd import PrdEvent
from jidocode.shared.nofollow import AppendFile, open_dir

from .files import locate

__all__ = [
    "DEFAULT_QUEUE_SIZE",
    "STREAM_MAX_AGE_S",
    "STREAM_MAX_BYTES",
    "EventLog",
    "Publisher",
    "ensure_stream",
    "is_event_log",
    "last_seq",
    "msg_id",
    "stream_max_bytes",
]

log = logging.getLogger("jidocode.prd.eventlog")

E = TypeVar("E", bound=PrdEvent)

#: Events between the loop and the writer before ``emit`` waits.
DEFAULT_QUEUE_SIZE: Final = 256
#: The stream keeps a week of loop events (``events.jsonl`` keeps them all).
STREAM_MAX_AGE_S: Final = 7 * 24 * 3600.0
#: Its size without ``JIDO_PRD_MAX_BYTES`` (``jidocode up`` sets that from its store's free space:
#: :mod:`jidocode.shared.store_space`; ``-1``: no limit).
STREAM_MAX_BYTES: Final = 1 << 30
#: Bytes read from the end of ``events.jsonl`` to find its last line (one event is far smaller).
_TAIL_BYTES: Final = 1 << 20

#: How every line of ``events.jsonl`` starts (a CloudEvent in structured mode, ``Envelope.to_dict``).
_LINE_START: Final = b'{"specversion":'

#: ``(subject, envelope, message id)``: how the writer puts an event on the bus.
Publisher = Callable[[str, Envelope, str], Awaitable[None]]


async def ensure_stream(bus: Bus) -> None:
    """``JIDO_PRD`` over ``jido.prd.>``: a week, at most :func:`stream_max_bytes`, oldest
    discarded first."""
    await bus.ensure_stream(
        subjects.STREAM_PRD,
        [subjects.prd_event_filter()],
        max_age=STREAM_MAX_AGE_S,
        max_bytes=stream_max_bytes(),
        discard=DiscardPolicy.OLD,
    )


def stream_max_bytes(env: Mapping[str, str] | None = None) -> int:
    """``JIDO_PRD_MAX_BYTES`` (an integer, ``-1`` or more), else :data:`STREAM_MAX_BYTES`; a bad
    value is a ``ValueError`` naming the variable."""
    raw = (os.environ if env is None else env).get("JIDO_PRD_MAX_BYTES")
    if not raw:
        return STREAM_MAX_BYTES
    try:
        value = int(raw)
    except ValueError:
        value = -2
    if value < -1:
        raise ValueError(f"JIDO_PRD_MAX_BYTES: expected a number of bytes (-1: no limit), got {raw!r}")
    return value


def msg_id(project_id: str, prd: str, seq: int) -> str:
    """The stream's de-duplication id of one event: ``<p>.<prd>.<seq>``."""
    return f"{project_id}.{prd}.{seq}"


def is_event_log(head: bytes, prd: str | None = None) -> bool:
    """Whether ``head`` (a file's first bytes) starts as the event log of ``prd`` (of any PRD when
    ``None``): a first line that is a loop event of that PRD, or, when the first line is torn (the
    process died writing it), the start of one."""
    first, newline, _ = head.partition(b"\n")
    if not newline:
        return first.startswith(_LINE_START) or _LINE_START.startswith(first)
    try:
        doc = json.loads(first)
    except ValueError:
        return False
    if not isinstance(doc, dict) or not str(doc.get("type", "")).startswith("prd."):
        return False
    data = doc.get("data")
    return isinstance(data, dict) and isinstance(data.get("prd"), str) and (prd is None or data["prd"] == prd)


def _open_log(path: Path, prd: str | None, *, create: bool) -> AppendFile:
    """``path`` opened for appending without following a link, refused unless it is ``prd``'s log
    (or new, or empty); ``create`` also makes the directories on the way."""
    root, dirs, name = locate(path)
    with open_dir(root, dirs, create=create) as dfd:
        return AppendFile.open(
            dfd, name, shown=path, create=create, recognise=lambda head: is_event_log(head, prd)
        )


def _last_line(file: AppendFile) -> tuple[int, dict[str, Any] | None]:
    """The ``seq`` of the last complete line of ``file`` and that line, after cutting a torn last
    line (no newline: the process died while writing it) so the next append starts a line of its
    own. Only the loop's own log gets here (:func:`_open_log`)."""
    size = file.size
    start = max(0, size - _TAIL_BYTES)
    tail = file.read_at(start, size - start)
    if tail and not tail.endswith(b"\n"):
        cut = tail.rfind(b"\n")
        keep = start + cut + 1 if cut >= 0 else start
        log.warning("%s: cutting a torn last line (%d bytes)", file.shown, size - keep)
        file.cut(keep)
        tail = tail[: cut + 1] if cut >= 0 else b""
    for line in reversed(tail.splitlines()):
        try:
            doc = json.loads(line)
            seq = int(doc["data"]["seq"])
        except (ValueError, KeyError, TypeError):
            continue
        return seq, doc
    return 0, None


def last_seq(path: Path, prd: str | None = None) -> tuple[int, dict[str, Any] | None]:
    """The ``seq`` of the last complete line of ``path`` and that line (0 and ``None`` when none).

    A torn last line is cut off the file. ``path`` is reached without following a link; a file
    that is not the event log of ``prd`` (of any PRD when ``None``) is refused (``UnsafePath``).
    """
    try:
        file = _open_log(path, prd, create=False)
    except NotFound:
        return 0, None
    with file:
        return _last_line(file)


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
        #: The open log file (:meth:`open` opens it; else the writer does when it starts).
        self._file: AppendFile | None = None

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
        file = await asyncio.to_thread(_open_log, path, prd, create=True)
        try:
            file_seq, last = await asyncio.to_thread(_last_line, file)
        except BaseException:
            file.close()
            raise
        log_ = cls(
            bus, project_id, prd, path, seq=max(file_seq, record_seq), queue_size=queue_size, publish=publish
        )
        log_._file = file
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
            if self._file is not None:  # opened, never started
                self._file.close()
                self._file = None
            return
        if not self._task.done():
            await self._queue.put(None)
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._task = None

    @property
    def pending(self) -> int:
        """Events queued and not written yet."""
        return self._queue.qsize()

    async def _run(self) -> None:
        file, self._file = self._file, None
        try:
            if file is None:
                file = await asyncio.to_thread(_open_log, self.path, self.prd, create=True)
            while True:
                env = await self._queue.get()
                try:
                    if env is None:
                        return
                    await self._write(file, env)
                finally:
                    self._queue.task_done()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("event writer of %s/%s failed", self.project_id, self.prd)
            self._failure = exc
            self._drain()
        finally:
            if file is not None:
                file.close()

    def _drain(self) -> None:
        """After a failure: release whoever waits on the queue (their emit raises next time)."""
        while not self._queue.empty():
            self._queue.get_nowait()
            self._queue.task_done()

    async def _write(self, file: AppendFile, env: Envelope) -> None:
        payload, _ = encode(env)
        file.write(payload + b"\n")  # one write of one line: O_APPEND keeps lines whole
        await self._publish(subjects.prd_event(self.project_id, self.prd, env.type), env, env.id)
        self.written = int(env.data["seq"])

    async def _js_publish(self, subject: str, env: Envelope, message_id: str) -> None:
        # the envelope's id is the message id (``msg_id``): Bus.js_publish sends it as Nats-Msg-Id
        assert env.id == message_id
        await self.bus.js_publish(subject, env, deadline=60.0)
