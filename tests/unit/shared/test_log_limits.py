"""The repeat limiter: a flood of one kind of line is a few lines and a summary."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jidocode.shared.log_limits import RepeatLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _record(
    msg: str, *args: object, name: str = "jidocode.bus", level: int = logging.WARNING
) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, args or None, None)


def test_a_flood_is_a_burst_then_a_summary_per_window() -> None:
    clock = Clock()
    limiter = RepeatLimiter(burst=3, window_s=30, clock=clock)
    out = []
    for i in range(1000):  # one outage: the same warning, numbers changing
        clock.now = i * 0.05
        record = _record("nats error (conversation): outbound buffer limit exceeded (%d bytes)", i)
        if limiter.filter(record):
            out.append(record.getMessage())
    # 50 s of flood: 3 lines in the first window, then the next window's first line says how many were dropped
    assert len(out) == 6
    assert "more like it" not in out[0]
    assert out[3].endswith("(and 597 more like it, not shown)")


def test_kinds_do_not_hold_each_other_back() -> None:
    limiter = RepeatLimiter(burst=1, window_s=30, clock=Clock())
    assert limiter.filter(_record("disconnected"))
    assert not limiter.filter(_record("disconnected"))
    assert limiter.filter(_record("reconnected"))
    assert limiter.filter(_record("disconnected", level=logging.ERROR))
    assert limiter.filter(_record("disconnected", name="jidocode.other"))


def test_memory_is_bounded() -> None:
    limiter = RepeatLimiter(burst=1, window_s=30, max_kinds=10, clock=Clock())
    for i in range(1000):
        limiter.filter(_record(f"line {chr(65 + i % 26)}{chr(65 + i // 26 % 26)}"))
    assert len(limiter._kinds) <= 10


def test_bad_limits_are_refused() -> None:
    with pytest.raises(ValueError):
        RepeatLimiter(burst=0)
    with pytest.raises(ValueError):
        RepeatLimiter(window_s=0)


@given(st.lists(st.tuples(st.sampled_from("abc"), st.floats(0, 5)), max_size=300))
@settings(max_examples=200, deadline=None)
def test_never_more_than_burst_per_window_and_every_drop_is_counted(steps: list[tuple[str, float]]) -> None:
    clock = Clock()
    limiter = RepeatLimiter(burst=2, window_s=10, clock=clock)
    passed: dict[str, list[float]] = {}
    reported = dropped = 0
    for kind, dt in steps:
        clock.now += dt
        go, before = limiter.admit(("n", 30, kind))
        if go:
            passed.setdefault(kind, []).append(clock.now)
            reported += before
        else:
            dropped += 1
    pending = sum(k.dropped for k in limiter._kinds.values())
    assert reported + pending == dropped  # nothing dropped goes uncounted
    # windows restart at the first record after they end: any span shorter than a window
    # straddles at most two of them, so holds at most two bursts
    for times in passed.values():
        for i in range(len(times) - 4):
            assert times[i + 4] - times[i] >= 10, times
