"""Listing a KV bucket's keys from its stream index: complete, even while it is being written."""

from __future__ import annotations

import asyncio

import pytest

from jidocode.shared.bus import Bus
from jidocode.shared.kv_keys import kv_keys, kv_values


async def test_keys_sorted_filtered_and_empty(bus: Bus) -> None:
    kv = await bus.kv("test_kv_keys_basic", history=1)
    assert await kv_keys(kv) == []  # no NoKeysError for an empty bucket
    for key in ("p2.b", "p1.a", "p1.c", "loaded.p1.x"):
        await kv.put(key, b"1")
    assert await kv_keys(kv) == ["loaded.p1.x", "p1.a", "p1.c", "p2.b"]
    assert await kv_keys(kv, "p1.") == ["p1.a", "p1.c"]
    assert await kv_keys(kv, "loaded.") == ["loaded.p1.x"]
    assert await kv_keys(kv, "p3.") == []
    # a deleted key keeps its marker: listed, and reading it says it is gone (callers skip it)
    await kv.delete("p2.b")
    assert "p2.b" in await kv_keys(kv)
    # a purged subject is gone altogether
    await bus.js.purge_stream("KV_test_kv_keys_basic", subject="$KV.test_kv_keys_basic.p1.c")
    assert await kv_keys(kv, "p1.") == ["p1.a"]


async def test_a_prefix_is_whole_tokens(bus: Bus) -> None:
    kv = await bus.kv("test_kv_keys_prefix", history=1)
    with pytest.raises(ValueError, match="a key prefix ends with"):
        await kv_keys(kv, "p1")


async def test_every_key_is_listed_while_others_are_written(bus: Bus) -> None:
    """What ``KeyValue.keys()`` can get wrong under load (a replay cut short): every stored key,
    on every read, while a writer keeps adding keys beside them."""
    kv = await bus.kv("test_kv_keys_busy", history=1)
    stored = [f"stored.k{i:03d}" for i in range(200)]
    await asyncio.gather(*(kv.put(key, b"v") for key in stored))

    done = asyncio.Event()  # (a cancel can be swallowed inside nats-py's publish: asked to stop)
    written = 0

    async def writer() -> None:
        nonlocal written
        while not done.is_set():
            await kv.put(f"busy.k{written % 500}", b"v")
            written += 1

    task = asyncio.create_task(writer())
    try:
        for _ in range(50):
            assert await kv_keys(kv, "stored.") == stored
            assert set(stored) <= set(await kv_keys(kv))
    finally:
        done.set()
        await asyncio.wait_for(task, 10)
    assert written > 0  # the reads did run beside writes


async def test_one_token_and_values(bus: Bus) -> None:
    kv = await bus.kv("test_kv_keys_values", history=1)
    await kv.put("p1.c1", b"one")
    await kv.put("p1.c2", b"two")
    await kv.put("p1.c1.sub.k", b"child")  # deeper: not one token after the prefix
    await kv.put("p1.gone", b"x")
    await kv.delete("p1.gone")
    assert await kv_keys(kv, "p1.", one_token=True) == ["p1.c1", "p1.c2", "p1.gone"]
    assert await kv_values(kv, "p1.", one_token=True) == {"p1.c1": b"one", "p1.c2": b"two"}
    assert await kv_values(kv, "p1.c1.sub.") == {"p1.c1.sub.k": b"child"}
