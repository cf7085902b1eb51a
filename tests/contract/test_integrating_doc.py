"""docs/integrating.md runs: its python blocks, in order, against a real system, with plain nats-py.

The blocks share one namespace and top-level ``await`` (as in ``python -m
asyncio``); each block's printed lines must equal its ``#>`` lines. The system
is every service in this process on a real nats-server, with litellm talking
to the scripted LLM, and a project directory (the current directory) whose
policy asks before edits.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from jidocode.cli.dev.scripted_llm import Reply, ScriptedLlm, call
from jidocode.services.conversation.settings import RuntimeSettings
from jidocode.services.registry import serve_many
from jidocode.shared.config import Config
from tests.helpers import wait_for_services

DOC = Path(__file__).resolve().parents[2] / "docs" / "integrating.md"
_BLOCK = re.compile(r"^```python\n(.*?)^```\n", re.S | re.M)
#: What the examples may import: the standard library and nats-py.
_ALLOWED_IMPORTS = {"asyncio", "json", "os", "uuid", "nats"}


def _blocks() -> list[tuple[int, str]]:
    text = DOC.read_text()
    return [(text.count("\n", 0, m.start()) + 2, m.group(1)) for m in _BLOCK.finditer(text)]


def _expected(source: str) -> list[str]:
    return [
        line[3:] if line.startswith("#> ") else "" for line in source.splitlines() if line.startswith("#>")
    ]


def _imports(source: str) -> set[str]:
    tree = ast.parse(source)
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_the_examples_import_only_the_standard_library_and_nats() -> None:
    blocks = _blocks()
    assert len(blocks) >= 10
    used = set().union(*(_imports(source) for _, source in blocks))
    assert used <= _ALLOWED_IMPORTS
    assert "nats" in used
    assert not any(re.search(r"\b(import|from)\s+jidocode", source) for _, source in blocks)


def test_the_limits_it_states_are_the_defaults() -> None:
    text = DOC.read_text()
    assert RuntimeSettings().max_message_bytes == 256 * 1024 and "256 KiB" in text
    assert "1-128 characters of\n  `A-Z a-z 0-9 _ -`" in text


@pytest.fixture
async def system(
    config: Config, scripted_llm: ScriptedLlm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Path]:
    project = tmp_path / "project"
    (project / ".jido").mkdir(parents=True)
    (project / ".jido" / "settings.json").write_text(
        json.dumps({"permissions": {"ask": ["Edit(**)"]}, "tools": {"approval_timeout_s": 30}})
    )
    monkeypatch.setenv("JIDO_LLM_MODEL", "openai/scripted")
    monkeypatch.setenv("JIDO_LLM_API_BASE", scripted_llm.api_base)
    monkeypatch.setenv("NATS_URL", config.nats_url)
    monkeypatch.chdir(project)
    stop = asyncio.Event()
    task = asyncio.create_task(serve_many(config, stop))
    try:
        await wait_for_services(config, timeout=30)
        yield project
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def test_the_examples_run_against_the_system(
    system: Path, scripted_llm: ScriptedLlm, capsys: pytest.CaptureFixture[str]
) -> None:
    scripted_llm.script(
        Reply.answer("Hello!"),
        Reply.answer("Hello again!"),
        Reply.tools(call("write_file", path="notes.txt", content="hi\n")),
        Reply.answer("Written."),
    )
    namespace: dict[str, Any] = {"__name__": "integrating"}
    try:
        for line, source in _blocks():
            code = compile(source, f"{DOC}:{line}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            capsys.readouterr()
            result = eval(code, namespace)
            if inspect.iscoroutine(result):
                await result
            printed = capsys.readouterr().out.splitlines()
            assert printed == _expected(source), f"the block at docs/integrating.md:{line} printed {printed}"
    finally:
        nc = namespace.get("nc")
        if nc is not None and not nc.is_closed:
            await nc.close()
    assert (system / "notes.txt").read_text() == "hi\n"
    assert len(scripted_llm.requests) == 4
