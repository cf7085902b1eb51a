"""Sending one event to a conversation, again with the same id while nobody answers."""

from __future__ import annotations

import asyncio
import logging

from jidocode.shared.clients import ConversationsClient
from jidocode.shared.errors import RequestTimeout, ServiceUnavailable
from jidocode.shared.events import EventModel

__all__ = ["SEND_ATTEMPT_TIMEOUT", "SEND_RETRY_FOR", "send_again_while_unanswered"]

log = logging.getLogger("jidocode.client")

#: How long an event is sent again, with the same id, while the conversation service does not
#: answer (one that died with the request, or one starting again after a crash).
SEND_RETRY_FOR = 45.0
#: One attempt's wait for ``send_event``'s answer (milliseconds when the service is alive; a slow
#: one answered twice costs nothing, the copy is dropped).
SEND_ATTEMPT_TIMEOUT = 2.5
#: The longest pause between two sends: a service started again is found within it.
RESEND_PAUSE_MAX = 0.5


async def send_again_while_unanswered(
    conversations: ConversationsClient,
    conversation_id: str,
    event: EventModel,
    event_id: str,
    correlation_id: str,
) -> str:
    """Send ``event`` as ``event_id``; the id the service accepted.

    When the service answering died with the request, or is starting again (a timeout, no
    responder), the same event id is sent again for up to :data:`SEND_RETRY_FOR` seconds: safe,
    since the input stream and the reducer drop a copy. Any other error is raised at once.
    """
    deadline = asyncio.get_running_loop().time() + SEND_RETRY_FOR
    pause = 0.2
    while True:
        try:
            accepted = await conversations.send_event(
                conversation_id,
                event.type,
                event.to_data(),
                event_id=event_id,
                correlation_id=correlation_id,
                timeout=SEND_ATTEMPT_TIMEOUT,
            )
            return accepted.id or event_id
        except (RequestTimeout, ServiceUnavailable) as exc:
            if asyncio.get_running_loop().time() + pause > deadline:
                raise
            log.info("sending %s again after: %s", event_id, exc.message)
            await asyncio.sleep(pause)
            pause = min(pause * 2, RESEND_PAUSE_MAX)
