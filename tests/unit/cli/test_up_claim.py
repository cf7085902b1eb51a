"""`jidocode up`'s hold on a data home, its port choice, and how commands find the running system."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from jidocode.cli.up import claim_data_home, port_free
from jidocode.shared.config import Config, RunningSystem, running_file, running_system
from jidocode.shared.natsserver import ensure_credentials


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_second_claim_on_the_same_data_home_is_refused_naming_the_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with claim_data_home(tmp_path) as claim:
        claim.announce("nats://127.0.0.1:14999")
        assert running_system(tmp_path) == RunningSystem(pid=os.getpid(), url="nats://127.0.0.1:14999")
        with pytest.raises(typer.Exit) as refused, claim_data_home(tmp_path):
            pytest.fail("a second claim was granted")
        assert refused.value.exit_code == 1
        said = " ".join(capsys.readouterr().out.split())
        assert f"pid {os.getpid()}" in said and "nats://127.0.0.1:14999" in said
    # released: the file is gone and the next claim is granted
    assert not running_file(tmp_path).exists() and running_system(tmp_path) is None
    with claim_data_home(tmp_path):
        pass


def test_a_file_left_by_a_dead_up_is_ignored(tmp_path: Path) -> None:
    stale = RunningSystem(pid=_dead_pid(), url="nats://127.0.0.1:1")
    running_file(tmp_path).write_text(stale.model_dump_json())
    assert running_system(tmp_path) is None
    with claim_data_home(tmp_path) as claim:  # no lock holder: granted
        claim.announce("nats://127.0.0.1:2")
        assert running_system(tmp_path) == RunningSystem(pid=os.getpid(), url="nats://127.0.0.1:2")


def test_commands_find_the_running_system_without_nats_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JIDO_DATA_HOME", str(tmp_path))
    for var in ("NATS_URL", "NATS_USER", "NATS_PASSWORD", "NATS_CREDS", "NATS_INBOX_PREFIX"):
        monkeypatch.delenv(var, raising=False)
    passwords = ensure_credentials("nats://127.0.0.1:14777", tmp_path)
    with claim_data_home(tmp_path) as claim:
        claim.announce("nats://127.0.0.1:14777")
        config = Config.from_env()
        assert config.nats_url == "nats://127.0.0.1:14777"
        assert (config.nats_user, config.nats_password) == ("client", passwords["client"])
        # a running system on another port than the stored credentials': they are not sent there
        claim.announce("nats://127.0.0.1:14778")
        assert Config.from_env().nats_user is None


def test_port_free_ignores_time_wait_but_not_a_listener() -> None:
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as nats-server (Go) listens
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert not port_free(port)  # something listens: busy
        client = socket.create_connection(("127.0.0.1", port))
        conn, _ = listener.accept()
        conn.shutdown(socket.SHUT_WR)  # the server side closes first: it ends in TIME-WAIT
        assert client.recv(1) == b""
        client.close()
        assert conn.recv(1) == b""
        conn.close()
    with socket.socket() as plain, pytest.raises(OSError):  # the old check: TIME-WAIT looks busy
        plain.bind(("127.0.0.1", port))
    assert port_free(port)
