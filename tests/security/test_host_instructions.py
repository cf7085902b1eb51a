"""The instruction files the conversation service reads on the host never lead out of the project.

The system prompt quotes the project's ``JIDO.md``, ``AGENTS.md`` and ``CLAUDE.md``, read by the
conversation service on the host, with its rights. A model can make any of them a link (they are
not protected, and a link may point anywhere): pointed at the data home's NATS credentials, the
service would put into the model's next prompt a file the sandbox hides from it. The whole system
runs as ``jidocode up`` runs it (a NATS user per service, the credentials in the data home); the
model's link is made by a ``bash`` call through the real tool runner, in the real sandox (both
modes); the judge is the scripted model server: the password never reaches it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jidocode.cli.dev.scripted_llm import Reply, ScriptedLlm
from jidocode.client import JidoClient
from jidocode.shared.config import credentials_dir
from jidocode.shared.envelope import new_id
from jidocode.shared.trust import trust_project
from tests.integration.prd.helpers import git_repo
from tests.security.bus_system import secure_system
from tests.security.sandbox_support import MODES, skip_unless, write_global

FAST = {"retry_backoff_s": 0.01, "retry_backoff_max_s": 0.05, "max_retries": 0}


@pytest.mark.parametrize("mode", MODES)
async def test_an_instruction_file_linked_to_the_credentials_never_reaches_the_model(
    tmp_path: Path, mode: str
) -> None:
    skip_unless(mode)
    root = git_repo(tmp_path / "repo")
    jido_home = tmp_path / "jido_home"
    async with ScriptedLlm() as llm:
        write_global(
            jido_home,
            {"mode": mode},
            llm={"model": "openai/scripted", "api_base": llm.api_base},
            permissions={"allow": ["Bash", "Read"]},
        )
        trust_project(root, home=jido_home)
        async with secure_system(tmp_path / "system", jido_home) as system:
            client_json = credentials_dir(system.data_home) / "client.json"
            password = system.passwords["client"]
            assert password in client_json.read_text()
            project_id = await system.start_project(root)
            # the model, through its tools: a JIDO.md of its own, and AGENTS.md a link to the credentials
            make = (
                "printf 'house rules 42\\n' > JIDO.md && python3 -c "
                f"\"import os; os.symlink('{client_json}', 'AGENTS.md')\" && echo made"
            )
            made = await system.run(project_id, "bash", {"command": make}, request_id=new_id())
            assert made.ok and "made" in str(made.data), made
            assert (root / "AGENTS.md").is_symlink()

            llm.script(Reply.answer("hello"))
            chat = await JidoClient.connect(project_dir=root, bus=system.client, settings=FAST)
            try:
                assert await chat.send_message("what are the rules here?", timeout=60) == "hello"
            finally:
                await chat.close()
    seen = json.dumps(llm.requests)
    assert password not in seen, "the NATS password reached the model"
    assert "house rules 42" in seen  # the project's own instructions are still read
