"""The tool runner's MCP client as the client under test of the MCP conformance suite.

The suite (``@modelcontextprotocol/conformance``, Node >= 22) starts a scenario server and runs
a command with the server's URL as its last argument and the scenario's name in
``MCP_CONFORMANCE_SCENARIO``::

    conformance client --scenario initialize \\
        --command ".venv/bin/python -m tests.contract.mcp_client_conformance"

This command does what the tool runner and its user do with an HTTP server of a ``.mcp.json``,
through the real code (:class:`~jidocode.services.tool_runner.mcp.connection.ServerConnection`,
:func:`~jidocode.services.tool_runner.mcp.login.login`), nothing of the SDK's called directly:

- connect (the handshake and the tool list), then call the first tool with ``{"a": 2, "b": 3}``
  (what the suite's own example client does);
- a server's elicitation is answered yes, as a user approving the question would
  (:mod:`~jidocode.services.tool_runner.mcp.elicit` fills the form's defaults);
- where the server wants a login (``mcp_login_required``), the user's login is run with a
  scripted browser: the authorization URL is requested without following its redirect (the
  suite's authorization server approves at once) and the redirect is delivered to the login's
  loopback callback; then the runner connects again with the stored login. Logins live in a
  temporary data home. A client the scenario says is pre-registered (``MCP_CONFORMANCE_CONTEXT``:
  ``client_id``, ``client_secret``) is given to the login, as ``--client-id`` gives it.

It exits 0 when the scenario's steps completed and 1 with the reason on stderr otherwise; the
suite's own checks decide the scenario. ``tests/contract/test_mcp_client_conformance.py`` runs
the scenarios that pass; ``docs/mcp-servers.md`` ("Conformance") lists them all.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Final

import httpx

from jidocode.services.tool_runner.approvals import Reply
from jidocode.services.tool_runner.mcp.config import HttpServer
from jidocode.services.tool_runner.mcp.connection import ServerConnection
from jidocode.services.tool_runner.mcp.login import PreRegistered, login
from jidocode.services.tool_runner.mcp.oauth import LoginRequired, TokenFile, login_path
from jidocode.services.tool_runner.mcp.sandboxed import LaunchSpec
from jidocode.shared.errors import JidoError

__all__ = ["run_scenario"]

#: The server's name in the runner (as a ``.mcp.json`` would give it).
SERVER: Final = "conformance"
#: A step's time (the suite gives a scenario 30 s).
STEP_TIMEOUT_S: Final = 20.0
#: How many logins one scenario may need (a step-up asks for a second one).
MAX_LOGINS: Final = 3


async def _approve(
    _question_id: str, _args: dict[str, Any], _reason: str, _form: dict[str, Any] | None = None
) -> Reply:
    """The user approves every question, giving no content (an elicitation is accepted with its
    form's defaults)."""
    return Reply("approve_once")


async def _scripted_browser(authorization_url: str) -> None:
    """The user's browser: open the authorization URL, follow its one redirect to the callback."""
    async with httpx.AsyncClient(follow_redirects=False, timeout=STEP_TIMEOUT_S) as http:
        answer = await http.get(authorization_url)
        location = answer.headers.get("location")
        if answer.status_code not in (301, 302, 303, 307, 308) or not location:
            raise RuntimeError(
                f"the authorization server answered {answer.status_code} with no redirect: {answer.text[:300]}"
            )
        await http.get(location)


async def _use(connection: ServerConnection) -> None:
    """Connect, list the tools, call the first one with the suite's usual arguments."""
    await connection.ensure(STEP_TIMEOUT_S)
    if connection.tools:
        result = await connection.call(
            connection.tools[0].name, {"a": 2, "b": 3}, STEP_TIMEOUT_S, ask=_approve
        )
        print(f"{connection.tools[0].name}: is_error={result.is_error}", flush=True)


def _pre_registered(context: str | None) -> PreRegistered | None:
    """The client the scenario's context names (``client_id``, ``client_secret``), if any."""
    given = json.loads(context) if context else {}
    if not isinstance(given, dict) or "client_id" not in given:
        return None
    return PreRegistered(client_id=given["client_id"], client_secret=given.get("client_secret"))


async def run_scenario(url: str, data_home: Path, client: PreRegistered | None = None) -> None:
    """Drive the scenario server at ``url`` as the tool runner and its user would (``client``: a
    pre-registered client the user logs in with)."""
    config = HttpServer(type="http", url=url)
    root = data_home / "project"
    root.mkdir(exist_ok=True)
    store = TokenFile(login_path(data_home, SERVER, url), url)
    where = LaunchSpec(command="/bin/false", root=str(root))
    for _ in range(MAX_LOGINS):
        connection = ServerConnection(
            SERVER, config, where=where, start_timeout_s=STEP_TIMEOUT_S, login=store
        )
        try:
            await _use(connection)
            return
        except LoginRequired as exc:
            print(f"login needed: {exc.message}", flush=True)
        finally:
            await connection.close()
        await login(url, {}, store, show=_scripted_browser, timeout_s=STEP_TIMEOUT_S, client=client)
    raise RuntimeError(f"still no access after {MAX_LOGINS} logins")


def main() -> int:
    url = sys.argv[-1]
    print(f"scenario {os.environ.get('MCP_CONFORMANCE_SCENARIO', '?')} at {url}", flush=True)
    with tempfile.TemporaryDirectory(prefix="mcp-conformance-") as tmp:
        try:
            client = _pre_registered(os.environ.get("MCP_CONFORMANCE_CONTEXT"))
            asyncio.run(run_scenario(url, Path(tmp), client))
        except JidoError as exc:
            print(f"{exc.error_type}: {exc.message}", file=sys.stderr)
            return 1
        except Exception as exc:
            print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
