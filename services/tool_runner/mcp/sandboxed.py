"""Run one MCP stdio server inside the OS sandbox: ``python -m …mcp.sandboxed '<spec json>'``.

The SDK's ``stdio_client`` starts this module with the server's pipes as its stdin and stdout.
It puts the server's command through :func:`jidocode.shared.sandbox.prepare` — the launch every
bash call gets: bubblewrap or Landlock, the scrubbed environment, the protected-path guard —
and runs it with those pipes, then closes the launch (the guard's repair) when the server ends.
Why a process of its own: bubblewrap needs the pinned descriptors ``prepare`` opens
(``pass_fds``), which ``stdio_client`` cannot hand to a child (docs/decisions/0206).

The server's own ``env`` of ``.mcp.json`` is set inside the sandbox by ``env NAME=VALUE …``
(the sandbox clears the environment to its allowlist). A launch the sandbox refuses (none works
here) exits with :data:`REFUSED` after one line on stderr saying why.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field

from jidocode.shared import sandbox
from jidocode.shared.errors import PermissionDenied

__all__ = ["REFUSED", "LaunchSpec", "main", "server_argv"]

#: Exit status when the sandbox refuses the launch.
REFUSED: Final = 78


class LaunchSpec(BaseModel):
    """What to run, and the project whose sandbox it runs in."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    command: str
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    root: str
    data_dir: str = ".jido"
    jido_home: str | None = None
    additional_directories: list[str] = Field(default_factory=list)


def server_argv(spec: LaunchSpec) -> list[str]:
    """The command line inside the sandbox: ``env NAME=VALUE … command args`` (pure)."""
    if "=" in spec.command:
        raise ValueError("command: must not contain '=' (it would be read as a variable)")
    pairs = [f"{k}={v}" for k, v in sorted(spec.env.items())]
    return ["/usr/bin/env", *pairs, spec.command, *spec.args] if pairs else [spec.command, *spec.args]


async def _run(spec: LaunchSpec) -> int:
    try:
        launch = await sandbox.prepare(
            server_argv(spec),
            root=spec.root,
            data_dir=spec.data_dir,
            jido_home=spec.jido_home,
            additional_directories=spec.additional_directories,
            # it runs as long as its project: the protected paths are put back when it stops, as
            # before; a watch would undo the user's own edits of them all that time (0307)
            watch=False,
        )
    except PermissionDenied as exc:
        print(f"jidocode: the MCP server is refused by the sandbox: {exc.message}", file=sys.stderr)
        return REFUSED
    try:
        proc = await asyncio.create_subprocess_exec(
            *launch.argv, cwd=launch.cwd, env=launch.env, pass_fds=launch.pass_fds
        )
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, _forward, proc, sig)
        return await proc.wait()
    except OSError as exc:
        print(f"jidocode: cannot start the MCP server: {exc}", file=sys.stderr)
        return 127
    finally:
        await launch.close()


def _forward(proc: asyncio.subprocess.Process, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(sig)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(
            "usage: python -m jidocode.services.tool_runner.mcp.sandboxed '<launch spec JSON>'",
            file=sys.stderr,
        )
        return 2
    raw: Any = json.loads(args[0])
    return asyncio.run(_run(LaunchSpec.model_validate(raw)))


if __name__ == "__main__":
    sys.exit(main())
