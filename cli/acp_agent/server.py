"""Serving the agent on stdio: stdout carries protocol messages and nothing else.

Before the first message, the command's real stdout is set aside for the protocol and file
descriptor 1 (and ``sys.stdout``) becomes stderr, so whatever else writes to stdout (a library's
print, a child process) lands on stderr instead of corrupting the editor's JSON-RPC stream.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import BinaryIO

from acp import run_agent

from jidocode.shared.bus import Bus
from jidocode.shared.config import Config

from .agent import JidoAcpAgent

__all__ = ["serve_stdio"]

#: The longest message read from the editor (a prompt with embedded files).
STDIO_LIMIT = 50 * 1024 * 1024


def _protocol_stdout() -> BinaryIO:
    """The real stdout, for the protocol alone; fd 1 and ``sys.stdout`` go to stderr from now on."""
    sys.stdout.flush()
    protocol = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return protocol


async def _streams(protocol_out: BinaryIO) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=STDIO_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    transport, protocol = await loop.connect_write_pipe(
        lambda: asyncio.streams.FlowControlMixin(loop), protocol_out
    )
    return reader, asyncio.StreamWriter(transport, protocol, None, loop)


async def serve_stdio(bus: Bus, config: Config) -> None:
    """Answer the editor on stdin/stdout until it closes stdin."""
    reader, writer = await _streams(_protocol_stdout())
    agent = JidoAcpAgent(bus, config)
    try:
        await run_agent(agent, writer, reader)  # type: ignore[arg-type]
    finally:
        await agent.close()
