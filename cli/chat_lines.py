"""What ``jidocode chat`` prints and how it reads a typed line: pure functions, no I/O.

:mod:`.chat` owns the terminal, the prompt and the client; this module only turns values (a typed
line, a tool call's arguments or result, an event, the project's commands, a trust state) into
text. Text from the model or the project is escaped or stripped of control characters here.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any, Final, Literal

from rich.markup import escape

from jidocode.client import ApprovalRequest, RenderedCommand, parse_slash_command
from jidocode.shared.envelope import Envelope

from .chat_markdown import strip_controls

__all__ = [
    "BUILTINS",
    "BUILTIN_HELP",
    "ChatInput",
    "builtins_line",
    "command_line",
    "denied_line",
    "envelope_json",
    "help_lines",
    "history_line",
    "outcome",
    "parse_input",
    "preview",
    "trust_command",
    "trust_line",
    "trust_question",
]

_ARG_PREVIEW = 60

#: The chat's own commands (``/exit`` is ``/quit``); every other ``/name`` is the project's
#: (a project command of one of these names is shadowed by the chat's own).
BUILTINS: Final = ("help", "usage", "reset", "resume", "history", "quit", "exit", "compact", "rewind", "prd")
#: What ``/help`` says of each built-in command.
BUILTIN_HELP: Final = (
    ("/help", "this list"),
    ("/usage", "tokens used against the context window, calls and cost"),
    ("/reset", "start a fresh conversation"),
    ("/resume", "go on with a cancelled conversation"),
    ("/history", "the conversation so far"),
    ("/compact [what to keep]", "summarise the older part of the conversation now"),
    ("/rewind [n] [what]", "go back before a message: its files, the conversation, or both"),
    ("/prd [run|status|pause <name>]", "the project's PRD loops: list, start and follow, look, pause"),
    ("/quit", "leave (also /exit, Ctrl-D)"),
)


@dataclass(frozen=True)
class ChatInput:
    """What a line typed at the chat is.

    ==========  ===========================================================
    ``empty``   nothing (blank line)
    ``builtin`` one of :data:`BUILTINS` (``name``; ``/compact`` and ``/rewind`` read ``arguments``)
    ``command`` a project slash command: ``name`` and ``arguments``
    ``unknown`` a lone ``/word`` that cannot name a command (``name`` = the word)
    ``message`` anything else: sent to the model as written (``text``)
    ==========  ===========================================================
    """

    kind: Literal["empty", "builtin", "command", "unknown", "message"]
    text: str = ""
    name: str = ""
    arguments: str = ""


def parse_input(line: str) -> ChatInput:
    """Classify one typed line (pure). A line that only starts with a slash, such as
    ``/etc/hosts is empty?``, is a message; a lone ``/Word`` is an unknown command."""
    text = line.strip()
    if not text:
        return ChatInput("empty")
    command = parse_slash_command(text)
    if command is not None:
        kind: Literal["builtin", "command"] = "builtin" if command.name in BUILTINS else "command"
        return ChatInput(kind, text=text, name=command.name, arguments=command.arguments)
    if text.startswith("/") and len(text.split()) == 1:
        return ChatInput("unknown", text=text, name=text[1:])
    return ChatInput("message", text=text)


def builtins_line() -> str:
    return " ".join(f"/{name}" for name in BUILTINS if name != "exit")


def preview(args: dict[str, Any]) -> str:
    parts = []
    for key, value in args.items():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        text = " ".join(str(text).split())
        if len(text) > _ARG_PREVIEW:
            text = text[: _ARG_PREVIEW - 1] + "…"
        parts.append(f"{key}={text}")
    return ", ".join(parts)


def outcome(value: Any) -> str:
    """One short line about a tool's result data."""
    if isinstance(value, dict):
        if "exit_code" in value:
            return f"exit {value['exit_code']}"
        if "total_lines" in value:
            return f"lines {value.get('start_line')}-{value.get('end_line')} of {value['total_lines']}"
        if "bytes" in value:
            return f"{value['bytes']} bytes written" + (" (new file)" if value.get("created") else "")
        if "replacements" in value:
            return f"{value['replacements']} replacement(s)"
        for key in ("entries", "matches", "files", "paths"):
            if isinstance(value.get(key), list):
                more = "+" if value.get("truncated") else ""
                return f"{len(value[key])}{more} {key}"
        return f"{len(value)} fields"
    if isinstance(value, list):
        return f"{len(value)} items"
    if isinstance(value, str):
        return f"{len(value.splitlines())} lines"
    return "ok"


def command_line(rendered: RenderedCommand) -> str:
    """The line (markup) saying which project command runs: its name, arguments, and the first
    line of the prompt sent as the user's message."""
    first = next((ln.strip() for ln in rendered.prompt.splitlines() if ln.strip()), "")
    if len(first) > _ARG_PREVIEW:
        first = first[: _ARG_PREVIEW - 1] + "…"
    args = f" {rendered.arguments}" if rendered.arguments else ""
    return (
        f"[magenta]» /{escape(rendered.name)}[/]{escape(args)} [dim](project command: "
        f"{len(rendered.prompt)} characters sent as your message: {escape(first)})[/]"
    )


def denied_line(request: ApprovalRequest, *, asked: bool) -> str:
    """What chat prints when it denies an ask itself: why, and the policy's reason (which names
    the rule that would allow the call without asking)."""
    why = "nobody can answer: stdin is not a terminal" if asked else "--approve no"
    reason = request.reason or "it needs approval"
    return strip_controls(
        f"denied {request.tool}({preview(request.args)}) ({why}): {reason}; "
        "--approve yes approves every asked call of this chat"
    )


def envelope_json(env: Envelope) -> str:
    return json.dumps(
        {
            "id": env.id,
            "type": env.type,
            "time": env.time,
            "source": env.source,
            "project_id": env.project_id,
            "conversation_id": env.conversation_id,
            "correlation_id": env.correlation_id,
            "data": env.data,
        },
        ensure_ascii=False,
        default=str,
    )


def trust_command(root: str) -> str:
    """The exact command that trusts ``root`` (quoted for a shell)."""
    return f"jidocode projects trust {shlex.quote(root)}"


def trust_line(root: str) -> str:
    """What chat prints (stderr) for an untrusted project."""
    return (
        "project is untrusted: its settings can only restrict and the assistant may only read it; "
        f"run `{trust_command(root)}`"
    )


def trust_question(root: str) -> str:
    """The trust dialog (stderr): the folder, and what trusting it means."""
    return (
        "Do you trust the files in this folder?\n\n"
        f"  {root}\n\n"
        "Untrusted, the assistant may only read files inside it, and the folder's own settings can "
        "only restrict. Trusting it lets its settings (.jido/settings.json), hooks and MCP servers "
        "take effect, and lets the assistant ask to edit files and run commands here. Trust only "
        "folders whose authors you trust: files in it can try to steer the assistant.\n"
        f"(the same as `{trust_command(root)}`; `jidocode projects untrust` undoes it)"
    )


def history_line(message: dict[str, Any]) -> str:
    """One ``/history`` line: the role and its text, or the tool calls of a tool-call turn."""
    role = escape(str(message.get("role")))
    content = message.get("content")
    parts: list[str] = [escape(str(content)[:300])] if content else []
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {} if isinstance(call, dict) else {}
        name = str(fn.get("name") or "?")
        args = str(fn.get("arguments") or "")
        parts.append(f"[cyan]→ {escape(name)}[/]({escape(args[:200])})")
    if not parts:
        parts.append("[dim](empty)[/]")
    return f"[bold]{role}[/]: " + " ".join(parts)


def help_lines(commands: list[dict[str, Any]] | None) -> list[str]:
    """``/help``: the chat's own commands, then the project's (name, description, where from).

    Names and descriptions come from project files: shown as text, never as markup."""
    lines = ["[bold]built-in commands[/]"]
    lines += [f"  {escape(name):<26} {escape(what)}" for name, what in BUILTIN_HELP]
    if commands is None:
        lines.append("[dim]the project's commands are unavailable right now[/]")
        return lines
    if not commands:
        lines.append(
            "[bold]project commands[/]: none (add .jido/commands/<name>.md or .claude/commands/<name>.md)"
        )
        return lines
    lines.append("[bold]project commands[/] (/<name> [arguments] sends the command's prompt)")
    for command in sorted(commands, key=lambda c: str(c.get("name"))):
        name = strip_controls(str(command.get("name") or "?"))
        description = " ".join(strip_controls(str(command.get("description") or "")).split())
        if len(description) > 100:
            description = description[:99] + "…"
        layer = strip_controls(str(command.get("layer") or ""))
        shadowed = " (shadowed by the built-in)" if name in BUILTINS else ""
        where = f" [dim]\\[{escape(layer)}][/]" if layer else ""
        lines.append(f"  /{escape(name):<25} {escape(description)}{where}{shadowed}")
    return lines
