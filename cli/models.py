"""`jidocode models`: the models usable here, the one a conversation gets, and how to choose.

What it reads, never a key's value:

* **configured**: ``JIDO_LLM_MODEL`` in this shell, else ``llm.model`` of the settings files
  (the global ``~/.jido_code/settings.json``, and with ``-p`` the project's when it is trusted);
* **picked**: with nothing configured, the model :func:`~jidocode.shared.llm_choice.choose_model`
  picks from the provider keys in this shell's environment and a local Ollama (probed with a
  short timeout), as the conversation service does from its own environment;
* **running**: what the running conversation service picked when it started (its
  ``$SRV.INFO`` metadata), since ``jidocode up`` may run in another environment than this shell.

It never imports litellm (the CLI starts fast); nothing here calls a model (``jidocode doctor``
asks the endpoint).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from jidocode.shared.llm_choice import (
    MODEL_ENV,
    SETTINGS_KEY,
    choose_model,
    how_to_choose,
    ollama_url,
    provider_statuses,
)

__all__ = ["models", "models_report"]

#: How long the running conversation service gets to answer ``$SRV.INFO``.
INFO_TIMEOUT_S = 3.0


def _configured(root: Path | None, env: dict[str, str], jido_home: Path | None) -> dict[str, Any]:
    """The configured model (or ``None``), its endpoint and where it came from."""
    from jidocode.shared.settings import global_home, load_settings

    settings_file = str(global_home(jido_home) / "settings.json")
    llm = load_settings(root, jido_home=jido_home).settings.llm
    if env.get(MODEL_ENV):
        source = MODEL_ENV
    elif llm.model:
        source = settings_file if root is None else f"{settings_file} or the project's settings"
    else:
        source = None
    return {
        "model": env.get(MODEL_ENV) or llm.model,
        "api_base": env.get("JIDO_LLM_API_BASE") or llm.api_base,
        "from": source,
        "settings_file": settings_file,
    }


async def _running_pick() -> dict[str, Any]:
    """What the running conversation service picked, or why that is not known."""
    import asyncio  # here: asyncio costs tens of milliseconds to a command that never connects

    from jidocode.shared.bus import Bus
    from jidocode.shared.config import Config, running_system

    if running_system() is None and not os.environ.get("NATS_URL"):
        return {"state": "no running system (`jidocode up`)", "picked": None}
    try:
        bus = await asyncio.wait_for(Bus.connect(Config.from_env(), "cli", wait=False), INFO_TIMEOUT_S)
    except Exception as exc:  # no system to ask: this command still says what this shell has
        return {"state": f"cannot reach NATS ({type(exc).__name__})", "picked": None}
    try:
        msg = await bus.nc.request("$SRV.INFO.jidocode-conversation", b"", timeout=INFO_TIMEOUT_S)
        metadata = json.loads(msg.data).get("metadata") or {}
    except Exception as exc:  # no conversation service (or still starting), or not JSON
        return {"state": f"the conversation service did not answer ({type(exc).__name__})", "picked": None}
    finally:
        await bus.close()
    return {
        "state": "answering",
        "picked": metadata.get("llm_picked") or None,
        "because": metadata.get("llm_picked_because"),
    }


def _ask_running() -> dict[str, Any]:
    import asyncio

    return asyncio.run(_running_pick())


def models_report(
    project: str | None = None,
    *,
    env: dict[str, str] | None = None,
    jido_home: Path | None = None,
    ask_system: bool = True,
) -> dict[str, Any]:
    """Everything ``jidocode models`` prints, as data (``--json``)."""
    from jidocode.shared.llm_probe import probe_ollama

    env = dict(os.environ) if env is None else env
    root = Path(os.path.realpath(project)) if project else None
    configured = _configured(root, env, jido_home)
    listed = probe_ollama(ollama_url(env))  # the table shows Ollama's state whatever is picked
    picked = choose_model(env, listed)
    rows = provider_statuses(env, listed)
    running = _ask_running() if ask_system else None
    if running is not None and running["state"] == "answering":  # its environment decides, not ours
        pick: str | None = running["picked"]
    else:
        pick = picked.model if picked else None
    used = configured["model"] or (pick if not configured["api_base"] else None)
    return {
        "configured": configured,
        "picked": None
        if picked is None
        else {"provider": picked.provider, "model": picked.model, "reason": picked.reason},
        "model": used,
        "providers": [row.__dict__ for row in rows],
        "running": running,
        "how_to_choose": {
            "setting": SETTINGS_KEY,
            "settings_file": configured["settings_file"],
            "env": MODEL_ENV,
            "per_conversation": "jidocode chat --model <provider>/<model>",
            "text": how_to_choose(configured["settings_file"]),
        },
    }


def _running_line(running: dict[str, Any]) -> str:
    if running["state"] != "answering":
        return str(running["state"])
    if running["picked"]:
        return f"the conversation service picked {running['picked']} ({running.get('because')})"
    return (
        f"the conversation service picked nothing ({running.get('because')}; `jidocode up` runs without them)"
    )


def _print(report: dict[str, Any]) -> None:
    console = Console(highlight=False, soft_wrap=True)
    configured = report["configured"]
    if configured["model"]:
        where = f" at {configured['api_base']}" if configured["api_base"] else ""
        console.print(
            f"configured: [bold]{escape(configured['model'] + where)}[/] (from {escape(configured['from'])})"
        )
    else:
        console.print(
            f"configured: none ({SETTINGS_KEY} in {escape(configured['settings_file'])}, or {MODEL_ENV})"
        )
    picked = report["picked"]
    unused = " (unused: a model is configured)" if configured["model"] else ""
    if picked:
        console.print(
            f"picked:     {escape(picked['model'])} ({escape(picked['reason'])} in this shell){unused}"
        )
    running = report["running"]
    if running is not None:
        console.print(f"running:    {escape(_running_line(running))}")
    table = Table(title="providers, in the order a model is picked", title_justify="left", box=None)
    for column in ("provider", "usable", "key / endpoint"):
        table.add_column(column)
    table.add_column("model picked", no_wrap=True)
    for row in report["providers"]:
        table.add_row(
            row["provider"],
            "[green]yes[/]" if row["usable"] else "no",
            escape(row["source"]),
            escape(row["model"] or "-"),
        )
    console.print(table)
    if report["model"] is None:
        console.print(f"[yellow]no model for a conversation[/]: {escape(report['how_to_choose']['text'])}")
    else:
        console.print(f"a conversation gets: [bold green]{escape(report['model'])}[/]")
        how = report["how_to_choose"]
        console.print(
            f'to choose another: "llm": {{"model": "<provider>/<model>"}} in {escape(how["settings_file"])}, '
            f"or {MODEL_ENV}=<provider>/<model> where `jidocode up` runs, or `{how['per_conversation']}`"
        )


def models(
    project: str = typer.Option(
        None, "--project", "-p", help="also read this project's settings (used only when it is trusted)"
    ),
    json_out: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """The models usable with the provider keys here, and how to choose one."""
    report = models_report(project)
    if json_out:
        print(json.dumps(report, indent=2))
    else:
        _print(report)
