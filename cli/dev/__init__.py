"""`jidocode dev …` commands (mounted by cli/main.py as ``jidocode dev``)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import typer

from .scripted_llm import Reply, ScriptedLlm, echo_responder, one_tool_responder

__all__ = ["app"]

app = typer.Typer(help="dev commands", no_args_is_help=True)


@app.callback()
def _dev() -> None:
    """Developer tools: a scripted LLM for demos and tests."""


@app.command("scripted-llm")
def scripted_llm(
    port: int = typer.Option(0, help="port on 127.0.0.1 (0: a free one)"),
    host: str = typer.Option("127.0.0.1", help="address to bind (loopback by default)"),
    mode: str = typer.Option("echo", help="when the script is empty: echo | one-tool | exhausted"),
    script: Path | None = typer.Option(
        None,
        help='a JSON file: a list of replies used in order, e.g. [{"kind": "tool_calls", "tool_calls": '
        '[{"name": "read_file", "arguments": {"path": "README.md"}}]}, {"kind": "text", "text": "hi"}, '
        '{"kind": "error", "status": 429}] (all fields: docs/llm.md)',
    ),
    api_key: str | None = typer.Option(None, help="require this bearer key (else 401)"),
) -> None:
    """Run the scripted OpenAI-compatible server until Ctrl-C.

    Use it from a chat with ``jidocode chat DIR --model openai/scripted
    --api-base <printed url>`` (add ``--api-key-env VAR`` with ``--api-key``).
    """
    responders = {
        "echo": echo_responder,
        "one-tool": one_tool_responder("list_dir", path="."),
    }
    if mode not in (*responders, "exhausted"):
        raise typer.BadParameter(f"unknown mode {mode!r}: echo | one-tool | exhausted")
    replies: list[Reply] = []
    if script is not None:
        raw = json.loads(script.read_text(encoding="utf-8"))
        if not isinstance(raw, list):
            raise typer.BadParameter("the script must be a JSON list of replies")
        replies = [Reply.model_validate(item) for item in raw]

    async def _run() -> None:
        server = ScriptedLlm(host=host, port=port, api_key=api_key)
        if mode in responders:
            server.responder = responders[mode]
        server.script(*replies)
        await server.start()
        typer.echo(f"scripted LLM listening on {server.api_base}")
        base = f"--model openai/scripted --api-base {server.api_base}"
        key = " --api-key-env VAR  (VAR holding the key, set where `up` runs)" if api_key else ""
        typer.echo(f"  chat:  jidocode chat <dir> {base}{key}")
        typer.echo(f"  SDK:   JidoClient.connect(dir, model='openai/scripted', api_base='{server.api_base}')")
        typer.echo(
            f"  every conversation: JIDO_LLM_MODEL=openai/scripted JIDO_LLM_API_BASE={server.api_base} jidocode up"
        )
        try:
            await asyncio.Event().wait()
        finally:
            await server.stop()

    try:
        asyncio.run(_run())
    except KeyboardInterrupt:
        typer.echo("stopped")
