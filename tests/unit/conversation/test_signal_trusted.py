"""``Signal.trusted`` builds exactly what validation builds (it only skips the checks)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from jidocode.services.conversation.core import Signal

text = st.text(max_size=20)


@given(
    id=text,
    type=text,
    source=text,
    correlation_id=text,
    causation_id=st.none() | text,
    time=st.none() | text,
    data=st.dictionaries(text, st.integers() | text, max_size=3),
)
def test_trusted_equals_validated(**fields: object) -> None:
    trusted = Signal.trusted(**fields)  # type: ignore[arg-type]
    validated = Signal(**fields)  # type: ignore[arg-type]
    assert trusted == validated
    assert trusted.model_dump() == validated.model_dump()
    assert trusted.model_fields_set == validated.model_fields_set
    assert trusted.model_copy(update={"id": "other"}).id == "other"
