"""Issue 31, point 1: `jidocode up` on a small disk sizes its streams to fit and becomes ready; a
setting that cannot fit is refused at once, naming the disk, the space and the setting."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jidocode.cli.dev.scripted_llm import Reply, ScriptedLlm
from jidocode.client import JidoClient, TurnFailed
from jidocode.services.registry import SERVICES
from jidocode.shared.errors import JidoError
from jidocode.shared.natsserver import free_port
from jidocode.shared.store_space import BUDGET_FILE, GIB
from tests.e2e.test_up import UpProcess
from tests.helpers import wait_for_services
from tests.small_disk import fill, small_disk

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


async def _answered_again(client: JidoClient, deadline: float) -> str:
    """A turn answered once the system has room again (asked again while it heals)."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            return await client.send_message("and now?", timeout=60)
        except JidoError:
            if loop.time() > deadline:
                raise
            await asyncio.sleep(1.0)  # the server is being restarted by up's health watch


async def test_a_message_sent_to_a_full_disk_is_answered_storage_full_and_works_again(tmp_path: Path) -> None:
    """Issue 31, point 2: a full disk is an answer naming the store, not a hang; once space is
    freed the same system answers again without a person."""
    async with ScriptedLlm(responder=lambda body: Reply.answer("ok")) as llm:
        with small_disk(tmp_path / "data", "2g") as data:
            env = {"JIDO_LLM_MODEL": "openai/scripted", "JIDO_LLM_API_BASE": llm.api_base}
            up = UpProcess(tmp_path, extra_env=env)
            await up.start_reader()
            client: JidoClient | None = None
            try:
                url = (await up.wait_line(r"NATS listening on (nats://\S+)", timeout=60)).group(1)
                config = up.client_config(url)
                await wait_for_services(config, SERVICES, timeout=120)
                (tmp_path / "proj").mkdir()
                client = await JidoClient.connect(project_dir=tmp_path / "proj", config=config)
                await client.start_conversation()
                assert await client.send_message("hello", timeout=120)
                filler = fill(data)
                with pytest.raises(JidoError) as full:
                    await client.send_message("hello again", timeout=120)
                # the call itself (the input could not be stored) or the turn (its step could not)
                assert full.value.type == "storage_full", full.value
                assert isinstance(full.value, TurnFailed) or not full.value.details.get("status")
                assert str(Path(up.data_home) / "nats") in full.value.message
                filler.unlink()
                deadline = asyncio.get_running_loop().time() + 90
                assert await _answered_again(client, deadline)
            finally:
                if client is not None:
                    await client.close()
                up.proc.terminate()
                up.proc.wait(60)
