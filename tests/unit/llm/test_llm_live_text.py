"""The streamed text handed to the conversation in batches (``llm/live.py``): the first piece at
once, the rest gathered, a timer sending what waits, all of it in order whatever the timing."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jidocode.services.conversation.llm.adapter import LitellmPort
from jidocode.services.conversation.llm.live import LiveText


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Sent:
    """What reached ``send``, with an event per batch."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.arrived = asyncio.Condition()

    async def send(self, text: str) -> None:
        async with self.arrived:
            self.texts.append(text)
            self.arrived.notify_all()

    async def wait_for(self, count: int) -> None:
        async with self.arrived:
            await asyncio.wait_for(self.arrived.wait_for(lambda: len(self.texts) >= count), 10)


async def test_the_first_piece_goes_at_once_and_a_fast_stream_is_gathered() -> None:
    clock, sent = Clock(), Sent()
    live = LiveText(sent.send, clock=clock, interval_s=60.0)  # no timer fires within the test
    await live.add("He")
    assert sent.texts == ["He"]
    for piece in "llo, w":
        clock.now += 0.001
        await live.add(piece)
    assert sent.texts == ["He"]  # gathered
    await live.close()
    assert sent.texts == ["He", "llo, w"]  # the rest at the end


async def test_text_left_waiting_is_sent_by_the_timer_without_another_piece() -> None:
    sent = Sent()
    live = LiveText(sent.send, clock=asyncio.get_running_loop().time, interval_s=0.01)
    await live.add("first")
    await live.add(" then")  # within the interval: it waits, and no piece comes after it
    await sent.wait_for(2)
    assert sent.texts == ["first", " then"]
    await live.close()
    assert sent.texts == ["first", " then"]


async def test_a_failed_send_of_the_timer_is_raised_by_the_stream() -> None:
    calls = 0

    async def send(text: str) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise ConnectionError("the bus is gone")

    live = LiveText(send, clock=asyncio.get_running_loop().time, interval_s=0.001)
    await live.add("a")
    await live.add("b")
    with pytest.raises(ConnectionError, match="the bus is gone"):
        await live.close()


@settings(deadline=None, max_examples=50)
@given(
    pieces=st.lists(
        st.tuples(st.sampled_from([0.0, 0.0, 0.001, 0.01]), st.text(min_size=0, max_size=20)), max_size=60
    ),
    yields=st.integers(min_value=0, max_value=3),
)
def test_every_piece_arrives_once_in_order(pieces: list[tuple[float, str]], yields: int) -> None:
    async def stream() -> list[str]:
        clock, sent = Clock(), Sent()
        live = LiveText(sent.send, clock=clock, interval_s=0.005, max_chars=16)
        for gap, text in pieces:
            clock.now += gap
            await live.add(text)
            for _ in range(yields):  # let a due timer run in between
                await asyncio.sleep(0)
        await live.close()
        return sent.texts

    texts = asyncio.run(stream())
    assert "".join(texts) == "".join(text for _, text in pieces)
    assert all(0 < len(t) <= 16 for t in texts)


def test_a_bad_live_interval_is_named() -> None:
    with pytest.raises(ValueError, match="live_interval_s"):
        LitellmPort(live_interval_s=0)
