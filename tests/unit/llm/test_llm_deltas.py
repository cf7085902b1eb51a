"""Coalescing streamed text into llm.delta signals: nothing lost, bounded count and size."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jidocode.services.conversation.llm.adapter import LitellmPort
from jidocode.services.conversation.llm.deltas import MAX_DELTA_CHARS, DeltaCoalescer, max_deltas

# A stream: (seconds since the previous piece, piece text).
_pieces = st.lists(
    st.tuples(st.floats(min_value=0.0, max_value=0.5), st.text(min_size=0, max_size=40)), max_size=200
)


@given(
    pieces=_pieces,
    interval_s=st.floats(min_value=0.01, max_value=1.0),
    max_chars=st.integers(min_value=1, max_value=64),
)
def test_deltas_concatenate_to_the_stream_within_the_bound(
    pieces: list[tuple[float, str]], interval_s: float, max_chars: int
) -> None:
    coalescer = DeltaCoalescer(interval_s=interval_s, max_chars=max_chars)
    now, first, out = 100.0, None, []
    for gap, text in pieces:
        now += gap
        emitted = coalescer.add(text, now)
        if text and first is None:
            first = now
            assert emitted, "the first piece goes out at once"
        out += emitted
    rest = coalescer.flush()
    out += [rest] if rest is not None else []
    streamed = "".join(text for _, text in pieces)
    assert "".join(out) == streamed
    assert all(0 < len(d) <= max_chars for d in out)
    duration = now - first if first is not None else 0.0
    assert len(out) <= max_deltas(len(streamed), duration, interval_s=interval_s, max_chars=max_chars)
    assert coalescer.flush() is None


def test_a_fast_stream_is_gathered_until_the_interval_passes() -> None:
    coalescer = DeltaCoalescer(interval_s=0.25, max_chars=1000)
    assert coalescer.add("He", 0.0) == ["He"]
    assert [coalescer.add(p, 0.01 * i) for i, p in enumerate("llo, w", start=1)] == [[]] * 6
    assert coalescer.add("orld", 0.3) == ["llo, world"]
    assert coalescer.add("!", 0.31) == []
    assert coalescer.flush() == "!"


def test_a_long_piece_is_cut_into_slices_of_max_chars() -> None:
    coalescer = DeltaCoalescer(interval_s=10.0, max_chars=4)
    assert coalescer.add("a", 0.0) == ["a"]
    assert coalescer.add("bcdefghij", 0.1) == ["bcde", "fghi"]
    assert coalescer.flush() == "j"


@pytest.mark.parametrize(
    ("interval_s", "max_chars", "named"),
    [
        (0.0, 10, "delta_interval_s"),
        (-1.0, 10, "delta_interval_s"),
        (float("nan"), 10, "delta_interval_s"),
        (float("inf"), 10, "delta_interval_s"),
        (0.1, 0, "delta_max_chars"),
        (0.1, MAX_DELTA_CHARS + 1, "delta_max_chars"),
        (0.1, True, "delta_max_chars"),
    ],
)
def test_bad_limits_are_refused_naming_the_option(interval_s: float, max_chars: int, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        DeltaCoalescer(interval_s=interval_s, max_chars=max_chars)
    with pytest.raises(ValueError, match=named):
        LitellmPort(delta_interval_s=interval_s, delta_max_chars=max_chars)


def test_the_largest_limit_is_accepted() -> None:
    port = LitellmPort(delta_interval_s=0.001, delta_max_chars=MAX_DELTA_CHARS)
    assert port.delta_max_chars == MAX_DELTA_CHARS
