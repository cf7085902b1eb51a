"""Fixtures for the deploy tests: a real nats-server running the generated per-service config."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from jidocode.cli import deploy
from jidocode.shared import nats_permissions as perms
from jidocode.shared.natsserver import NatsServer, free_port


@dataclass(frozen=True)
class SecuredNats:
    url: str
    passwords: dict[str, str]
    server: NatsServer


@pytest.fixture
def secured_nats(tmp_path: Path) -> Iterator[SecuredNats]:
    """A nats-server with JetStream whose only users are the generated JidoCode users."""
    passwords = deploy.generate_passwords()
    port = free_port()
    store = tmp_path / "js"
    node = perms.NodeConfig(
        server_name="secured", host="127.0.0.1", port=port, http_port=None, store_dir=str(store), include=None
    )
    conf = tmp_path / "nats.conf"
    conf.write_text(perms.render_node(node, perms.render_accounts(passwords=passwords)))
    server = NatsServer(store_dir=store, port=port, server_name="secured", config_file=conf).start()
    try:
        yield SecuredNats(url=server.url, passwords=passwords, server=server)
    finally:
        server.stop()
