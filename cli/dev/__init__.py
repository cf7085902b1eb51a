"""`jidocode dev …` commands (mounted by cli/main.py as ``jidocode dev``)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import typer
from pydantic import ValidationError

from .scripted_llm import Reply, ScriptedLlm, echo_responder, one_tool_responder

__all__ = ["app"]

app = typer.Typer(rich_markup_mode=None, help="dev commands", no_args_is_help=True)


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
        replies = _read_script(script)

    async def _run() -> None:
        server = ScriptedLlm(host=host, port=port, api_key=api_key)
        if mode in responders:
            server.responder = responders[mode]
        server.script(*replies)
        await server.start()
        typer.echo(f"scripted LLM listening on {server.api_base}")
        base = f"--model openai/scripted --api-base {server.api_base}"
        key = (
            " --api-key-env VAR  (VAR holding the key, set where `up` runs and listed in the user's "
            "llm.client_key_envs)"
            if api_key
            else ""
        )
        typer.echo(f"  chat:  jidocode chat <dir> {base}{key}")
        typer.echo(
            f"  SDK:   JidoClient.connect(project_dir=dir, model='openai/scripted', api_base='{server.api_base}')"
        )
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


def _read_script(path: Path) -> list[Reply]:
    """The replies of a ``--script`` file; a clear ``BadParameter`` naming the problem, never a traceback."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise typer.BadParameter(
            f"cannot read {path}: {exc.strerror or exc}", param_hint="--script"
        ) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise typer.BadParameter(f"{path} is not JSON: {exc}", param_hint="--script") from None
    if not isinstance(raw, list):
        raise typer.BadParameter(f"{path} must hold a JSON list of replies", param_hint="--script")
    replies = []
    for i, item in enumerate(raw):
        try:
            replies.append(Reply.model_validate(item))
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'reply'}: {e['msg']}" for e in exc.errors()
            )
            raise typer.BadParameter(f"{path}: reply {i}: {problems}", param_hint="--script") from None
    return replies
