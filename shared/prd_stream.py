"""Where a PRD's events after a given ``seq`` start in the ``JIDO_PRD`` stream.

A reader resuming a PRD's events (``jidocode prd run|show|tui``, the gateway's SSE route with
``Last-Event-ID``) knows the PRD's own ``seq``; the stream numbers every PRD of every project.
Reading the PRD's subjects from the stream's start and skipping costs the whole PRD each time
(10 000 events: 1.7 s, ``bench/prd_follow.py``). The PRD's one ordered writer publishes its
events in ``seq`` order (decision 0290), so the stream position of ``seq`` can be found by a
binary search of direct gets (``next_by_subj`` on the PRD's filter): about 20 lookups for a
million messages.

The search aims :data:`RESUME_MARGIN` events early, and the reader still skips every event at
or below the seq it has: a republished event out of place can cost a few events read twice,
never one lost.
"""

from __future__ import annotations

from typing import Final

import nats.js.errors
from nats.js.client import JetStreamContext

from . import subjects
from .envelope import decode
from .errors import JidoError

__all__ = ["RESUME_MARGIN", "start_sequence"]

#: Events before the resume point the search aims at (read and skipped by the reader).
RESUME_MARGIN: Final = 64


def _seq_of(data: bytes, headers: dict[str, str] | None) -> int:
    """The PRD ``seq`` of a stored event; 0 when it has none (not a loop event)."""
    try:
        value = decode(data, headers).data.get("seq", 0)
    except (JidoError, AttributeError):
        return 0
    return value if isinstance(value, int) else 0


async def start_sequence(
    js: JetStreamContext, project_id: str, prd: str, after_seq: int, *, margin: int = RESUME_MARGIN
) -> int:
    """The stream sequence to start reading ``prd``'s subjects at so that every event with a
    ``seq`` above ``after_seq`` comes (1: from the start; past the last: only new ones).

    Raises ``nats.js.errors.NotFoundError`` when there is no ``JIDO_PRD`` stream.
    """
    target = after_seq - margin
    if target <= 0:
        return 1
    state = (await js.stream_info(subjects.STREAM_PRD)).state
    lo, hi = max(state.first_seq, 1), state.last_seq
    flt = subjects.prd_event_filter(project_id, prd)
    # invariant: the PRD's events before ``lo`` have seq <= target; the first one after
    # target (if any) is at or before ``hi + 1``
    while lo <= hi:
        mid = (lo + hi) // 2
        try:
            msg = await js.get_msg(subjects.STREAM_PRD, seq=mid, subject=flt, next=True)
        except nats.js.errors.NotFoundError:  # none of the PRD's events at or after mid
            hi = mid - 1
            continue
        if _seq_of(msg.data or b"", msg.headers) > target:
            hi = mid - 1  # nothing of the PRD lies between mid and the message found
        else:
            lo = max(msg.seq or mid, mid) + 1
    return lo
