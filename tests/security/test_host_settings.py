"""Settings fail closed: a settings file with an error refuses every call (issue 24, finding 9).

A settings file that did not parse was skipped whole, so its ``deny`` rules
vanished: ``"deny": ["Read(private.txt)", "Bash"]`` plus a trailing comma, and
both ran. Here the real services run on a nats-server with the embedded users
(``bus_system.secure_system``); the user's global layer allows ``Bash`` and
``Read``, and a project file that should deny them has an error. Each attack is
judged by its side effects: a canary file a bash call would create in the
project, and the content of ``private.txt`` that a read would return. Each test
also checks that the refusal names the broken file with its line and column,
and the fix test that the next call after the fix works without a restart
(decision 0304).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from jidocode.services.prd.quality import run_checks
from jidocode.shared.clients import ConversationsClient, ProjectClient
from jidocode.shared.errors import JidoError
from jidocode.shared.events.tools import ToolResult
from jidocode.shared.trust import untrust_project
from tests.security.bus_system import SecureSystem, failure, secure_system
from tests.security.sandbox_support import MODES, skip_unless

pytestmark = pytest.mark.slow

TOOL_SERVICES = ("engine", "project", "tool_runner")
PRIVATE = "CANARY-PRIVATE-5d1c"
#: The issue's file: deny rules and a trailing comma (line 4, column 3 is the ``}`` after it).
TRAILING_COMMA = '{\n  "permissions": {\n    "deny": ["Read(private.txt)", "Bash"],\n  }\n}\n'
FIXED = '{\n  "permissions": {\n    "deny": ["Read(private.txt)"]\n  }\n}\n'
#: What the bash call would leave behind if it ran.
CANARY_COMMAND = "touch pwned && echo ran"


@dataclass
class Project:
    """A project with a private file, its settings file and the canary a bash call would leave."""

    root: Path

    @property
    def settings(self) -> Path:
        return self.root / ".jido" / "settings.json"

    @property
    def canary(self) -> Path:
        return self.root / "pwned"

    def write(self, text: str) -> Path:
        self.settings.write_text(text)
        return self.settings


def _project(tmp_path: Path, name: str, settings: str | None = None) -> Project:
    root = tmp_path / name
    (root / ".jido").mkdir(parents=True)
    (root / "private.txt").write_text(PRIVATE)
    (root / "notes.txt").write_text("public notes\n")
    project = Project(root)
    if settings is not None:
        project.write(settings)
    return project


def _global(jido_home: Path, mode: str = "auto", **other: Any) -> Path:
    """The user's layer: Bash and Read allowed, the sandbox in ``mode``."""
    settings = {"sandbox": {"mode": mode}, "permissions": {"allow": ["Bash", "Read"]}, **other}
    path = jido_home / "settings.json"
    path.write_text(json.dumps(settings))
    return path


@pytest.fixture
async def system(tmp_path: Path, jido_home: Path) -> AsyncIterator[SecureSystem]:
    async with secure_system(tmp_path / "sys", jido_home, TOOL_SERVICES) as running:
        yield running


async def _call(system: SecureSystem, pid: str, name: str, args: dict[str, Any], rid: str) -> ToolResult:
    return await system.run(pid, name, args, request_id=rid, timeout=60)


def _refused_at(result: ToolResult, where: str) -> str:
    """The refusal's message, checked to name ``where`` (``file:line:column``) and to leak nothing."""
    error = failure(result)
    assert error.type == "invalid_input", error
    assert "every tool call of this project is refused until its settings are fixed" in error.message
    assert where in error.message, error.message
    assert error.details["reason"] == "settings_invalid"
    assert PRIVATE not in json.dumps(result.model_dump(mode="json"))
    return error.message


async def _attack(system: SecureSystem, project: Project, pid: str, where: str, tag: str) -> None:
    """Read the private file and run the canary command: both refused naming ``where``, nothing ran."""
    read = await _call(system, pid, "read_file", {"path": "private.txt"}, f"{tag}-read")
    bash = await _call(system, pid, "bash", {"command": CANARY_COMMAND}, f"{tag}-bash")
    assert not project.canary.exists(), "the canary command ran"
    assert PRIVATE not in json.dumps(read.model_dump(mode="json")), "the private file was read"
    _refused_at(read, where)
    _refused_at(bash, where)


@pytest.mark.parametrize("mode", MODES)
async def test_the_issues_trailing_comma_refuses_read_and_bash_naming_file_line_column(
    system: SecureSystem, tmp_path: Path, jido_home: Path, mode: str
) -> None:
    skip_unless(mode)
    _global(jido_home, mode)
    project = _project(tmp_path, "proj", TRAILING_COMMA)
    pid = await system.start_project(project.root)
    where = f"{project.settings}:4:3: invalid JSON: trailing comma before '}}'"
    await _attack(system, project, pid, where, f"issue-{mode}")


async def test_an_untrusted_projects_broken_file_still_refuses(
    system: SecureSystem, tmp_path: Path, jido_home: Path
) -> None:
    untrust_project(tmp_path, home=jido_home)  # the shared fixture trusts tmp_path
    _global(jido_home)
    project = _project(tmp_path, "untrusted", TRAILING_COMMA)
    pid = await system.start_project(project.root)
    await _attack(system, project, pid, f"{project.settings}:4:3", "untrusted")


async def test_a_broken_global_file_refuses_the_calls_of_every_project(
    system: SecureSystem, tmp_path: Path, jido_home: Path
) -> None:
    # the user's deny rule lives in the global file; each project allows Bash and Read
    broken = jido_home / "settings.json"
    broken.write_text('{"permissions": {\n  "deny": ["Bash", "Read(private.txt)"],\n}}\n')
    allow = json.dumps({"permissions": {"allow": ["Bash", "Read"]}})
    for name in ("first", "second"):
        project = _project(tmp_path, name, allow)
        pid = await system.start_project(project.root)
        await _attack(system, project, pid, f"{broken}:3:1", name)


async def test_fixing_the_file_makes_the_next_call_work_without_a_restart(
    system: SecureSystem, tmp_path: Path, jido_home: Path
) -> None:
    _global(jido_home)
    project = _project(tmp_path, "fix", TRAILING_COMMA)
    pid = await system.start_project(project.root)
    await _attack(system, project, pid, f"{project.settings}:4:3", "before")
    project.write(FIXED)
    read = await _call(system, pid, "read_file", {"path": "notes.txt"}, "after-read")
    assert read.ok and "public notes" in json.dumps(read.model_dump(mode="json")), read
    private = await _call(system, pid, "read_file", {"path": "private.txt"}, "after-private")
    assert failure(private).type == "permission_denied"  # the fixed file's deny rule holds
    bash = await _call(system, pid, "bash", {"command": CANARY_COMMAND}, "after-bash")
    assert bash.ok, bash
    assert project.canary.exists()


@pytest.mark.parametrize(
    ("text", "where"),
    [
        # a string where a list is expected: the deny rule is not dropped, the file refuses
        ('{\n  "permissions": {\n    "deny": "Bash"\n  }\n}\n', ":3:5: permissions.deny: "),
        # a wrong type outside permissions refuses as well (it fell back to the default before)
        ('{\n  "tools": {"timeout_s": "fast"}\n}\n', ":2:13: tools.timeout_s: "),
    ],
    ids=["deny-as-a-string", "limit-as-a-string"],
)
async def test_a_wrong_type_refuses_every_call_naming_the_key(
    system: SecureSystem, tmp_path: Path, jido_home: Path, text: str, where: str
) -> None:
    _global(jido_home)
    project = _project(tmp_path, "typed", text)
    pid = await system.start_project(project.root)
    read = await _call(system, pid, "read_file", {"path": "notes.txt"}, "typed-read")
    _refused_at(read, f"{project.settings}{where}")
    bash = await _call(system, pid, "bash", {"command": CANARY_COMMAND}, "typed-bash")
    _refused_at(bash, f"{project.settings}{where}")
    assert not project.canary.exists()


async def test_the_project_service_gives_the_same_error_for_its_policy_and_catalog(
    system: SecureSystem, tmp_path: Path, jido_home: Path
) -> None:
    _global(jido_home)
    project = _project(tmp_path, "catalog", TRAILING_COMMA)
    pid = await system.start_project(project.root)
    client = ProjectClient(system.client, pid, timeout=30)
    for ask in (client.policy, client.list_tools):
        with pytest.raises(JidoError) as exc:
            await ask()
        assert exc.value.type == "invalid_input"
        assert f"{project.settings}:4:3: invalid JSON" in exc.value.message


async def test_a_conversation_start_is_refused_not_run_on_defaults(tmp_path: Path, jido_home: Path) -> None:
    _global(jido_home, llm={"model": "openai/user-model", "budget_usd": 1.0})
    project = _project(tmp_path, "chat")
    project.write('{"llm": {"budget_usd": 0.01,}}')  # the project's lower budget, with a slip
    async with secure_system(tmp_path / "sys", jido_home, ("engine", "conversation")) as system:
        pid = await system.start_project(project.root)
        with pytest.raises(JidoError) as exc:
            await ConversationsClient(system.client, pid).start(timeout=30)
    assert exc.value.type == "invalid_input"
    assert "a conversation in this project is refused until its settings are fixed" in exc.value.message
    assert f"{project.settings}:1:29: invalid JSON: trailing comma" in exc.value.message


def test_doctor_reports_the_error_with_file_line_column(tmp_path: Path, jido_home: Path) -> None:
    _global(jido_home)
    project = _project(tmp_path, "doctor", TRAILING_COMMA)
    env = {k: v for k, v in os.environ.items() if k != "NATS_URL"}
    env.update(JIDO_CODE_HOME=str(jido_home), JIDO_DATA_HOME=str(tmp_path / "data"), HOME=str(tmp_path))
    argv = [sys.executable, "-m", "jidocode.cli.main", "doctor", "--no-check", "--project", str(project.root)]
    done = subprocess.run(
        [*argv, "--json"], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    check = report["settings_check"]
    assert check["status"] == "fail" and not report["ok"]
    [error] = check["errors"]
    assert (error["file"], error["line"], error["column"]) == (str(project.settings), 4, 3)
    assert "trailing comma" in error["problem"]
    assert report["sandbox"] == "unavailable" and str(project.settings) in report["reason"]
    text = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert text.returncode == 1
    assert f"{project.settings}:4:3" in text.stdout and "settings" in text.stdout.partition("needed and")[2]


@pytest.mark.parametrize("mode", MODES)
async def test_a_prd_check_does_not_run_in_a_sandbox_chosen_from_broken_settings(
    tmp_path: Path, jido_home: Path, mode: str
) -> None:
    """The sandbox's mode comes from the settings: a slip refuses, never falls back to ``auto``."""
    skip_unless(mode)
    broken = jido_home / "settings.json"
    broken.write_text(f'{{"sandbox": {{"mode": "{mode}"}},\n}}\n')
    project = _project(tmp_path, "checks")
    report = await run_checks(str(project.root), [CANARY_COMMAND], jido_home=str(jido_home), timeout_s=120)
    assert not project.canary.exists(), "the check ran"
    [check] = report.checks
    assert not check.ok and check.exit_code is None
    assert "every sandboxed process of this project is refused until its settings are fixed" in check.output
    assert f"{broken}:2:1: invalid JSON: trailing comma" in check.output
