"""The real services, each a process running as its own NATS user against the generated config, start,
answer their health probe, serve a client, stop on SIGTERM with exit 0, and never hit a permission
violation on the way."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from jidocode.shared import nats_permissions as perms
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.events.engine import ListProjects, StartProject
from jidocode.shared.events.tools import RunTool, ToolCallMeta

from .conftest import SecuredNats
from .services import ServiceProcess, available_services, killed_on_exit, probe, service_env, wait_answering

pytestmark = pytest.mark.slow


async def test_services_run_as_their_own_users(
    secured_nats: SecuredNats, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = available_services()
    assert {"engine", "project", "tool_runner"} <= set(names)
    home = tmp_path / "home"
    home.mkdir()
    (home / "settings.json").write_text('{"permissions": {"allow": ["Read"]}}')
    procs = [
        ServiceProcess(
            n, service_env(n, secured_nats.url, secured_nats.passwords, home), tmp_path / f"{n}.log"
        )
        for n in names
    ]
    monkeypatch.setenv(perms.INBOX_ENV_VAR, perms.inbox_prefix(perms.CLIENT))
    client_config = Config(
        nats_url=secured_nats.url,
        nats_user=perms.CLIENT,
        nats_password=secured_nats.passwords[perms.CLIENT],
        jido_home=home,
        instance="client",
    )
    with killed_on_exit(procs):
        for p in procs:
            p.start()
        client = await Bus.connect(client_config, "client")
        try:
            await wait_answering(client.nc, names)
            # The container health check, with each service's own credentials.
            probes = await asyncio.gather(*(probe(p.name, p.env) for p in procs))
            assert probes == [0] * len(procs), [p.output() for p in procs]

            project_root = tmp_path / "proj"
            project_root.mkdir()
            (project_root / "hello.txt").write_text("hello from the project\n")
            info = await client.request(
                subjects.engine("start_project"), StartProject(root_path=str(project_root))
            )
            pid = info["project_id"]
            listed = await client.request(subjects.engine("list_projects"), ListProjects())
            assert [p["project_id"] for p in listed] == [pid]
            assert (await client.request(subjects.project(pid, "info"), ListProjects()))["project_id"] == pid
            result = await client.request(
                subjects.tools(pid, "run"),
                RunTool(name="read_file", args={"path": "hello.txt"}, meta=ToolCallMeta(request_id="req-1")),
                timeout=15,
            )
            assert result["ok"] is True, (result["error"], "\n".join(p.output()[-3000:] for p in procs))
            assert "hello from the project" in str(result["data"])
        finally:
            await client.close()

        exits = await asyncio.gather(*(p.terminate() for p in procs))
        codes = {p.name: code for p, code in zip(procs, exits, strict=True)}
    assert codes == dict.fromkeys(names, 0), {p.name: p.output()[-2000:] for p in procs}
    for p in procs:
        assert "permissions violation" not in p.output().lower(), p.output()
