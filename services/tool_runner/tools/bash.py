"""bash: run a command in the project root, inside the OS sandbox (:mod:`jidocode.shared.sandbox`).

- cwd is the project root (never a tool argument);
- the command runs under bubblewrap or Landlock, whichever this machine and
  the user's global ``sandbox.mode`` give; where neither works it is refused,
  unless the user's global settings turned the sandbox off;
- the environment is scrubbed to an allowlist (no NATS credentials, no LLM
  keys of the runner reach the command) plus git's pinned configuration;
- its only network is the call's pass of the egress proxy, when it has one (the proxy variables
  point at it; a program ignoring them has no way out); without a pass, none;
- it runs through :func:`jidocode.shared.sandbox.run_command` (shared with the PRD loop's checks):
  stdin is ``/dev/null``; stdout and stderr are merged and capped;
- everything the command starts ends with the call, ``setsid`` children
  included: under bubblewrap the call's pid namespace ends, under Landlock the
  launcher (a child subreaper) kills what is left; without a sandbox the
  process group is killed (a ``setsid`` child escapes it);
- a protected path the command changes is put back at once, the command is stopped and
  the call fails (``permission_denied``; ``details.protected_restored`` names the paths,
  ``details.output`` is the command's output, untouched).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from typing import Any, Final

from jidocode.shared import sandbox
from jidocode.shared.errors import PermissionDenied
from jidocode.shared.policy import Policy
from jidocode.shared.sandbox import run_command
from jidocode.shared.tools import specs
from jidocode.shared.tools.inputs import BashInput

from .base import BuiltinTool, ToolContext

__all__ = ["BASH", "ENV_ALLOWLIST", "run_command", "sandbox_status", "scrubbed_env"]

#: Variables of the runner's environment that reach the command (everything else is dropped).
ENV_ALLOWLIST: Final = sandbox.ENV_ALLOWLIST

_SHELL: Final = ("/bin/bash", "--noprofile", "--norc", "-c")


def scrubbed_env(source: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of an unsandboxed command: the allowlist of ``source``, its home, git's pins."""
    src = os.environ if source is None else source
    return sandbox.sandbox_env(
        src, home=src.get("HOME") or os.path.expanduser("~"), tmpdir=src.get("TMPDIR") or "/tmp"
    )


def _where(policy: Policy) -> dict[str, Any]:
    box = policy.sandbox
    return {
        "root": box.root,
        "data_dir": box.data_dir,
        "jido_home": box.jido_home,
        "additional_directories": box.additional_directories,
    }


async def sandbox_status(name: str, policy: Policy) -> sandbox.Choice | None:
    """The sandbox a call of tool ``name`` runs in (``None``: the tool starts no process)."""
    if name != BASH.name:
        return None
    where = _where(policy)
    caps = await asyncio.to_thread(sandbox.detect)
    settings = await asyncio.to_thread(
        sandbox.effective_settings, where["root"], jido_home=where["jido_home"], data_dir=where["data_dir"]
    )
    return sandbox.choose(settings, caps)


def _egress(ctx: ToolContext) -> sandbox.Egress | None:
    """The call's pass of the egress proxy, as the sandbox's one way out (``None``: no network)."""
    issued = ctx.egress
    if issued is None:
        return None
    return sandbox.Egress(socket=issued.unix_path, port=issued.tcp_port, proxy_url=issued.proxy_url())


async def _bash(args: BashInput, ctx: ToolContext) -> dict[str, Any]:
    timeout = min(args.timeout_s, ctx.timeout_s) if args.timeout_s else ctx.timeout_s
    launch = await sandbox.prepare([*_SHELL, args.command], **_where(ctx.policy), egress=_egress(ctx))
    try:
        result = await run_command(
            launch.argv,
            cwd=launch.cwd,
            timeout_s=timeout,
            output_cap=ctx.output_cap,
            env=launch.env,
            pass_fds=launch.pass_fds,
            graceful=launch.graceful_stop,
            info_fd=launch.info_fd,
            on_spawn=launch.attach,
        )
    finally:
        repaired = await launch.close()
    result["sandbox"] = launch.mode
    if repaired:
        # the call fails; the output stays the command's own (a script's JSON stays JSON)
        raise PermissionDenied(
            f"bash: the command changed protected paths ({', '.join(repaired)}); they were put back "
            "and the command was stopped",
            details={
                **result,
                "sandbox": "protected_changed",
                "mode": launch.mode,
                "protected_restored": repaired,
            },
        )
    return result


BASH = BuiltinTool(specs.BASH, _bash)  # type: ignore[arg-type]
