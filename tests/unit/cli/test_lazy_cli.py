"""A fast start (issue 25, point 4; decision 0312): ``jidocode --help`` lists every command
without importing any of them, a command imports only what it needs (never litellm, the MCP
SDK, the TUI, the bash parser … for its own start), and every command still runs.

What a process imported is read from ``sys.modules`` of the real CLI as it exits; no timing is
asserted (``bench/cli.py`` prints the figures)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import typer
from typer.testing import CliRunner

from jidocode.cli.lazy import LazyCommand, LazyGroup
from jidocode.cli.main import COMMANDS, app

#: What no command imports before it does its work: each costs 0.1 to 2 s to import.
HEAVY = (
    "litellm",  # only where a model is called (the conversation service's adapter)
    "mcp",  # the MCP SDK: `jidocode mcp` imports it once it found the system
    "acp",  # the ACP SDK: `jidocode acp` imports it once it found the system
    "textual",  # the PRD TUI
    "bashlex",  # the policy's shell parser
    "uvicorn",
    "a2a",
    "opentelemetry.sdk",
    "aiohttp",  # nats-py's websocket transport, the scripted LLM's server
)

AVAILABLE = [entry for entry in COMMANDS if entry.available()]


#: Runs the real CLI (``python -m jidocode.cli.main``) and, as it exits, writes the names of the
#: modules it imported to stderr after a marker.
_CLI_REPORTING_IMPORTS = """
import atexit, runpy, sys
atexit.register(lambda: sys.stderr.write("\\nIMPORTED " + " ".join(sorted(sys.modules)) + "\\n"))
sys.argv[0] = "jidocode"
runpy.run_module("jidocode.cli.main", run_name="__main__", alter_sys=True)
"""


def _imports(*args: str) -> tuple[set[str], subprocess.CompletedProcess[str]]:
    """The modules ``jidocode <args>`` imported, and the finished process."""
    proc = subprocess.run(
        [sys.executable, "-c", _CLI_REPORTING_IMPORTS, *args],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "COLUMNS": "250", "NO_COLOR": "1"},
    )
    marker = proc.stderr.rfind("IMPORTED ")
    assert marker >= 0, proc.stderr[-2000:]
    return set(proc.stderr[marker:].split()[1:]), proc


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


def test_help_lists_every_command_and_imports_none_of_them() -> None:
    modules, proc = _imports("--help")
    assert proc.returncode == 0, proc.stderr[-2000:]
    for entry in AVAILABLE:
        assert f" {entry.name} " in proc.stdout, entry.name
        assert entry.help[:40] in proc.stdout, entry.help
    ours = {m for m in modules if m.startswith("jidocode")}  # (jidocode.cli.main runs as __main__)
    assert ours == {"jidocode", "jidocode.cli", "jidocode.cli.commands", "jidocode.cli.lazy"}
    # not even the bus: nats, pydantic's models, the event catalogue
    assert not {"nats", "pydantic", "jidocode.shared.bus"} & modules
    assert not _heavy(modules)


@pytest.mark.parametrize("entry", AVAILABLE, ids=[e.name for e in AVAILABLE])
def test_a_commands_start_imports_nothing_heavy(entry: LazyCommand) -> None:
    modules, proc = _imports(entry.name, "--help")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert entry.module in modules
    assert not _heavy(modules), f"`jidocode {entry.name}` imports {_heavy(modules)} before it runs"


def test_a_bus_commands_start_loads_the_events_of_the_services_it_calls_only() -> None:
    """``status`` asks the engine: the engine's models, not the catalogue's 117 (decision 0329)."""
    modules, proc = _imports("status", "--help")
    assert proc.returncode == 0, proc.stderr[-2000:]
    events = {m.rsplit(".", 1)[1] for m in modules if m.startswith("jidocode.shared.events.")}
    assert events == {"_base", "common", "engine"}
    assert "nats" in modules  # it is a bus command


@pytest.mark.parametrize("args", [("--help",), ("chat", "--help"), ("conversations", "--help")])
def test_help_is_plain_text_without_rich_help_rendering(args: tuple[str, ...]) -> None:
    """Help is click's plain layout: rich's help renderer (and its markdown) is 0.1 s of start."""
    modules, proc = _imports(*args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("Usage: ")
    assert not {"typer.rich_utils", "rich.markdown"} & modules


def _first_paragraph(text: str | None) -> str:
    return " ".join((text or "").split("\n\n")[0].split())


@pytest.mark.parametrize("entry", AVAILABLE, ids=[e.name for e in AVAILABLE])
def test_the_listed_help_is_the_commands_own(entry: LazyCommand) -> None:
    """The table's one-liner is what the command says of itself (its docstring or group help)."""
    command = entry.load()
    assert command.name == entry.name
    assert entry.help == _first_paragraph(command.help)


def test_a_command_and_a_group_run_once_loaded() -> None:
    runner = CliRunner()
    group = runner.invoke(app, ["contract", "asyncapi", "--help"])
    assert group.exit_code == 0, group.output
    assert "asyncapi" in group.output
    command = runner.invoke(app, ["serve", "no-such-service"])
    assert command.exit_code != 0
    assert isinstance(command.exception, ValueError | SystemExit)


def test_an_unknown_command_is_refused_with_the_closest_names() -> None:
    result = CliRunner().invoke(app, ["stauts"])
    assert result.exit_code == 2
    assert "No such command" in result.output and "'status'" in result.output


def hello() -> None:
    """Say hello."""
    typer.echo("hello")


def bye() -> None:
    """Say bye."""
    typer.echo("bye")


class _Partial(LazyGroup):
    table = (
        LazyCommand("hello", f"{__name__}:hello", "Say hello."),
        LazyCommand("later", "jidocode.cli.not_written_yet:later", "A command that lands later."),
        LazyCommand("bye", f"{__name__}:bye", "Say bye."),
    )


def test_an_entry_whose_module_is_missing_is_left_out() -> None:
    partial = typer.Typer(cls=_Partial, no_args_is_help=True)

    @partial.callback()
    def _root() -> None:
        """A group."""

    runner = CliRunner()
    listing = runner.invoke(partial, ["--help"])
    assert listing.exit_code == 0, listing.output
    assert "hello" in listing.output and "later" not in listing.output
    assert runner.invoke(partial, ["bye"]).output == "bye\n"
    assert runner.invoke(partial, ["hello"]).output == "hello\n"
    # one group: a command once built keeps its place in the listing
    group = typer.main.get_command(partial)
    assert isinstance(group, _Partial)
    ctx = typer.Context(group)
    assert group.get_command(ctx, "bye") is not None
    assert group.list_commands(ctx) == ["hello", "bye"]
    missing = runner.invoke(partial, ["later"])
    assert missing.exit_code == 2 and "No such command 'later'" in missing.output
