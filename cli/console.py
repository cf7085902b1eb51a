"""`jidocode console`: the web console's login URL, once the gateway there proved it is ours.

``jidocode up`` writes its gateway's base URL into ``<data home>/up.json`` once the gateway
answers as its own; this command reads it and prints ``<base>/login?token=<token>`` (with
``--open``, hands it to a browser too). Before the token is printed or sent anywhere, the
program answering on that port must prove it holds the token without seeing it:
``GET /healthz?challenge=<nonce>`` answers an HMAC of a fresh nonce keyed by the token
(:func:`jidocode.services.gateway.auth.identity_proof`). A port taken over by another program
(the gateway moved, or never got it) fails the proof, and the URL is not shown (decision 0309).
"""

from __future__ import annotations

import asyncio
import hmac
import os
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import typer

from jidocode.services.gateway.auth import identity_proof, token_file
from jidocode.shared.config import default_data_home, running_file, running_system

__all__ = ["GatewayCheck", "check_gateway", "console", "find_console", "gateway_token", "login_url"]

#: Seconds one ``/healthz`` request may take.
HTTP_TIMEOUT = 5.0


@dataclass(frozen=True)
class GatewayCheck:
    """What answers on a gateway's base URL: ``ours`` (it proved it holds the token),
    ``foreign`` (something answers without the proof) or ``silent`` (nothing answers)."""

    base_url: str
    state: Literal["ours", "foreign", "silent"]
    #: What answered instead (``foreign``) or why nothing did (``silent``); empty for ``ours``.
    detail: str = ""

    @property
    def ours(self) -> bool:
        return self.state == "ours"

    def problem(self) -> str:
        """The check as a sentence for a person (never with the token)."""
        where = self.base_url.removeprefix("http://")
        if self.state == "foreign":
            return (
                f"something else answers on {where} (not this system's gateway: it cannot prove it "
                f"holds the gateway token; {self.detail}): the login URL is not shown"
            )
        if self.state == "silent":
            return f"the gateway does not answer on {where} ({self.detail})"
        return f"the gateway answers on {where}"


async def check_gateway(base_url: str, token: str, *, timeout: float = HTTP_TIMEOUT) -> GatewayCheck:
    """Ask ``base_url/healthz`` to prove it holds ``token`` (the token itself is not sent)."""
    import httpx  # only the commands that talk HTTP pay for it

    nonce = secrets.token_urlsafe(32)
    # trust_env=False: straight to the address, never through a proxy of the environment
    async with httpx.AsyncClient(timeout=timeout, trust_env=False, follow_redirects=False) as http:
        try:
            answer = await http.get(f"{base_url}/healthz", params={"challenge": nonce})
        except httpx.HTTPError as exc:
            return GatewayCheck(base_url, "silent", f"{type(exc).__name__}: {exc}".rstrip(": "))
    try:
        proof = answer.json().get("proof")
    except (ValueError, AttributeError):
        proof = None
    if isinstance(proof, str) and hmac.compare_digest(proof, identity_proof(token, nonce)):
        return GatewayCheck(base_url, "ours")
    why = "a wrong proof" if isinstance(proof, str) else "no proof"
    return GatewayCheck(base_url, "foreign", f"HTTP {answer.status_code} with {why}")


def login_url(base_url: str, token: str) -> str:
    """The console's login URL: ``/login`` sets the token's cookie and goes to ``/``."""
    return f"{base_url}/login?token={token}"


def gateway_token(data_home: Path | None = None) -> str | None:
    """The gateway token ``up`` uses here: ``JIDO_GATEWAY_TOKEN``, else the stored one (never made
    here: ``up`` makes it); ``None`` when there is none."""
    configured = os.environ.get("JIDO_GATEWAY_TOKEN", "").strip()
    if configured:
        return configured
    try:
        return token_file(data_home or default_data_home()).read_text().strip() or None
    except OSError:
        return None


def find_console(data_home: Path | None = None) -> tuple[GatewayCheck | None, str]:
    """The gateway of the ``jidocode up`` running on ``data_home``, checked (:func:`check_gateway`);
    ``None`` and why (a sentence) when there is none to check."""
    running = running_system(data_home)
    if running is None:
        return None, (
            f"no `jidocode up` runs on this data home ({running_file(data_home)} is not there or stale): "
            "start one with `jidocode up`"
        )
    if running.gateway is None:
        return None, (
            f"the `jidocode up` running here (pid {running.pid}) shows no gateway: it is still starting "
            "(its terminal says when the gateway answers), or it runs without one (--only)"
        )
    token = gateway_token(data_home)
    if token is None:
        return (
            None,
            f"no gateway token in {token_file(data_home or default_data_home())} nor JIDO_GATEWAY_TOKEN",
        )
    return asyncio.run(check_gateway(running.gateway, token)), ""


def _open_in_browser(url: str) -> bool:
    """Hand ``url`` to the browser :mod:`webbrowser` finds (``BROWSER`` first); ``False``: none."""
    import webbrowser  # only --open needs it

    try:
        return webbrowser.open(url)
    except webbrowser.Error:
        return False


def _say(text: str) -> None:
    """One line for the person on stderr (plain text: it may quote what a foreign program sent)."""
    typer.echo(text, err=True)


def console(
    open_browser: bool = typer.Option(False, "--open", help="open the URL in a browser too"),
) -> None:
    """Print the web console's login URL (--open: open it in a browser).

    The URL is that of the gateway of the ``jidocode up`` running on this data home, shown only
    once the program answering there proved it holds the gateway token.
    """
    checked, why = find_console()
    token = gateway_token()
    if checked is None or token is None:
        _say(why)
        raise typer.Exit(1)
    if not checked.ours:
        hint = (
            "; if `jidocode up` runs with JIDO_GATEWAY_TOKEN, set it here too"
            if checked.state == "foreign"
            else ""
        )
        _say(checked.problem() + hint)
        raise typer.Exit(1)
    url = login_url(checked.base_url, token)
    sys.stdout.write(url + "\n")  # one line, never wrapped: it is copied or clicked
    sys.stdout.flush()
    if open_browser and not _open_in_browser(url):
        _say("no browser found here: open the URL above in yours (or set BROWSER to a browser command)")
