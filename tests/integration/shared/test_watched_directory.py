"""The project registry kept in memory by a KV watch: no request per lookup, current after changes."""

from __future__ import annotations

import asyncio

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.events.engine import ProjectInfo
from jidocode.shared.registry import WatchedDirectory


def _record(pid: str, root: str) -> bytes:
    return ProjectInfo(project_id=pid, root_path=root, started_at="now").model_dump_json().encode()


async def _until(directory: WatchedDirectory, pid: str, root: str | None) -> None:
    """Wait (bounded) until the watch has applied the change that makes ``pid`` map to ``root``."""

    async def _wait() -> None:
        while True:
            cached = directory._records.get(pid)
            if (cached.root_path if cached else None) == root:
                return
            directory.changed.clear()
            await directory.changed.wait()

    await asyncio.wait_for(_wait(), 10)


async def test_lookups_follow_the_bucket(bus: Bus) -> None:
    kv = await bus.kv(subjects.BUCKET_PROJECTS, history=1)
    await kv.put("p1", _record("p1", "/srv/one"))
    directory = await WatchedDirectory.open(bus)
    try:
        assert (await directory.get("p1")).root_path == "/srv/one"  # present before the watch started

        await kv.put("p2", _record("p2", "/srv/two"))
        await _until(directory, "p2", "/srv/two")
        assert (await directory.get("p2")).root_path == "/srv/two"

        await kv.put("p1", _record("p1", "/srv/moved"))
        await _until(directory, "p1", "/srv/moved")
        assert (await directory.get("p1")).root_path == "/srv/moved"

        await kv.delete("p2")
        await _until(directory, "p2", None)
        assert await directory.lookup("p2") is None
        assert await directory.lookup("root.abc") is None  # root index keys are not projects
    finally:
        await directory.close()


async def test_a_record_not_yet_watched_is_read_from_the_bucket(bus: Bus) -> None:
    kv = await bus.kv(subjects.BUCKET_PROJECTS, history=1)
    directory = await WatchedDirectory.open(bus)
    try:
        directory._records.clear()  # as if the watch had not delivered it yet
        await kv.put("p3", _record("p3", "/srv/three"))
        assert (await directory.get("p3")).root_path == "/srv/three"
    finally:
        await directory.close()
    # closed: the watch is gone, lookups read the bucket
    assert (await directory.get("p3")).root_path == "/srv/three"
