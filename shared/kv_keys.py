"""The keys of a JetStream KV bucket, read from its stream's subject counts.

nats-py's ``KeyValue.keys()`` (and any watch whose first ``None`` is taken as
"that was everything") can end its replay early: the watcher decides it has
seen every entry from a consumer-info snapshot taken while deliveries are
still in flight, so on a busy machine it returns some keys or none at all
(``NoKeysError``; nats.py issue 842). A project registry that briefly looked
empty made ``jidocode conversations list`` start a stopped project again.

The stream's own subject counts (``STREAM.INFO`` with a subject filter) have no
such race: one request, answered from the stream's index. A key whose last
message is a delete marker is still listed; callers read each key and skip
what is gone, as they did with ``keys()``. The server answers with at most
100,000 subjects per request; the buckets read here hold far fewer keys.
"""

from __future__ import annotations

import asyncio

import nats.js.errors
from nats.js.kv import KeyValue

__all__ = ["kv_keys", "kv_values"]


async def kv_keys(kv: KeyValue, prefix: str = "", *, one_token: bool = False) -> list[str]:
    """Every key of ``kv`` that starts with ``prefix`` (empty, or ending in ``.``), sorted;
    ``one_token``: only those with a single token after it (the ``<prefix>*`` of a watch).

    An empty list when there is none (no ``NoKeysError``)."""
    if prefix and not prefix.endswith("."):
        raise ValueError(f"a key prefix ends with '.' (a whole token): {prefix!r}")
    # nats-py keeps the bucket's name, stream and context private
    base = f"$KV.{kv._name}."
    wildcard = "*" if one_token else ">"
    try:
        info = await kv._js.stream_info(kv._stream, subjects_filter=f"{base}{prefix}{wildcard}")
    except nats.js.errors.NotFoundError:
        return []
    return sorted(subject[len(base) :] for subject in info.state.subjects or {})


async def kv_values(kv: KeyValue, prefix: str = "", *, one_token: bool = False) -> dict[str, bytes]:
    """The current value of each key :func:`kv_keys` lists (deleted and empty ones left out)."""
    keys = await kv_keys(kv, prefix, one_token=one_token)
    gate = asyncio.Semaphore(32)

    async def read(key: str) -> bytes | None:
        async with gate:
            try:
                entry = await kv.get(key)
            except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError):
                return None
            return entry.value or None

    values = await asyncio.gather(*(read(key) for key in keys))
    return {key: value for key, value in zip(keys, values, strict=True) if value is not None}
