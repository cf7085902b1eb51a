"""The fuzzer's findings (issue 31, point 9): a cancel of an unknown project or call is ``not_found``;
a request to a verb no endpoint has says so, rather than asking whether JidoCode runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.clients import ToolsClient
from jidocode.shared.errors import NotFound, ServiceUnavailable
from jidocode.shared.events.tools import CancelTool
from tests.integration.tools.support import RunnerFactory, failure, run_tool, start_project


async def test_a_cancel_in_an_unknown_project_is_not_found(bus: Bus, runners: RunnerFactory) -> None:
    await runners()
    with pytest.raises(NotFound) as caught:
        await ToolsClient(bus, "nosuchproject").cancel("r1")
    assert "unknown project id 'nosuchproject'" in caught.value.message


async def test_a_cancel_of_an_unknown_call_is_not_found_and_still_keeps_it_from_starting(
    bus: Bus, runners: RunnerFactory, tmp_path: Path
) -> None:
    await runners()
    pid = await start_project(bus, tmp_path, {"permissions": {"allow": ["Bash(echo:*)"]}})
    with pytest.raises(NotFound) as caught:
        await ToolsClient(bus, pid).cancel("never-sent")
    assert "no tool call 'never-sent' is known" in caught.value.message
    assert caught.value.details == {"request_id": "never-sent", "project_id": pid}
    # a call with that id still on its way (the cancel overtook it) never starts
    result = await run_tool(bus, pid, "bash", {"command": "echo x > ran.txt"}, request_id="never-sent")
    assert failure(result).type == "cancelled"
    assert not (tmp_path / "ran.txt").exists()


async def test_a_cancel_of_a_known_call_is_accepted(bus: Bus, runners: RunnerFactory, tmp_path: Path) -> None:
    await runners()
    pid = await start_project(bus, tmp_path, {"permissions": {"allow": ["Bash(echo:*)"]}})
    assert (await run_tool(bus, pid, "bash", {"command": "echo x"}, request_id="done-1")).ok
    accepted = await ToolsClient(bus, pid).cancel("done-1")
    assert accepted.request_id == "done-1" and accepted.cancel_requested is True


async def test_an_unknown_verb_says_so_while_the_service_is_up(
    bus: Bus, runners: RunnerFactory, tmp_path: Path
) -> None:
    await runners()
    pid = await start_project(bus, tmp_path)
    subject = subjects.tools(pid, "nonsense")
    with pytest.raises(NotFound) as caught:
        await bus.call(subject, CancelTool(request_id="r1"), timeout=10)
    message = caught.value.message
    assert message.startswith(f"no service answers on {subject}: unknown endpoint 'nonsense'")
    assert "tool_runner serves: run, cancel" in message and "jidocode up" not in message


async def test_a_known_verb_nobody_serves_still_asks_whether_jidocode_runs(bus: Bus) -> None:
    with pytest.raises(ServiceUnavailable) as caught:
        await bus.call(subjects.tools("nobody", "cancel"), CancelTool(request_id="r1"), timeout=10)
    assert "is JidoCode running?" in caught.value.message
