"""Edge normalization: the data envelope, the external contract, limits, correlation ids."""

from __future__ import annotations

import pytest

from jidocode.services.conversation.core import normalize
from jidocode.shared.errors import InvalidInput, MissingDataEnvelope, PayloadTooLarge
from jidocode.shared.events.conversation import EXTERNAL_TYPES


def test_user_message_gets_its_id_as_correlation() -> None:
    s = normalize({"id": "a", "type": "conversation.user.message", "data": {"text": "hi"}}, external=True)
    assert s.correlation_id == "a" and s.causation_id is None and s.data == {"text": "hi"}


def test_given_correlation_is_kept() -> None:
    s = normalize(
        {"id": "a", "type": "conversation.cancel", "data": {}, "correlationid": "k", "causationid": "z"},
        external=True,
    )
    assert (s.correlation_id, s.causation_id) == ("k", "z")


def test_flat_payload_is_missing_data_envelope() -> None:
    with pytest.raises(MissingDataEnvelope) as exc:
        normalize({"id": "a", "type": "conversation.user.message", "text": "hi"}, external=True)
    assert exc.value.details["top_level_fields"] == ["text"]


def test_internal_type_from_outside_is_rejected() -> None:
    with pytest.raises(InvalidInput, match="not accepted from outside"):
        normalize(
            {"id": "a", "type": "conversation.llm.completed", "data": {"request_id": "r"}}, external=True
        )
    assert (
        normalize(
            {"id": "a", "type": "conversation.llm.completed", "data": {"request_id": "r"}}, external=False
        ).type
        == "conversation.llm.completed"
    )


def test_unknown_type_and_bad_data() -> None:
    with pytest.raises(InvalidInput):
        normalize({"id": "a", "type": "nope", "data": {}}, external=False)
    with pytest.raises(InvalidInput, match="text"):
        normalize({"id": "a", "type": "conversation.user.message", "data": {}}, external=True)
    with pytest.raises(InvalidInput, match="decision"):
        normalize(
            {
                "id": "a",
                "type": "conversation.approval.response",
                "data": {"request_id": "r", "decision": "maybe"},
            },
            external=True,
        )
    with pytest.raises(InvalidInput):
        normalize({"type": "conversation.resume", "data": {}}, external=True)


def test_oversize_data_is_rejected() -> None:
    raw = {"id": "a", "type": "conversation.user.message", "data": {"text": "x" * 100}}
    with pytest.raises(PayloadTooLarge):
        normalize(raw, external=True, max_data_bytes=50)
    assert normalize(raw, external=True, max_data_bytes=200).data["text"] == "x" * 100


def test_external_types_are_the_seed_contract_plus_approval() -> None:
    assert {
        "conversation.user.message",
        "conversation.cancel",
        "conversation.resume",
        "conversation.approval.response",
        "conversation.compact",  # compaction on demand (docs/compaction-and-replay.md)
        "conversation.rewind",  # back before a user message (docs/rewind.md)
    } == EXTERNAL_TYPES
