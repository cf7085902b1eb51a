"""How long the three conversation streams keep what they hold (decision 0033).

=================  =========================================  ====================================
stream             what it is for                             default limits
=================  =========================================  ====================================
``JIDO_CONV_IN``   input, captured before it is processed     1 day, 1 GiB (oldest dropped first)
``JIDO_JOURNAL``   the record every conversation is rebuilt   none: kept until the conversation is
                   from                                        deleted; a size cap refuses new
                                                               entries (never drops recorded ones)
``JIDO_EVENTS``    output copies for ``watch --since`` and    7 days, 8 GiB (oldest dropped first)
                   late subscribers
=================  =========================================  ====================================

Input may go once processed: what a conversation took in is in its journal,
and an input still unprocessed after a day belongs to a system that was down
that long. The journal is never trimmed behind a conversation's back (a
conversation whose oldest entries vanished could not be rebuilt); with
``JIDO_JOURNAL_MAX_BYTES`` set, a full journal refuses appends (the turn fails
with an error event) instead. A conversation's entries leave the journal when it is
deleted, or pruned once it has ended and aged past ``conversations.retention_days``
(:mod:`.prune`, decision 0325). Every limit is an environment variable of the
conversation service (``-1``: no limit); each replica applies them when it
starts (``ensure_streams`` updates an existing stream).

The byte limits above are the defaults of a server ``jidocode up`` does not
run. On its embedded store, ``up`` sizes ``JIDO_INPUT_MAX_BYTES`` and
``JIDO_EVENTS_MAX_BYTES`` from the free space of the store's disk when the store
is made (5 % and 25 %, at most the sizes above) and keeps those sizes for the
store's life (:mod:`jidocode.shared.store_space`, decision 0323): nats-server
refuses reservations over 75 % of its disk's free space (error 10047), so fixed
sizes left ``up`` never ready on a small disk. A variable the user sets wins.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = ["ENV", "StreamLimits"]

GIB: Final = 1024**3

#: Field → environment variable.
ENV: Final = {
    "input_max_age_s": "JIDO_INPUT_MAX_AGE_S",
    "input_max_bytes": "JIDO_INPUT_MAX_BYTES",
    "journal_max_bytes": "JIDO_JOURNAL_MAX_BYTES",
    "events_max_age_s": "JIDO_EVENTS_MAX_AGE_S",
    "events_max_bytes": "JIDO_EVENTS_MAX_BYTES",
}


class StreamLimits(BaseModel):
    """Retention of the conversation streams; ``-1`` (or ``0`` for an age) means no limit."""

    model_config = ConfigDict(frozen=True)

    input_max_age_s: float = Field(default=24 * 3600.0, ge=0.0)
    input_max_bytes: int = Field(default=1 * GIB, ge=-1)
    journal_max_bytes: int = Field(default=-1, ge=-1)
    events_max_age_s: float = Field(default=7 * 24 * 3600.0, ge=0.0)
    events_max_bytes: int = Field(default=8 * GIB, ge=-1)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> StreamLimits:
        """From the ``JIDO_*`` variables of :data:`ENV`; a bad value is a ``ValueError`` naming it."""
        env = os.environ if env is None else env
        raw: dict[str, Any] = {field: env[var] for field, var in ENV.items() if env.get(var)}
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            problems = "; ".join(f"{ENV[str(e['loc'][0])]}: {e['msg']}" for e in exc.errors())
            raise ValueError(f"bad stream limits: {problems}") from None

    def stream_config(self, stream: str) -> dict[str, Any]:
        """The ``StreamConfig`` keywords of ``stream`` (``input``, ``journal`` or ``events``)."""
        from nats.js.api import DiscardPolicy

        if stream == "input":
            return {
                "max_age": self.input_max_age_s,
                "max_bytes": self.input_max_bytes,
                "discard": DiscardPolicy.OLD,
            }
        if stream == "journal":
            return {"max_bytes": self.journal_max_bytes, "discard": DiscardPolicy.NEW}
        if stream == "events":
            return {
                "max_age": self.events_max_age_s,
                "max_bytes": self.events_max_bytes,
                "discard": DiscardPolicy.OLD,
            }
        raise ValueError(f"unknown stream {stream!r}: input | journal | events")
