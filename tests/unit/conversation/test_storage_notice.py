"""The notice of a step the store had no room for (issue 31, point 2): a failed turn end naming
every user message still waiting for it, retryable, and the error, both carrying the store's words."""

from __future__ import annotations

from jidocode.services.conversation.core.state import initial_state
from jidocode.services.conversation.storage_notice import storage_full_notice
from jidocode.shared.errors import StorageFull


def test_the_notice_ends_the_open_turn_and_the_waiting_messages_as_failed_storage_full() -> None:
    exc = StorageFull(
        "the disk of the JetStream store /data/nats is full (0 MiB free)", details={"store": "/data/nats"}
    )
    state = initial_state("p", "c").model_copy(
        update={"turn_messages": ("m1",), "waiting_messages": ("m2", "m3")}
    )
    ended, error = storage_full_notice(state, exc)
    assert ended.outcome == "failed" and ended.error_type == "storage_full" and ended.retryable
    assert ended.message_ids == ["m1", "m2", "m3"] and all(ended.ends(m) for m in ("m1", "m2", "m3"))
    assert "/data/nats" in ended.message
    assert error.error_type == "storage_full" and error.details == {"store": "/data/nats"}


def test_before_the_state_is_rebuilt_the_notice_names_no_message() -> None:
    ended, _ = storage_full_notice(None, StorageFull("full"))
    assert ended.message_ids == [] and not ended.ends("m1")
