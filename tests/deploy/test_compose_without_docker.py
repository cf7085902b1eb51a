"""compose.yaml without Docker: the committed NATS node configs run as a 3-node cluster on loopback, each
service runs as a process with exactly the environment compose gives it, and a client chats through the
whole system as the ``client`` user. Each service passes its health probe with its own credentials, no
permission violation is logged anywhere, and SIGTERM stops every service with exit code 0."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from jidocode.cli.deploy import generate_passwords
from jidocode.cli.dev.scripted_llm import Reply, ScriptedLlm, call
from jidocode.client import JidoClient
from jidocode.shared import nats_permissions as perms
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.natsserver import NatsServer, free_port

from .cluster import wait_jetstream_cluster
from .services import ServiceProcess, killed_on_exit, probe, wait_answering

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SERVICE_OF = {
    "engine": "engine",
    "project": "project",
    "asset-loader": "asset_loader",
    "prd": "prd",
    "tool-runner": "tool_runner",
    "conversation": "conversation",
}
_VAR = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)(?::([-?])([^}]*))?\}")


def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's ``${VAR}``, ``${VAR:-default}`` and ``${VAR:?error}``."""

    def sub(m: re.Match[str]) -> str:
        name, op, arg = m.group(1), m.group(2), m.group(3)
        if env.get(name):
            return env[name]
        if op == "?":
            raise KeyError(f"{name}: {arg}")
        return arg or ""

    return _VAR.sub(sub, value)


def _node_configs(tmp: Path) -> tuple[list[NatsServer], str]:
    """The committed deploy/nats configs, with compose's host names and ports mapped onto loopback."""
    names = ["nats-1", "nats-2", "nats-3"]
    client_ports = {n: free_port() for n in names}
    route_ports = {n: free_port() for n in names}
    conf_dir = tmp / "nats"
    conf_dir.mkdir()
    shutil.copy(ROOT / "deploy" / "nats" / "auth.conf", conf_dir / "auth.conf")
    servers = []
    for name in names:
        text = (ROOT / "deploy" / "nats" / f"{name}.conf").read_text()
        text = text.replace('"0.0.0.0:4222"', f'"127.0.0.1:{client_ports[name]}"')
        text = text.replace('"0.0.0.0:6222"', f'"127.0.0.1:{route_ports[name]}"')
        text = text.replace('"0.0.0.0:8222"', f'"127.0.0.1:{free_port()}"')
        text = text.replace('"/data/jetstream"', f'"{tmp / name}"')
        for other in names:
            text = text.replace(f"nats://{other}:6222", f"nats://127.0.0.1:{route_ports[other]}")
        conf = conf_dir / f"{name}.conf"
        conf.write_text(text)
        servers.append(
            NatsServer(store_dir=tmp / name, port=client_ports[name], server_name=name, config_file=conf)
        )
    return servers, ",".join(f"nats://127.0.0.1:{client_ports[n]}" for n in names)


async def test_compose_system_on_loopback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    compose: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text())
    passwords = generate_passwords()
    dotenv = {perms.password_env_var(u): pw for u, pw in passwords.items()}
    for var, value in dotenv.items():  # the NATS nodes resolve auth.conf's references from these
        monkeypatch.setenv(var, value)

    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(ROOT / "deploy" / "settings.example.json", home / "settings.json")  # the mounted settings
    project = tmp_path / "proj"
    project.mkdir()
    (project / "README.md").write_text("hello from the readme\n")

    servers, url = _node_configs(tmp_path)
    async with ScriptedLlm() as llm:
        llm.script(Reply.tools(call("read_file", path="README.md")), Reply.answer("The readme says hello."))
        dotenv |= {
            "JIDO_LLM_MODEL": "openai/scripted",
            "JIDO_LLM_API_BASE": llm.api_base,
            "OPENAI_API_KEY": "sk-test",
        }
        base = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "JIDO_"))}
        procs = []
        for compose_name, service in SERVICE_OF.items():
            env = {
                k: interpolate(str(v), dotenv)
                for k, v in compose["services"][compose_name]["environment"].items()
            }
            assert env["NATS_USER"] == service
            env |= {"NATS_URL": url, "JIDO_CODE_HOME": str(home), "PYTHONUNBUFFERED": "1"}
            procs.append(ServiceProcess(service, {**base, **env}, tmp_path / f"{service}.log"))

        cli_env = {
            k: interpolate(str(v), dotenv) for k, v in compose["services"]["cli"]["environment"].items()
        }
        monkeypatch.setenv(perms.INBOX_ENV_VAR, cli_env[perms.INBOX_ENV_VAR])
        client_config = Config(
            nats_url=url,
            nats_user=cli_env["NATS_USER"],
            nats_password=cli_env["NATS_PASSWORD"],
            jido_home=home,
            instance="cli",
        )
        try:
            for server in servers:
                server.start()
            # As the conversation user: the one allowed to create (and delete) the journal stream.
            await wait_jetstream_cluster(
                url,
                as_user=("conversation", passwords["conversation"]),
                stream=subjects.STREAM_JOURNAL,
                stream_subjects=(subjects.journal_filter(),),
            )
            with killed_on_exit(procs):
                for p in procs:
                    p.start()
                bus = await Bus.connect(client_config, "cli")
                try:
                    await wait_answering(bus.nc, tuple(SERVICE_OF.values()), processes=tuple(procs))
                    # The container health check, run with each service's own credentials.
                    probes = await asyncio.gather(*(probe(p.name, p.env) for p in procs))
                    assert probes == [0] * len(procs), [p.output() for p in procs]
                    client = await JidoClient.connect(
                        project_dir=project,
                        bus=bus,
                        settings={"retry_backoff_s": 0.01, "retry_backoff_max_s": 0.05},
                    )
                    answer = await client.send_message("What does the README say?", timeout=90)
                    assert answer == "The readme says hello."
                    history = await client.get_history()
                    assert history[-1]["content"] == "The readme says hello."
                    # JIDO_JS_REPLICAS=3 from compose: the journal is on all three nodes.
                    journal = await bus.js.stream_info(subjects.STREAM_JOURNAL)
                    assert journal.config.num_replicas == 3
                    assert journal.cluster is not None and len(journal.cluster.replicas or []) == 2
                finally:
                    await bus.close()
                codes = await asyncio.gather(*(p.terminate() for p in procs))
            assert codes == [0] * len(procs), {p.name: p.output()[-2000:] for p in procs}
            for p in procs:
                assert "permissions violation" not in p.output().lower(), p.output()
            assert "hello from the readme" in str(llm.requests[1])
        finally:
            for server in servers:
                server.stop()
