"""Tool specs carry seed 000's ``output_schema`` and ``safety`` through ``list_tools``, every
built-in's result matches its output schema, and the model is still shown name, description
and input schema only."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from jidocode.services.conversation.tools_bridge import list_tool_specs
from jidocode.services.registry import serve_many
from jidocode.shared.bus import Bus
from jidocode.shared.clients import ProjectClient
from jidocode.shared.config import Config
from jidocode.shared.events.tools import ToolSafety, ToolSpec
from jidocode.shared.tools import BUILTIN_SPECS
from tests.helpers import wait_for_services
from tests.integration.tools.support import RunnerFactory, run_tool, start_project

EVERYTHING = {"permissions": {"allow": ["Read", "Edit", "Bash"]}}


@pytest.fixture
async def with_assets(config: Config) -> AsyncIterator[Config]:
    names = ("engine", "project", "asset_loader")
    stop = asyncio.Event()
    task = asyncio.create_task(serve_many(config, stop, names))
    try:
        await wait_for_services(config, names, timeout=20)
        yield config
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)


def _by_name(specs: list[ToolSpec]) -> dict[str, ToolSpec]:
    return {s.name: s for s in specs}


async def _with_asset_tools(bus: Bus, project_id: str) -> dict[str, ToolSpec]:
    """The whole catalog once it has the asset loader's tools (the project service waits 2 s for
    them per call and lists the built-ins alone when the loader is late, as under load)."""

    async def ask() -> dict[str, ToolSpec]:
        while True:
            listed = _by_name((await ProjectClient(bus, project_id).list_tools(include_hidden=True)).tools)
            if "run_command" in listed:
                return listed

    return await asyncio.wait_for(ask(), 60)


async def test_list_tools_carries_output_schema_and_safety(
    with_assets: Config, bus: Bus, tmp_path: Path
) -> None:
    pid = await start_project(bus, tmp_path, EVERYTHING)
    listed = await _with_asset_tools(bus, pid)
    for builtin in BUILTIN_SPECS:
        spec = listed[builtin.name]
        assert spec.output_schema == builtin.output_model.model_json_schema()
        assert spec.output_schema["type"] == "object" and spec.output_schema["required"]
        assert spec.safety == builtin.safety
    assert listed["read_file"].safety == ToolSafety(
        read_only=True, destructive=False, idempotent=True, open_world=False, permission="Read"
    )
    assert listed["write_file"].safety.permission == listed["edit_file"].safety.permission == "Edit"
    assert not listed["write_file"].safety.read_only and not listed["edit_file"].safety.idempotent
    assert listed["bash"].safety.open_world and listed["bash"].safety.destructive
    # an asset tool says nothing of itself: it gets the cautious defaults and any output
    assets = [s for s in listed.values() if s.name not in {b.name for b in BUILTIN_SPECS}]
    assert {"run_command", "load_skill"} <= {s.name for s in assets}
    for spec in assets:
        assert spec.safety == ToolSafety() and spec.output_schema == {}
    assert ToolSafety() == ToolSafety(
        read_only=False, destructive=True, idempotent=False, open_world=True, permission=""
    )


async def test_the_model_is_shown_name_description_and_input_schema_only(
    with_assets: Config, bus: Bus, tmp_path: Path
) -> None:
    pid = await start_project(bus, tmp_path, EVERYTHING)
    offered = await list_tool_specs(bus, pid, timeout=10)
    assert {s.name for s in offered} >= {b.name for b in BUILTIN_SPECS}
    for spec in offered:
        assert set(spec.model_dump()) == {"name", "description", "input_schema"}
        assert spec.input_schema["type"] == "object"


async def test_every_builtin_result_matches_its_output_schema(
    bus: Bus, runners: RunnerFactory, tmp_path: Path
) -> None:
    await runners()
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text("one\ntwo = 2\nthree\n")
    pid = await start_project(bus, tmp_path, EVERYTHING)
    calls: list[tuple[str, dict[str, Any]]] = [
        ("read_file", {"path": "src/a.py", "limit": 2}),
        ("write_file", {"path": "src/b.py", "content": "two = 2\n"}),
        ("edit_file", {"path": "src/b.py", "old_string": "two", "new_string": "deux"}),
        ("list_dir", {"path": "src"}),
        ("glob", {"pattern": "**/*.py"}),
        ("grep", {"pattern": "two", "path": "src"}),
        ("bash", {"command": "echo hi"}),
    ]
    # web_fetch needs a web server: tests/integration/egress checks its result against its schema
    assert {name for name, _ in calls} == {b.name for b in BUILTIN_SPECS if not b.network}
    schemas = {b.name: b.output_model.model_json_schema() for b in BUILTIN_SPECS}
    for i, (name, args) in enumerate(calls):
        result = await run_tool(bus, pid, name, args, request_id=f"schema-{i}")
        assert result.ok, result
        jsonschema.Draft202012Validator(schemas[name]).validate(result.data)
        # and a result missing a required field would not pass
        required = schemas[name]["required"][0]
        broken = {k: v for k, v in result.data.items() if k != required}
        assert not jsonschema.Draft202012Validator(schemas[name]).is_valid(broken)
