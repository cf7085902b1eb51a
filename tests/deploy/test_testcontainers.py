"""The same NATS checks against the NATS container image, via testcontainers.

Runs only when a Docker engine answers; otherwise every test here skips with the reason.
(``JIDO_TEST_NATS=container`` makes the whole integration suite use a container; see tests/conftest.py.)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import nats
import nats.errors
import pytest
from nats.js.api import StreamConfig

from jidocode.cli.deploy import generate_passwords
from jidocode.shared import nats_permissions as perms
from jidocode.shared import subjects

NATS_IMAGE = "nats:2.11-alpine"


def _docker_unavailable() -> str | None:
    """None when a Docker engine answers, else why not."""
    try:
        import docker  # type: ignore[import-untyped]

        docker.from_env().ping()
    except Exception as exc:  # any failure to reach an engine means "skip", with its reason
        return f"no Docker engine available ({type(exc).__name__}: {exc})"
    return None


_REASON = _docker_unavailable()
pytestmark = [pytest.mark.docker, pytest.mark.skipif(_REASON is not None, reason=_REASON or "")]


@pytest.fixture
def secured_container(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """The NATS image running our generated config (users with passwords, JetStream)."""
    from testcontainers.core.container import DockerContainer  # type: ignore[import-untyped]
    from testcontainers.core.wait_strategies import LogMessageWaitStrategy  # type: ignore[import-untyped]

    passwords = generate_passwords()
    node = perms.NodeConfig(server_name="tc", http_port=None, include=None, store_dir="/tmp/js")
    conf = tmp_path / "nats.conf"
    conf.write_text(perms.render_node(node, perms.render_accounts(passwords=passwords)))
    conf.chmod(0o644)
    container = (
        DockerContainer(NATS_IMAGE)
        .with_volume_mapping(str(conf), "/etc/nats/jido.conf", "ro")
        .with_command("-c /etc/nats/jido.conf")
        .with_exposed_ports(4222)
        .waiting_for(LogMessageWaitStrategy("Server is ready"))
    )
    with container:
        yield f"nats://{container.get_container_host_ip()}:{container.get_exposed_port(4222)}", passwords


async def test_container_refuses_unauthenticated_clients(
    secured_container: tuple[str, dict[str, str]],
) -> None:
    url, _ = secured_container

    async def _cb(exc: Exception) -> None:
        return None

    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await nats.connect(url, allow_reconnect=False, error_cb=_cb, connect_timeout=10)


async def test_container_serves_jetstream_to_the_conversation_user(
    secured_container: tuple[str, dict[str, str]],
) -> None:
    url, passwords = secured_container
    nc = await nats.connect(
        url,
        user="conversation",
        password=passwords["conversation"],
        inbox_prefix=perms.inbox_prefix("conversation"),
        allow_reconnect=False,
        connect_timeout=10,
    )
    try:
        js = nc.jetstream()
        await js.add_stream(StreamConfig(name=subjects.STREAM_JOURNAL, subjects=[subjects.journal_filter()]))
        ack = await js.publish(subjects.journal("p1", "c1"), b"entry")
        assert ack.seq == 1
    finally:
        await nc.close()
