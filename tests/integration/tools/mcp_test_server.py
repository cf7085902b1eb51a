"""A small MCP server of the tests' own (the official SDK's ``MCPServer``), run over stdio.

Its tools misbehave on purpose: ``fail`` reports an error, ``hang`` never answers, ``crash``
ends the process; ``boot`` tells one run from the next; ``read``/``write`` probe the sandbox.
``--hang-on-start`` never finishes starting; ``--exit-on-start`` exits at once with a message;
``--http <port>`` serves streamable HTTP on 127.0.0.1 instead of stdio (``header`` then answers).
``confirm`` asks the user a yes/no (an elicitation) and says what came back; ``order`` asks a
form of typed fields and returns the values it got as JSON (with their types).
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path
from typing import Annotated, Literal

import anyio
from mcp.server.mcpserver import (
    AcceptedElicitation,
    Context,
    Elicit,
    ElicitationResult,
    Image,
    MCPServer,
    Resolve,
)
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field

BOOT = uuid.uuid4().hex
server = MCPServer("flaky")


@server.tool()
def echo(text: str) -> str:
    """Echo the text back."""
    return text


@server.tool()
def fail(message: str) -> str:
    """Report an error."""
    raise ToolError(message)


@server.tool()
async def hang() -> str:
    """Never answer."""
    await anyio.sleep_forever()
    return "unreachable"


@server.tool()
def crash() -> str:
    """End the server process."""
    os._exit(3)


@server.tool()
def boot() -> str:
    """An id of this run of the server."""
    return BOOT


@server.tool()
def image() -> Image:
    """A tiny PNG."""
    return Image(data=b"\x89PNG\r\n\x1a\nfake", format="png")


@server.tool()
def square(n: int) -> dict[str, int]:
    """Structured content."""
    return {"n": n, "square": n * n}


@server.tool()
def read(path: str) -> str:
    """Read a file (the sandbox decides whether it can)."""
    try:
        return Path(path).read_text()
    except OSError as exc:
        return f"cannot read: {exc.strerror}"


@server.tool()
def write(path: str, text: str) -> str:
    """Write a file (the sandbox decides whether it lands)."""
    try:
        Path(path).write_text(text)
    except OSError as exc:
        return f"cannot write: {exc.strerror}"
    return "written"


@server.tool()
def env(name: str) -> str:
    """One variable of the server's environment."""
    return os.environ.get(name, "<unset>")


@server.tool()
def header(name: str, ctx: Context) -> str:
    """One header of the HTTP request that carried this call (over streamable HTTP)."""
    headers = ctx.headers or {}
    return headers.get(name.lower(), "<none>")


class Confirm(BaseModel):
    approve: bool


def _ask_confirm() -> Elicit[Confirm]:
    return Elicit("Go ahead?", Confirm)


@server.tool()
def confirm(answer: Annotated[ElicitationResult[Confirm], Resolve(_ask_confirm)]) -> str:
    """Ask the user a yes/no (an elicitation); the answer as ``accept:<bool>``, ``decline`` or ``cancel``."""
    return f"accept:{answer.data.approve}" if isinstance(answer, AcceptedElicitation) else answer.action


class Order(BaseModel):
    name: str = Field(description="Who orders")
    count: int = Field(ge=1, le=100)
    ok: bool
    colour: Literal["red", "green", "blue"]


def _ask_order() -> Elicit[Order]:
    return Elicit("Your order?", Order)


@server.tool()
def order(answer: Annotated[ElicitationResult[Order], Resolve(_ask_order)]) -> str:
    """Ask the user a form (an elicitation of typed fields); the answer as JSON, or the action."""
    if isinstance(answer, AcceptedElicitation):
        return json.dumps(answer.data.model_dump())
    return answer.action


if __name__ == "__main__":
    if "--exit-on-start" in sys.argv:
        print("flaky: configured to exit at start", file=sys.stderr)
        sys.exit(5)
    if "--hang-on-start" in sys.argv:
        anyio.run(anyio.sleep_forever)
    if "--http" in sys.argv:  # streamable HTTP on 127.0.0.1:<port>
        server.run("streamable-http", port=int(sys.argv[sys.argv.index("--http") + 1]))
    else:
        server.run()
