"""bash: run a command in the project root, in its own process group.

- cwd is the project root (never a tool argument);
- the environment is scrubbed to an allowlist (no tokens or keys of the
  runner's own environment leak into the command) plus safe git defaults;
- stdin is ``/dev/null``; stdout and stderr are merged and capped;
- the command runs in a new session (process group): on timeout, on
  cancellation and when the shell exits, the **whole group** is killed, so a
  ``sleep 1000 &`` left behind does not survive the call. A process that
  starts a session of its own (``setsid``) leaves the group: only an OS
  sandbox (cgroups) can hold that, see docs/security.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Mapping
from typing import Any, Final

from jidocode.shared.errors import RequestTimeout
from jidocode.shared.tools import specs
from jidocode.shared.tools.inputs import BashInput

from .base import BuiltinTool, ToolContext, cap_text

__all__ = ["BASH", "ENV_ALLOWLIST", "scrubbed_env"]

#: Variables of the runner's environment that reach the command (everything else is dropped).
ENV_ALLOWLIST: Final[frozenset[str]] = frozenset(
    {"PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "SHELL"}
)
_FIXED_ENV: Final[dict[str, str]] = {
    "TERM": "dumb",
    "NO_COLOR": "1",
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "GIT_TERMINAL_PROMPT": "0",
    # never let git pick up a bare repository a tool wrote into the tree
    "GIT_CONFIG_COUNT": "1",
    "GIT_CONFIG_KEY_0": "safe.bareRepository",
    "GIT_CONFIG_VALUE_0": "explicit",
}
_DEFAULT_PATH: Final = "/usr/local/bin:/usr/bin:/bin"


def scrubbed_env(source: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a bash call: the allowlist of ``source`` plus fixed safe values."""
    src = os.environ if source is None else source
    env = {k: v for k, v in src.items() if k in ENV_ALLOWLIST}
    env.setdefault("PATH", _DEFAULT_PATH)
    env.update(_FIXED_ENV)
    return env


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


async def _drain(stream: asyncio.StreamReader, cap: int, sink: list[bytes], total: list[int]) -> None:
    kept = 0
    while True:
        chunk = await stream.read(65536)
        if not chunk:
            return
        total[0] += len(chunk)
        if kept < cap + 1:
            piece = chunk[: cap + 1 - kept]
            sink.append(piece)
            kept += len(piece)


async def run_command(
    command: str, *, cwd: str, timeout_s: float, output_cap: int, env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Run ``command`` under ``bash -c``; kill its process group on timeout or cancellation."""
    started = time.monotonic()
    loop = asyncio.get_running_loop()
    # Our own pipe, not asyncio.subprocess.PIPE: asyncio's wait() would not return before every
    # holder of the pipe (a backgrounded grandchild) closed it, hiding the shell's exit.
    rfd, wfd = os.pipe()
    try:
        proc = await asyncio.create_subprocess_exec(
            "/bin/bash",
            "--noprofile",
            "--norc",
            "-c",
            command,
            cwd=cwd,
            env=dict(env) if env is not None else scrubbed_env(),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=wfd,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
    except BaseException:
        os.close(rfd)
        raise
    finally:
        os.close(wfd)
    pgid = proc.pid  # start_new_session: the shell leads a new group of its own id
    stream = asyncio.StreamReader(limit=1 << 20)
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(stream), os.fdopen(rfd, "rb", buffering=0)
    )
    sink: list[bytes] = []
    total = [0]
    reader = asyncio.create_task(_drain(stream, output_cap, sink, total))
    timed_out = False
    try:
        try:
            await asyncio.wait_for(proc.wait(), timeout=timeout_s)
        except TimeoutError:
            timed_out = True
        # the shell is gone (or timed out): nothing of its group may outlive the call
        _kill_group(pgid)
        await proc.wait()
        try:
            await asyncio.wait_for(reader, timeout=5.0)
        except TimeoutError:
            # a grandchild in a session of its own still holds the pipe: stop reading
            reader.cancel()
    finally:
        if proc.returncode is None or not reader.done():
            _kill_group(pgid)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
            with contextlib.suppress(ProcessLookupError):
                await proc.wait()
        transport.close()
    output, truncated = cap_text(b"".join(sink), output_cap)
    result: dict[str, Any] = {
        "exit_code": proc.returncode,
        "output": output,
        "truncated": truncated,
        "output_bytes": total[0],
        "duration_ms": round((time.monotonic() - started) * 1000, 1),
    }
    if timed_out:
        raise RequestTimeout(
            f"command timed out after {timeout_s:g} s; its process group was killed", details=result
        )
    return result


async def _bash(args: BashInput, ctx: ToolContext) -> dict[str, Any]:
    timeout = min(args.timeout_s, ctx.timeout_s) if args.timeout_s else ctx.timeout_s
    return await run_command(args.command, cwd=ctx.policy.root, timeout_s=timeout, output_cap=ctx.output_cap)


BASH = BuiltinTool(specs.BASH, _bash)  # type: ignore[arg-type]
