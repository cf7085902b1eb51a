"""Issue 31, point 1: `jidocode up` on a small disk sizes its streams to fit and becomes ready; a
setting that cannot fit is refused at once, naming the disk, the space and the setting."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from jidocode.services.registry import SERVICES
from jidocode.shared.natsserver import free_port
from jidocode.shared.store_space import BUDGET_FILE, GIB
from tests.e2e.test_up import UpProcess
from tests.helpers import wait_for_services
from tests.small_disk import small_disk

pytestmark = pytest.mark.slow


async def test_up_is_ready_on_a_disk_with_2_gib_free(tmp_path: Path) -> None:
    with small_disk(tmp_path / "data", "2g"):
        up = UpProcess(tmp_path)
        await up.start_reader()
        try:
            url = (await up.wait_line(r"NATS listening on (nats://\S+)", timeout=60)).group(1)
            await wait_for_services(up.client_config(url), SERVICES, timeout=120)
            await up.wait_line(r"all \d+ services ready", timeout=60)
            said = "\n".join(up.lines)
            assert "streams sized from the free space" in said and "JIDO_EVENTS_MAX_BYTES=512 MiB" in said
            assert (Path(up.data_home) / "nats" / BUDGET_FILE).exists()
            assert "exited with code" not in said  # no service crash-looped on its streams
        finally:
            up.proc.terminate()
            up.proc.wait(60)


def test_a_setting_the_disk_cannot_hold_is_refused_naming_disk_space_and_setting(tmp_path: Path) -> None:
    with small_disk(tmp_path / "data", "2g") as data:
        env = {
            **{k: v for k, v in os.environ.items() if k != "NATS_URL"},
            "JIDO_DATA_HOME": str(data),
            "JIDO_CODE_HOME": str(tmp_path / "home"),
            "JIDO_EVENTS_MAX_BYTES": str(8 * GIB),
        }
        argv = [
            sys.executable,
            "-m",
            "jidocode.cli.main",
            "up",
            "--port",
            str(free_port()),
            "--only",
            "engine",
        ]
        refused = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        said = " ".join(refused.stdout.split())
        assert refused.returncode == 1, said
        assert f"{data}/nats" in said and "JIDO_EVENTS_MAX_BYTES=8589934592" in said, said
        assert "GiB free on that disk" in said and "cannot be created" in said, said
        assert "NATS listening" not in said and "is JidoCode running" not in said
