"""`jidocode chat <project-dir> [message]`: talk to the assistant in a project.

One-shot (a message argument, or text on a non-terminal stdin) or interactive.
The answer streams as it comes: on a terminal its markdown is rendered block
by block (:mod:`.chat_markdown`), piped it is written as it came; each tool
call shows as one line with its outcome; ``ask`` rules prompt for approval
(``--approve yes|no`` answers without asking; with no terminal to ask on, an
ask is denied and the line says which rule would allow it). ``-c``
(``--continue``) reopens the project's latest conversation, ``--conversation``
(``-r``) a given one. Ctrl-C cancels the running turn and its tools; at the
prompt, ``/help`` lists the chat's own commands and the project's,
``/resume`` resumes a cancelled conversation, ``/usage`` shows the
tokens used against the context window, ``/reset`` starts a fresh
conversation, ``/history`` shows it, ``/compact [what to keep]`` summarises the
older part of the conversation now, ``/rewind`` goes back before a message (its files, the
conversation or both: :mod:`.chat_rewind`), ``/prd`` lists, starts and follows the project's
PRD loops (:mod:`.chat_prd`), ``/quit`` (or Ctrl-D) leaves. Any other
``/name arguments`` runs the project's slash command ``name``
(``.jido/commands/<name>.md``): it is rendered with the arguments and sent as
the user's message, and the line says which command ran; an unknown name lists
the commands there are. A one-shot message is dispatched the same way.
``--json`` prints every event of the conversation as one JSON line (for
scripts), a ``chat.command`` line for a command that ran, and the final answer
as a ``chat.answer`` line.

At start, a project the user has not trusted is said so on stderr with the
exact ``jidocode projects trust <dir>`` command (untrusted, its own settings
can only restrict and the assistant may only read it); on a terminal, chat asks
once, before the conversation starts, whether to trust the folder, showing its
path and what trusting means (yes records it as ``jidocode projects trust``
does; no goes on untrusted).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

import typer
from rich.console import Console
from rich.markup import escape

from jidocode.client import (
    ApprovalAnswer,
    ApprovalRequest,
    Decision,
    JidoClient,
    RenderedCommand,
    TurnFailed,
)
from jidocode.shared.config import Config
from jidocode.shared.envelope import Envelope
from jidocode.shared.errors import JidoError, NotFound
from jidocode.shared.events.conversation import (
    ConversationError,
    ToolCallCompleted,
    ToolCallFailed,
    ToolCallRequested,
)

from .chat_form import fill_form
from .chat_lines import (
    BUILTINS,
    ChatInput,
    builtins_line,
    command_line,
    denied_line,
    envelope_json,
    help_lines,
    history_line,
    outcome,
    parse_input,
    preview,
    trust_command,
    trust_line,
    trust_question,
)
from .chat_markdown import MarkdownBlocks, print_markdown
from .chat_prd import run_prd
from .chat_rewind import rewind_asking
from .common import NatsReach, run

__all__ = ["BUILTINS", "ChatInput", "chat", "parse_input", "trust_line"]

#: What a sub-agent's conversation id holds (``subagents.core.child_conversation_id``):
#: ``--continue`` never picks one.
_SUBAGENT_MARK: Final = "-sa-"

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)


class _Screen:
    """What the user sees: streamed text, one line per tool call, approval prompts."""

    def __init__(self, *, as_json: bool, approve: str, interactive: bool) -> None:
        self.as_json = as_json
        self.approve = approve
        self.interactive = interactive
        self.mid_line = False
        self.streamed = False
        #: A spinner while waiting (only on a terminal, never with --json).
        self.spin = not as_json and sys.stdout.isatty()
        #: Markdown rendered block by block (only on a terminal; piped output stays as it came).
        self.markdown = not as_json and sys.stdout.isatty()
        self.blocks = MarkdownBlocks()
        self._status: Any = None
        self._what = ""

    def wait(self, what: str) -> None:
        """Show a spinner saying what is awaited (replacing any shown)."""
        if not self.spin or (self._status is not None and self._what == what):
            return
        self.stop_wait()
        self._what = what
        self._status = out.status(f"[dim]{escape(what)}[/]")
        self._status.start()

    def stop_wait(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def _newline(self) -> None:
        if self.mid_line:
            sys.stdout.write("\n")
            sys.stdout.flush()
            self.mid_line = False

    async def delta(self, text: str) -> None:
        if self.as_json or not text:
            return
        self.streamed = True
        if self.markdown:
            # a block shows once it ends; until then the spinner says the answer is being written
            self.wait("writing …")
            for block in self.blocks.feed(text):
                print_markdown(out, block)
            return
        self.stop_wait()
        sys.stdout.write(text)
        sys.stdout.flush()
        self.mid_line = not text.endswith("\n")

    def _flush_markdown(self) -> None:
        """Print the block still open (a tool call or the end of the turn ends it)."""
        if self.markdown:
            print_markdown(out, self.blocks.rest())

    async def event(self, env: Envelope) -> None:
        if self.as_json:
            sys.stdout.write(envelope_json(env) + "\n")
            sys.stdout.flush()
            return
        try:
            event = env.event()
        except JidoError:
            return  # a type or shape this version does not know: nothing to show
        if isinstance(event, ToolCallRequested):
            self.stop_wait()
            self._flush_markdown()
            self._newline()
            out.print(f"[cyan]⏺ {escape(event.name)}[/]({escape(preview(event.args))})")
            self.wait(f"running {event.name} …")
        elif isinstance(event, ToolCallCompleted):
            self.stop_wait()
            out.print(f"  [green]✓[/] {escape(event.name)}: {escape(outcome(event.data))}")
            self.wait("thinking …")
        elif isinstance(event, ToolCallFailed):
            self.stop_wait()
            out.print(
                f"  [red]✗[/] {escape(event.name)}: {escape(event.error_type)}: {escape(event.message[:200])}"
            )
            self.wait("thinking …")
        elif isinstance(event, ConversationError):
            self.stop_wait()
            self._flush_markdown()
            self._newline()
            err.print(f"[yellow]! {escape(event.message)}[/]")

    async def ask(self, request: ApprovalRequest) -> Decision | ApprovalAnswer:
        if self.approve == "yes":
            return "approve_once"
        if self.approve == "no" or not self.interactive:
            if not self.as_json:
                self.stop_wait()
                self._flush_markdown()
                self._newline()
                err.print(f"[yellow]{escape(denied_line(request, asked=self.approve == 'ask'))}[/]")
            return "deny"
        self.stop_wait()
        self._flush_markdown()
        self._newline()
        err.print(
            f"[bold yellow]? {escape(request.tool)}[/]({escape(preview(request.args))}) needs approval"
            + (f": {escape(request.reason)}" if request.reason else "")
        )
        answer = await _read_line("  [y]es once / [a]lways this session / [N]o: ")
        choice = (answer or "").strip().lower()
        if choice in ("y", "yes", "a", "always") and request.form is not None:
            return await fill_form(request.form, _read_line, err)  # an MCP server's elicitation
        if choice in ("y", "yes"):
            return "approve_once"
        if choice in ("a", "always"):
            return "approve_session"
        return "deny"

    def command(self, rendered: RenderedCommand) -> None:
        """Say which project command runs (its prompt goes to the model as the user's message)."""
        if self.as_json:
            line = {
                "type": "chat.command",
                "command": rendered.name,
                "arguments": rendered.arguments,
                "prompt": rendered.prompt,
            }
            sys.stdout.write(json.dumps(line, ensure_ascii=False) + "\n")
            sys.stdout.flush()
            return
        self._newline()
        out.print(command_line(rendered))

    def end_turn(self, answer: str | None) -> None:
        self.stop_wait()
        if self.markdown:
            self._flush_markdown()
            if answer is not None and not self.streamed:
                print_markdown(out, answer)
            self.streamed = False
            return
        if self.as_json:
            if answer is not None:
                sys.stdout.write(
                    json.dumps({"type": "chat.answer", "text": answer}, ensure_ascii=False) + "\n"
                )
                sys.stdout.flush()
            return
        if answer is not None and not self.streamed:
            sys.stdout.write(answer)
            self.mid_line = not answer.endswith("\n")
        self._newline()
        self.streamed = False


async def _read_line(prompt: str) -> str | None:
    """One line from stdin without blocking the loop (a daemon thread: Ctrl-D or exit never hang)."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[str | None] = loop.create_future()

    def _reader() -> None:
        try:
            line: str | None = input(prompt)
        except (EOFError, KeyboardInterrupt):
            line = None

        def _set() -> None:
            if not fut.done():
                fut.set_result(line)

        loop.call_soon_threadsafe(_set)

    threading.Thread(target=_reader, daemon=True).start()
    return await fut


async def _turn(client: JidoClient, screen: _Screen, text: str, timeout: float | None) -> bool:
    """Run one turn; Ctrl-C cancels it. True when it answered."""
    loop = asyncio.get_running_loop()
    task = asyncio.create_task(client.send_message(text, on_delta=screen.delta, timeout=timeout))
    cancels: list[asyncio.Task[None]] = []

    def _on_sigint() -> None:
        if not cancels:
            cancels.append(asyncio.create_task(client.cancel("the user pressed Ctrl-C")))

    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGINT, _on_sigint)
    screen.wait("thinking …")
    try:
        answer = await task
    except TurnFailed as exc:
        screen.end_turn(None)
        if exc.type == "cancelled":
            err.print(
                "[yellow]cancelled[/] (type /resume to go on)"
                if screen.interactive
                else "[yellow]cancelled[/]"
            )
        else:
            err.print(f"[bold red]error[/] ({exc.type}): {escape(exc.message)}")
        return False
    finally:
        screen.stop_wait()
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGINT)
    screen.end_turn(answer)
    return True


async def _usage(client: JidoClient, _arguments: str) -> None:
    from jidocode.shared.cost import cost_text

    usage = await client.get_context_usage()
    out.print(
        f"context: {usage.tokens_used} of {usage.context_window or '?'} tokens ({usage.percent_used:.1f}%)"
        f" · {usage.calls} calls · {usage.prompt_tokens} prompt + {usage.completion_tokens} completion"
        f" ({usage.cached_tokens} cached) · {cost_text(usage.cost_usd, usage.unpriced_calls)}"
        + (f" · {usage.model}" if usage.model else "")
    )


async def _check_trust(client: JidoClient, *, offer: bool) -> None:
    """Say when the project is untrusted; on a terminal, ask once whether to trust it (before the
    conversation): yes records it as ``jidocode projects trust`` does, no goes on untrusted."""
    state = client.trust_state
    if state.trusted:
        return
    if state.problem:
        err.print(f"[yellow]{escape(state.problem)}[/]")
    if not offer:
        err.print(f"[yellow]{escape(trust_line(state.root))}[/]")
        return
    err.print(f"[bold]{escape(trust_question(state.root))}[/]")
    answer = await _read_line("Trust this folder? [y/N]: ")
    if (answer or "").strip().lower() not in ("y", "yes"):
        err.print(
            f"[yellow]continuing untrusted[/]: the assistant may only read here; "
            f"`{escape(trust_command(state.root))}` trusts it later"
        )
        return
    try:
        state = await client.trust()
    except JidoError as exc:
        err.print(f"[bold red]error[/] ({exc.type}): {escape(exc.message)}")
        return
    err.print(f"[green]trusted[/] {escape(state.root)} (recorded in {escape(state.store)})")


def _unknown(name: str, available: list[str] | None) -> None:
    """Say that ``/name`` is no command, with the chat's own and the project's."""
    project = (
        ("; this project's: " + " ".join(f"/{escape(n)}" for n in available))
        if available
        else "; this project has none (add .jido/commands/<name>.md)"
        if available is not None
        else ""
    )
    err.print(f"unknown command /{escape(name)}: built-in {builtins_line()}{project}")


async def _help(client: JidoClient, _arguments: str) -> None:
    try:
        commands: list[dict[str, Any]] | None = await client.list_commands()
    except JidoError:
        commands = None  # the built-ins still help
    for line in help_lines(commands):
        out.print(line)


async def _command(client: JidoClient, screen: _Screen, typed: ChatInput, timeout: float | None) -> bool:
    """Render the project's command and send it as the user's message. True when it answered."""
    try:
        rendered = await client.render_command(typed.name, typed.arguments)
    except NotFound as exc:
        if exc.details.get("command") != typed.name:
            raise
        available = exc.details.get("available")
        _unknown(typed.name, [str(n) for n in available] if isinstance(available, list) else None)
        return False
    screen.command(rendered)
    return await _turn(client, screen, rendered.prompt, timeout)


async def _dispatch(client: JidoClient, screen: _Screen, typed: ChatInput, timeout: float | None) -> bool:
    """Do what one typed line asks; True when it went well. ``/quit`` is the caller's, and so
    is a :class:`JidoError` (interactive: printed, one-shot: the exit code)."""
    if typed.kind == "empty":
        return True
    if typed.kind == "unknown":
        await _unknown_typed(client, typed.name)
        return False
    if typed.kind == "command":
        return await _command(client, screen, typed, timeout)
    if typed.kind == "message":
        return await _turn(client, screen, typed.text, timeout)
    run_builtin = _BUILTIN_RUNS.get(typed.name)
    if run_builtin is not None:
        await run_builtin(client, typed.arguments)
    return True


async def _unknown_typed(client: JidoClient, name: str) -> None:
    """Say that the lone ``/name`` typed is no command, with the project's commands if they can
    be listed."""
    try:
        available: list[str] | None = sorted(str(c.get("name")) for c in await client.list_commands())
    except JidoError:
        available = None  # the built-ins still help
    _unknown(name, available)


async def _reset(client: JidoClient, _arguments: str) -> None:
    cid = await client.reset_session()
    out.print(f"[dim]new conversation {cid}[/]")


async def _resume(client: JidoClient, _arguments: str) -> None:
    await client.resume()
    out.print("[dim]resumed[/]")


async def _history(client: JidoClient, _arguments: str) -> None:
    for message in await client.get_history():
        out.print(history_line(message))


async def _compact(client: JidoClient, instructions: str) -> None:
    """``/compact [what to keep]``: summarise the older part of the conversation now."""
    out.print("[dim]compacting…[/]")
    result = await client.compact(instructions or None)
    if result.compacted:
        out.print(
            f"[dim]compacted {result.messages} messages into a summary: context "
            f"{result.tokens_before} → {result.tokens_after} tokens[/]"
        )
    else:
        out.print(f"[yellow]not compacted[/]: {escape(result.message)}")


#: What each built-in command (but ``/quit``, the caller's) runs, given its arguments.
_BUILTIN_RUNS: Final[dict[str, Callable[[JidoClient, str], Awaitable[None]]]] = {
    "help": _help,
    "usage": _usage,
    "reset": _reset,
    "resume": _resume,
    "history": _history,
    "compact": _compact,
    "prd": run_prd,
    "rewind": lambda client, arguments: rewind_asking(client, arguments, _read_line),
}


async def _interactive(client: JidoClient, screen: _Screen, timeout: float | None) -> int:
    out.print(
        f"[dim]project {escape(client.root_path)} · conversation {client.conversation_id} · "
        f"{builtins_line()} · /<command> runs a project command · Ctrl-C cancels a turn[/]"
    )
    while True:
        line = await _read_line("> ")
        if line is None:
            return 0
        typed = parse_input(line)
        if typed.kind == "builtin" and typed.name in ("quit", "exit"):
            return 0
        try:
            await _dispatch(client, screen, typed, timeout)
        except JidoError as exc:
            err.print(f"[bold red]error[/] ({exc.type}): {escape(exc.message)}")


async def _latest_conversation(client: JidoClient) -> str | None:
    """The project's conversation with the latest activity (never a sub-agent's); ``None`` (said
    on stderr) when the project has none yet."""
    listed = await client.conversations.list(limit=2000)
    mine = [c for c in listed.conversations if _SUBAGENT_MARK not in c.conversation_id]
    if not mine:
        err.print("[dim]no earlier conversation in this project: starting a new one[/]")
        return None
    latest = max(
        mine, key=lambda c: max(filter(None, (c.last_activity, c.updated_at, c.created_at)), default="")
    )
    return latest.conversation_id


def chat(
    project_dir: str = typer.Argument(..., help="the project directory"),
    message: str | None = typer.Argument(None, help="send this one message and exit (else: interactive)"),
    model: str | None = typer.Option(
        None, "--model", "-m", help="litellm model string for this conversation"
    ),
    api_base: str | None = typer.Option(
        None,
        "--api-base",
        help="OpenAI-compatible endpoint for this conversation (e.g. http://127.0.0.1:8000/v1)",
    ),
    api_key_env: str | None = typer.Option(
        None,
        "--api-key-env",
        help="name of the variable holding the key for --api-base, read by the conversation service "
        "(--api-base/--api-key-env replace the settings' pair: their key never goes to your base)",
    ),
    conversation: str | None = typer.Option(
        None, "--conversation", "--resume", "-r", help="reopen this conversation id"
    ),
    continue_last: bool = typer.Option(
        False, "--continue", "-c", help="continue the project's latest conversation (a new one if none)"
    ),
    as_json: bool = typer.Option(False, "--json", help="print the event stream as JSON lines"),
    approve: str = typer.Option("ask", help="approvals for `ask` rules: ask | yes | no"),
    timeout: float | None = typer.Option(None, help="seconds to wait for an answer (default: no limit)"),
) -> None:
    """Chat with the assistant in a project (one message, or interactive)."""
    if approve not in ("ask", "yes", "no"):
        raise typer.BadParameter("--approve must be ask, yes or no")
    if continue_last and conversation is not None:
        raise typer.BadParameter("--continue and --conversation both name a conversation: give one")
    session = _Session(
        project_dir=project_dir,
        model=model,
        api_base=api_base,
        api_key_env=api_key_env,
        conversation=conversation,
        continue_last=continue_last,
        as_json=as_json,
        timeout=timeout,
        text=_one_shot_text(message),
    )
    screen = _Screen(as_json=as_json, approve=approve, interactive=sys.stdin.isatty())
    code = run(lambda: _chat(session, screen))
    if code:
        raise typer.Exit(code)


def _one_shot_text(message: str | None) -> str | None:
    """The one message to send: the argument, else what a non-terminal stdin holds; ``None``
    (interactive) on a terminal with no argument."""
    if message is not None or sys.stdin.isatty():
        return message
    text = sys.stdin.read().strip() or None
    if text is None:
        raise typer.BadParameter("no message: give one as an argument or on stdin")
    return text


@dataclass(frozen=True)
class _Session:
    """What one ``jidocode chat`` was asked for (the options, checked)."""

    project_dir: str
    model: str | None
    api_base: str | None
    api_key_env: str | None
    conversation: str | None
    continue_last: bool
    as_json: bool
    timeout: float | None
    #: The one-shot message; ``None``: interactive.
    text: str | None


async def _chat(session: _Session, screen: _Screen) -> int:
    """Connect, talk, and close; the exit code. When ``up`` dies, say so and exit (never hang)."""
    client = await JidoClient.connect(
        project_dir=session.project_dir,
        model=session.model,
        api_base=session.api_base,
        api_key_env=session.api_key_env,
        config=Config.from_env(),
        wait=False,
    )
    lost = asyncio.Event()
    reach = NatsReach(client.bus, lost.set, "chat")
    talking = asyncio.create_task(_talk(client, session, screen))
    gone = asyncio.create_task(lost.wait())
    try:
        await asyncio.wait({talking, gone}, return_when=asyncio.FIRST_COMPLETED)
        if talking.done():
            return talking.result()
        talking.cancel()
        await asyncio.gather(talking, return_exceptions=True)
        screen.stop_wait()
        reach.check()
        return 1
    finally:
        gone.cancel()
        await client.close()


async def _talk(client: JidoClient, session: _Session, screen: _Screen) -> int:
    """Offer trust, open the conversation, then run the one message or the prompt loop."""
    await _check_trust(client, offer=screen.interactive and not session.as_json)
    client.on_event(screen.event)
    await client.configure_tools(approve=screen.ask)
    reopen = await _latest_conversation(client) if session.continue_last else session.conversation
    await client.start_conversation(reopen)
    if session.text is None:
        return await _interactive(client, screen, session.timeout)
    typed = parse_input(session.text)
    if typed.kind == "builtin" and typed.name in ("quit", "exit"):
        return 0
    return 0 if await _dispatch(client, screen, typed, session.timeout) else 1
