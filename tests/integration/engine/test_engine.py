"""The engine over a real nats-server: lifecycle, registry persistence, bad input."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from jidocode.services.engine.service import serve as serve_engine
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.clients import EngineClient
from jidocode.shared.config import Config
from jidocode.shared.endpoints import endpoint
from jidocode.shared.envelope import Envelope
from jidocode.shared.errors import InvalidInput, NotFound, ServiceUnavailable
from jidocode.shared.events.engine import ListProjects


class EngineProcess:
    """The engine service running in this event loop (restartable)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.stop = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def start(self, bus: Bus) -> None:
        self.stop = asyncio.Event()
        self.task = asyncio.create_task(serve_engine(self.config, self.stop))
        await _wait_ready(bus)

    async def halt(self) -> None:
        self.stop.set()
        assert self.task is not None
        await asyncio.wait_for(self.task, 10)


async def _wait_ready(bus: Bus) -> None:
    async def loop() -> None:
        while True:
            try:
                await EngineClient(bus).list_projects(timeout=0.5)
                return
            except ServiceUnavailable:
                await asyncio.sleep(0.02)  # polling for a process to come up, not synchronising on an event

    await asyncio.wait_for(loop(), 10)


@pytest.fixture
async def engine(config: Config, bus: Bus):
    proc = EngineProcess(config)
    await proc.start(bus)
    yield proc
    if proc.task and not proc.task.done():
        await proc.halt()


async def test_start_list_whereis_stop(engine: EngineProcess, bus: Bus, tmp_path: Path) -> None:
    started: asyncio.Queue[Envelope] = asyncio.Queue()

    async def on_signal(env: Envelope) -> None:
        if env.type.startswith("project."):
            await started.put(env)

    await bus.subscribe(subjects.signal_filter(), on_signal)
    client = EngineClient(bus)
    info = await client.start_project(str(tmp_path))
    assert len(info.project_id) == 26  # a ULID
    assert info.root_path == str(tmp_path.resolve())
    sig = await asyncio.wait_for(started.get(), 5)
    assert sig.type == "project.started" and sig.project_id == info.project_id

    listed = await client.list_projects()
    assert [p.project_id for p in listed.projects] == [info.project_id]
    where = await client.whereis_project(info.project_id)
    assert where.project.root_path == info.root_path

    stopped = await client.stop_project(info.project_id)
    assert stopped.project_id == info.project_id and stopped.status == "stopped" and stopped.stopped_at
    sig = await asyncio.wait_for(started.get(), 5)
    assert sig.type == "project.stopped"
    [listed_stopped] = (await client.list_projects()).projects
    assert (listed_stopped.project_id, listed_stopped.status) == (info.project_id, "stopped")
    again = await client.stop_project(info.project_id)  # stopping twice is no error, and says it again
    assert again.status == "stopped" and again.stopped_at == stopped.stopped_at
    sig = await asyncio.wait_for(started.get(), 5)
    assert sig.type == "project.stopped"  # a replica that missed the first one hears this one
    # started again on the same root: the same id, running, announced again
    restarted = await client.start_project(str(tmp_path))
    assert (restarted.project_id, restarted.status, restarted.stopped_at) == (
        info.project_id,
        "running",
        None,
    )
    sig = await asyncio.wait_for(started.get(), 5)
    assert sig.type == "project.started" and sig.project_id == info.project_id


async def test_same_root_twice_gives_the_same_project(
    engine: EngineProcess, bus: Bus, tmp_path: Path
) -> None:
    link = tmp_path.parent / f"{tmp_path.name}-link"
    link.symlink_to(tmp_path)
    client = EngineClient(bus)
    first = await client.start_project(str(tmp_path))
    again = await client.start_project(str(link))
    assert again.project_id == first.project_id


async def test_registry_survives_an_engine_restart(engine: EngineProcess, bus: Bus, tmp_path: Path) -> None:
    client = EngineClient(bus)
    info = await client.start_project(str(tmp_path))
    await engine.halt()
    with pytest.raises(ServiceUnavailable, match="jidocode up"):
        await client.list_projects(timeout=10)
    await engine.start(bus)
    listed = await client.list_projects()
    assert [p.project_id for p in listed.projects] == [info.project_id]


@pytest.mark.parametrize(
    ("make_path", "error", "fragment"),
    [
        (lambda p: str(p / "missing"), NotFound, "does not exist"),
        (lambda p: _file(p), InvalidInput, "is a file, not a directory"),
        (lambda p: "relative/dir", InvalidInput, "is relative"),
        (lambda p: "", InvalidInput, "empty"),
        (lambda p: "/", InvalidInput, "filesystem root"),
    ],
)
async def test_bad_roots_are_clear_errors(engine, bus, tmp_path, make_path, error, fragment) -> None:
    with pytest.raises(error, match=fragment):
        await EngineClient(bus).start_project(make_path(tmp_path))


def _file(p: Path) -> str:
    f = p / "afile.txt"
    f.write_text("x")
    return str(f)


async def test_bad_data_dir_and_unknown_ids(engine: EngineProcess, bus: Bus, tmp_path: Path) -> None:
    client = EngineClient(bus)
    with pytest.raises(InvalidInput, match="data_dir"):
        await client.start_project(str(tmp_path), data_dir="../x")
    with pytest.raises(NotFound, match="unknown project id"):
        await client.stop_project("01NOSUCHPROJECT0000000000")
    with pytest.raises(InvalidInput, match="invalid project id"):
        await client.whereis_project("a.b>")


async def test_wrong_request_type_and_garbage_get_error_replies(engine: EngineProcess, bus: Bus) -> None:
    # a raw bus call: the typed client could not send the wrong command
    with pytest.raises(InvalidInput, match=r"expected a 'engine\.start_project' request"):
        await bus.call(endpoint("engine", "start_project").subject(), ListProjects())
    reply = await bus.nc.request(subjects.engine("list_projects"), b'{"not": "an event"}', timeout=10)
    assert b'"type":"error"' in reply.data and b"invalid_envelope" in reply.data
    flat = b'{"specversion":"1.0","id":"1","source":"x","type":"engine.list_projects","root_path":"/"}'
    reply = await bus.nc.request(subjects.engine("list_projects"), flat, timeout=10)
    assert b"missing_data_envelope" in reply.data


async def test_two_engine_replicas_share_requests_and_agree_on_a_root(
    config: Config, bus: Bus, tmp_path: Path
) -> None:
    from jidocode.shared.bus import gather

    first, second = (
        EngineProcess(config.model_copy(update={"instance": "a"})),
        EngineProcess(config.model_copy(update={"instance": "b"})),
    )
    await first.start(bus)
    await second.start(bus)
    try:

        async def both_answer() -> list[str]:
            # a replica slow to answer (both cores busy) misses one gather's window, not all
            while True:
                ids = sorted(
                    json.loads(m.data)["id"] for m in await gather(bus.nc, subjects.srv("PING", "engine"))
                )
                if len(ids) >= 2:
                    return ids

        ids = await asyncio.wait_for(both_answer(), 20)
        assert len(ids) == 2 and ids[0] != ids[1]
        roots = [tmp_path / f"p{i}" for i in range(6)]
        for root in roots:
            root.mkdir()
        # the same roots started many times at once, answered by either replica
        client = EngineClient(bus)
        replies = await asyncio.gather(*(client.start_project(str(r)) for r in roots * 3))
        by_root: dict[str, set[str]] = {}
        for reply in replies:
            by_root.setdefault(reply.root_path, set()).add(reply.project_id)
        assert all(len(ids) == 1 for ids in by_root.values()) and len(by_root) == 6
        listed = await client.list_projects()
        assert len(listed.projects) == 6
    finally:
        await first.halt()
        await second.halt()
