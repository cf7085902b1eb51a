"""Whether the replica holding a call's claim is still there: asked of the replica itself.

Every claim names its replica by the ``nats.micro`` id of that replica's service
(:attr:`Replicas.me`, unique per process: a runner restarted under the same
``JIDO_INSTANCE`` gets a new one). A request sent again for a claim held elsewhere
asks that replica's own discovery subject, ``$SRV.PING.jidocode-tool-runner.<id>``:
"no responders" from the server means nobody holds that subscription, so the replica
is gone and its claim is settled now (run once if its call never started,
``outcome_unknown`` if it had) instead of after the claim's whole lifetime. A replica
that answers, or is too slow to answer, is alive: its call is waited for as before.

"No responders" is asked twice, :data:`CONFIRM_AFTER_S` apart, before a replica is
called gone: a replica reconnecting after a NATS restart has its subscriptions back
within that pause (and a replica wrongly called gone costs no double run: its call,
had it not begun, can no longer begin — decision 0308 — and one that had begun is
only reported ``outcome_unknown``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

import nats.errors
from nats.aio.client import Client

from jidocode.shared import subjects

__all__ = ["CONFIRM_AFTER_S", "PING_TIMEOUT_S", "Replicas"]

log = logging.getLogger("jidocode.tool_runner")

#: How long a replica may take to answer its ping before it is taken for alive (and slow).
PING_TIMEOUT_S: Final = 5.0
#: The pause between the two "no responders" that call a replica gone.
CONFIRM_AFTER_S: Final = 1.0


class Replicas:
    """The liveness of the tool-runner replicas, seen from replica ``me`` (its micro service id)."""

    def __init__(self, nc: Client, me: str, *, confirm_after: float = CONFIRM_AFTER_S) -> None:
        self.nc = nc
        self.me = me
        self.confirm_after = confirm_after

    async def alive(self, replica: str) -> bool:
        """Whether ``replica`` still serves (this one does; unsure counts as alive)."""
        if replica == self.me:
            return True
        try:
            subject = (
                f"{subjects.srv('PING', 'tool_runner')}.{subjects.validate_token(replica, 'replica id')}"
            )
        except ValueError:
            return True  # not an id a replica would write: nothing to ask, so nothing proven
        if await self._answers(subject):
            return True
        await asyncio.sleep(self.confirm_after)  # the pause of a confirmation, not a synchronization
        if await self._answers(subject):
            return True
        log.info("tool-runner replica %s is gone: nobody serves %s", replica, subject)
        return False

    async def _answers(self, subject: str) -> bool:
        """``False`` only for the server's "no responders"; an answer, a timeout or an error: ``True``."""
        try:
            await self.nc.request(subject, b"", timeout=PING_TIMEOUT_S)
        except nats.errors.NoRespondersError:
            return False
        except (nats.errors.Error, OSError, TimeoutError):
            return True  # slow, or we cannot tell (NATS down): not proof of death
        return True
