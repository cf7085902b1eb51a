"""``jidocode prd new|import|draft|list|show|run|pause|resume|stop|reset-story|finish|tui``: a
project's PRD loops.

A PRD (product requirements document) is worked story by story by the ``prd`` service
(``docs/prd.md``); these commands are its client, through :class:`PrdClient`, on the
project of the directory given (started if it never was, as every command does).

``run`` starts the loop and, unless ``--detach``, follows it live: story headers, the
assistant's text, one line per tool call and command, the checks' results, commits,
retries and state changes. It exits 0 when the loop completes and 1 when it ends in
``error`` or ``stopped``. **Ctrl-C asks the service to pause** the loop (the running
iteration is cancelled, the story stays in progress) and exits 130 once it has paused;
``jidocode prd resume`` goes on. A second Ctrl-C leaves at once (the loop runs on).

Errors print the service's message: exit 1, or 2 for bad input and unknown names (as every
``jidocode`` command).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Final, Protocol

import typer
from rich.table import Table
from rich.text import Text

from jidocode.shared.bus import Bus
from jidocode.shared.clients import PrdClient
from jidocode.shared.errors import InvalidInput, ServiceUnavailable
from jidocode.shared.events.prd import (
    LoopInfo,
    PrdEvent,
    PrdFinished,
    PrdList,
    PrdLoopStateChanged,
    PrdView,
    StoryDraft,
)

from .common import NatsReach, cli_bus, console, err_console, fields, print_json, resolve_project, run
from .prd_follow import PrdFollower
from .prd_render import LineRenderer, exit_code_for, safe, story_rows, story_text
from .prd_source import (
    MAX_STORIES_FILE_BYTES,
    PrdSource,
    create_prd,
    print_created,
    read_json,
    read_source,
    stories_of,
)

__all__ = [
    "EXIT_INTERRUPTED",
    "MAX_STORIES_FILE_BYTES",
    "EventFeed",
    "app",
    "check_name",
    "follow_loop",
    "last_events",
    "read_stories",
]

app = typer.Typer(
    rich_markup_mode=None,
    help="PRD loops: a product requirements document worked story by story.",
    no_args_is_help=True,
)

PROJECT_DIR = typer.Argument(..., help="the project's directory")
NAME = typer.Argument(..., help="the PRD's name (letters, digits, '_' and '-')")
JSON = typer.Option(False, "--json", help="print JSON")

#: Loop events ``show`` prints (the newest).
SHOW_EVENTS: Final = 10
#: Seconds ``show`` waits for the stored events it knows exist (the stream answers at once).
SHOW_WAIT_S: Final = 30.0
#: Seconds ``show`` waits for one more stored event once it has the loop's last.
SHOW_POLL_S: Final = 0.3
#: Exit code after Ctrl-C paused the loop (the shell's "interrupted").
EXIT_INTERRUPTED: Final = 130

_NAME_RE: Final = re.compile(r"^[A-Za-z0-9_\-]{1,64}$")


def check_name(name: str) -> str:
    """``name`` when it is a valid PRD name, else :class:`InvalidInput` saying what one is."""
    if not _NAME_RE.match(name):
        raise InvalidInput(
            f"invalid PRD name {name!r}: use 1 to 64 letters, digits, '_' or '-'", details={"name": name}
        )
    return name


def read_stories(path: str) -> list[StoryDraft]:
    """The stories of a ``--from`` file: a JSON list of ``{title, description,
    acceptance_criteria, priority}`` (``id`` optional); a bad one is named with its field."""
    return stories_of(read_json(path), path)


async def _client(bus: Bus, project_dir: str) -> PrdClient:
    info = await resolve_project(bus, project_dir)
    return PrdClient(bus, info.project_id, timeout=30)


async def _call_verb(project_dir: str, name: str, verb: str) -> LoopInfo:
    check_name(name)
    async with cli_bus("prd") as bus:
        client = await _client(bus, project_dir)
        if verb == "pause":
            return await client.pause(name)
        if verb == "resume":
            return await client.resume(name)
        return await client.stop(name, reason="jidocode prd stop")


def _print_loop(loop: LoopInfo, json_out: bool) -> None:
    if json_out:
        print_json(fields(loop))
        return
    story = f", story {loop.story_id} attempt {loop.attempt}" if loop.story_id else ""
    console.print(Text.assemble(("PRD ", "dim"), (loop.prd, "bold"), safe(f": {loop.state}{story}")))


# -- commands ----------------------------------------------------------------------------------


@app.command()
def new(
    project_dir: str = PROJECT_DIR,
    name: str = NAME,
    title: str = typer.Option("", "--title", help="a one-line title"),
    description: str = typer.Option("", "--description", help="what the PRD is about"),
    stories_file: str = typer.Option(
        "",
        "--from",
        help="a JSON list of {title, description, acceptance_criteria, priority}, or a Ralph prd.json",
    ),
    branch_name: str = typer.Option("", "--branch-name", help="the branch its loop works on"),
    json_out: bool = JSON,
) -> None:
    """Create a PRD (its files under .daedalus/prds/<name>/), with stories from --from (a Ralph
    prd.json brings its title, description and branch unless given here)."""

    async def main() -> PrdView:
        check_name(name)
        source = read_source(stories_file, name=name) if stories_file else PrdSource()
        return await create_prd(
            project_dir,
            name,
            PrdSource(
                stories=source.stories,
                title=title or source.title,
                description=description or source.description,
                branch_name=branch_name or source.branch_name,
            ),
        )

    view = run(main)
    for warning in view.warnings:  # e.g. no quality commands configured: on stderr, also with --json
        err_console.print(Text(safe(f"warning: {warning}"), style="yellow"))
    print_created(view, json_out)


@app.command("import")
def import_(
    project_dir: str = PROJECT_DIR,
    ralph_file: str = typer.Argument(..., help="a Ralph prd.json (project, branchName, userStories)"),
    name: str = typer.Option("", "--name", help="the PRD's name (default: from branchName or project)"),
    json_out: bool = JSON,
) -> None:
    """Create a PRD from a Ralph prd.json: its stories keep their ids, priorities, passes and notes."""

    async def main() -> PrdView:
        if name:
            check_name(name)
        source = read_source(ralph_file, name=name)
        if not source.ralph:
            raise InvalidInput(
                f"{ralph_file} is not a Ralph prd.json (an object with userStories): "
                "use `jidocode prd new --from` for a list of stories",
                details={"path": ralph_file},
            )
        return await create_prd(project_dir, source.name, source)

    print_created(run(main), json_out)


@app.command()
def draft(
    project_dir: str = PROJECT_DIR,
    name: str = NAME,
    description: str = typer.Argument("", help="the feature, in prose (or --from)"),
    notes: str = typer.Option("", "--from", help="a notes file (Markdown prose) to draft from"),
    yes: bool = typer.Option(False, "--yes", "-y", help="write prd.json without asking"),
    model: str = typer.Option("", "--model", help="the model that writes it (default: configured)"),
    timeout: float = typer.Option(600.0, "--timeout", min=1.0, help="seconds the model may take"),
    json_out: bool = JSON,
) -> None:
    """Have the model write a PRD from a feature description (stories, acceptance criteria,
    priorities; it may read the project, never change it), show it, and create it once you
    accept (--yes: at once)."""
    from .prd_draft import ask_for_draft, feature_text, show_draft

    _require_name(name)
    drafted = run(lambda: ask_for_draft(project_dir, name, feature_text(description, notes), model, timeout))
    out = err_console if json_out else console
    for line in show_draft(name, drafted):
        out.print(line, highlight=False)
    if not yes and not typer.confirm(f"create PRD {name} from this draft?", err=json_out):
        err_console.print("nothing written")
        raise typer.Exit(1)
    source = PrdSource(stories=drafted.stories, title=drafted.title, description=drafted.description)
    print_created(run(lambda: create_prd(project_dir, name, source)), json_out)


@app.command("list")
def list_(project_dir: str = PROJECT_DIR, json_out: bool = JSON) -> None:
    """The project's PRDs: stories passed, the one in progress, the loop's state."""

    async def main() -> PrdList:
        async with cli_bus("prd") as bus:
            return await (await _client(bus, project_dir)).list()

    found = run(main)
    if json_out:
        print_json(fields(found))
        return
    if not found.prds:
        console.print("no PRDs (create one with `jidocode prd new <dir> <name>`)")
        return
    table = Table("prd", "title", "passed", "in progress", "loop")
    for prd in found.prds:
        title = (
            Text(safe(prd.title))
            if not prd.problem
            else Text(safe(f"cannot load: {prd.problem}"), style="red")
        )
        table.add_row(
            Text(prd.name),
            title,
            f"{prd.passed}/{prd.stories}",
            Text(safe(prd.in_progress or "-")),
            prd.state,
        )
    console.print(table)


async def last_events(bus: Bus, project_id: str, name: str, last_seq: int, count: int) -> list[PrdEvent]:
    """The newest ``count`` stored events of a PRD whose last event is ``last_seq``."""
    if last_seq <= 0 or count <= 0:
        return []
    found: list[PrdEvent] = []
    follower = PrdFollower(bus, project_id, name, after_seq=max(0, last_seq - count), poll_s=SHOW_POLL_S)
    try:
        await follower.start()
    except ServiceUnavailable:
        return []
    try:
        async with asyncio.timeout(SHOW_WAIT_S):
            # up to the loop's seq, and on while more are stored (the record may lag its events)
            while (event := await follower.next()) is not None or follower.last_seq < last_seq:
                if event is not None:
                    found.append(event)
    except TimeoutError:
        pass  # the stream's limits dropped some: show what is there
    finally:
        await follower.close()
    return found[-count:]


@app.command()
def show(project_dir: str = PROJECT_DIR, name: str = NAME, json_out: bool = JSON) -> None:
    """A PRD: its stories with their state, the loop's state, and its last events."""

    async def main() -> tuple[PrdView, list[PrdEvent]]:
        check_name(name)
        async with cli_bus("prd") as bus:
            client = await _client(bus, project_dir)
            view = await client.get(name)
            seq = view.loop.seq if view.loop else 0
            return view, await last_events(bus, client.project_id, name, seq, SHOW_EVENTS)

    view, events = run(main)
    if json_out:
        print_json({**fields(view), "events": [e.model_dump(mode="json") for e in events]})
        return
    title = safe(str(view.prd.get("title", "")))
    console.print(Text.assemble(("PRD ", "dim"), (view.name, "bold"), f"  {title}" if title else ""))
    console.print(Text(safe(f"files: {view.path}"), style="dim"))
    loop = view.loop
    if loop is None:
        console.print("loop: ready (never ran)")
    else:
        where = f" on {loop.branch}" if loop.branch else ""
        who = "/".join(p for p in (loop.provider, loop.model) if p)
        line = Text.assemble("loop: ", (loop.state, "bold"), safe(where), safe(f" · {who}" if who else ""))
        if loop.story_id:
            line.append(safe(f" · story {loop.story_id} attempt {loop.attempt}"))
        if loop.error:
            line.append(safe(f" · {loop.error}"), style="red")
        console.print(line)
    rows = story_rows(view.prd)
    current = loop.story_id if loop else ""
    console.print(
        Text(f"stories ({sum(r.state == 'passed' for r in rows)}/{len(rows)} passed):", style="bold")
    )
    for row in rows:
        console.print(Text("  ").append_text(story_text(row, current=row.id == current)))
    if events:
        console.print(Text("last events:", style="bold"))
        renderer = LineRenderer(command_output=False)
        for event in events:
            for text in renderer.feed(event):
                console.print(text)
        for text in renderer.flush():
            console.print(text)


class EventFeed(Protocol):
    """What :func:`follow_loop` reads (a :class:`PrdFollower`)."""

    async def next(self) -> PrdEvent | None: ...


async def follow_loop(
    follower: EventFeed,
    renderer: LineRenderer,
    emit: Callable[[Text], None],
    *,
    interrupted: asyncio.Event | None = None,
    on_interrupt: Callable[[], Awaitable[None]] | None = None,
    check: Callable[[], None] | None = None,
    from_start: bool = False,
    on_event: Callable[[PrdEvent], None] | None = None,
) -> int:
    """Show ``follower``'s events through ``emit(Text)`` (or hand each to ``on_event``: ``--json``)
    until the loop ends; its exit code.

    0 completed, 1 error or stopped; once ``interrupted`` is set, ``on_interrupt()`` is
    awaited (it asks for a pause) and the loop's next ``paused`` ends it with 130. With
    ``from_start``, events before the loop's next ``→ running`` are skipped: the loop's
    record can lag its last event (the previous run's ``→ completed``), which must not end
    a new run's follower.
    """
    asked = False
    started = not from_start
    while True:
        if interrupted is not None and interrupted.is_set() and not asked:
            asked = True
            if on_interrupt is not None:
                await on_interrupt()
        if check is not None:
            check()
        event = await follower.next()
        if event is None:
            continue
        started = started or _run_started(event)
        if not started:
            continue
        if on_event is not None:
            on_event(event)
        else:
            for text in renderer.feed(event):
                emit(text)
        code = _end_code(event, pause_asked=asked)
        if code is not None:
            for text in renderer.flush():
                emit(text)
            return code


def _run_started(event: PrdEvent) -> bool:
    """Whether ``event`` is the loop's ``→ running`` (a follower ``from_start`` shows from there)."""
    return isinstance(event, PrdLoopStateChanged) and event.to_state == "running"


def _end_code(event: PrdEvent, *, pause_asked: bool) -> int | None:
    """The exit code ``event`` ends the follower with (:func:`exit_code_for`), else ``None``; once
    Ctrl-C asked for a pause, the loop's ``→ paused`` ends it with :data:`EXIT_INTERRUPTED`."""
    code = exit_code_for(event)
    if code is None and pause_asked and isinstance(event, PrdLoopStateChanged) and event.to_state == "paused":
        return EXIT_INTERRUPTED
    return code


@app.command("run")
def run_(
    project_dir: str = PROJECT_DIR,
    name: str = NAME,
    provider: str = typer.Option(
        "", "--provider", help="jidocode, codex, claude or gemini (default: configured)"
    ),
    model: str = typer.Option("", "--model", help="the model the provider uses"),
    worktree: bool = typer.Option(
        False, "--worktree", help="work in .daedalus/worktrees/<name> on its own branch"
    ),
    branch: str = typer.Option("", "--branch", help="the branch to work on (created when missing)"),
    allow_dirty: bool = typer.Option(False, "--allow-dirty", help="start though the work tree has changes"),
    detach: bool = typer.Option(False, "--detach", help="start it and return (follow with `prd tui`)"),
    json_out: bool = JSON,
) -> None:
    """Start the PRD's loop and follow it live (Ctrl-C pauses it; --detach returns at once;
    --json prints each event as one JSON line)."""

    async def main() -> int:
        check_name(name)
        async with cli_bus("prd") as bus:
            client = await _client(bus, project_dir)
            view = await client.get(name)
            after = view.loop.seq if view.loop else 0
            follower = (
                None if detach else await PrdFollower(bus, client.project_id, name, after_seq=after).start()
            )
            try:
                loop = await client.run(
                    name,
                    provider=provider,
                    model=model,
                    worktree=worktree,
                    branch=branch,
                    allow_dirty=allow_dirty,
                )
                for warning in loop.warnings:  # no quality commands, a project layer ignored
                    err_console.print(Text(safe(f"warning: {warning}"), style="yellow"))
                if follower is None:
                    _print_loop(loop, json_out)
                    return 0
                return await _follow_live(bus, client, follower, name, json_out)
            finally:
                if follower is not None:
                    await follower.close()

    code = run(main)
    if code:
        raise typer.Exit(code)


def _json_line(event: PrdEvent) -> None:
    """One event as one JSON line on stdout (``run --json``: for scripts)."""
    sys.stdout.write(json.dumps(event.model_dump(mode="json"), ensure_ascii=False) + "\n")
    sys.stdout.flush()


async def _follow_live(bus: Bus, client: PrdClient, follower: PrdFollower, name: str, json_out: bool) -> int:
    interrupted = asyncio.Event()
    loop = asyncio.get_running_loop()
    reach = NatsReach(bus, interrupted.set, f"prd run <dir> {name}")

    def on_sigint() -> None:
        if interrupted.is_set():
            raise KeyboardInterrupt  # a second Ctrl-C: leave now, the loop runs on
        interrupted.set()

    async def pause() -> None:
        if reach.lost:
            return
        err_console.print("pausing the loop … (Ctrl-C again leaves, the loop runs on)", style="yellow")
        with contextlib.suppress(Exception):  # it may have ended meanwhile: its events say so
            await client.pause(name)

    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGINT, on_sigint)
    # said once Ctrl-C does what it says (a script may wait for this line before sending SIGINT)
    err_console.print(
        Text.assemble("running ", (name, "bold"), " (Ctrl-C pauses it)", style="dim"), highlight=False
    )
    try:
        return await follow_loop(
            follower,
            LineRenderer(),
            lambda text: console.print(text, highlight=False),
            interrupted=interrupted,
            on_interrupt=pause,
            check=reach.check,
            from_start=True,
            on_event=_json_line if json_out else None,
        )
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGINT)


@app.command()
def pause(project_dir: str = PROJECT_DIR, name: str = NAME, json_out: bool = JSON) -> None:
    """Pause the loop after its current step (the story stays in progress)."""
    _print_loop(run(lambda: _call_verb(project_dir, name, "pause")), json_out)


@app.command()
def resume(project_dir: str = PROJECT_DIR, name: str = NAME, json_out: bool = JSON) -> None:
    """Resume a paused loop."""
    _print_loop(run(lambda: _call_verb(project_dir, name, "resume")), json_out)


@app.command()
def stop(project_dir: str = PROJECT_DIR, name: str = NAME, json_out: bool = JSON) -> None:
    """Stop the loop (a running iteration is cancelled; `run` starts it again)."""
    _print_loop(run(lambda: _call_verb(project_dir, name, "stop")), json_out)


@app.command("reset-story")
def reset_story(
    project_dir: str = PROJECT_DIR,
    name: str = NAME,
    story_id: str = typer.Argument(..., help="the story to put back to pending"),
    yes: bool = typer.Option(False, "--yes", "-y", help="do not ask for confirmation"),
    json_out: bool = JSON,
) -> None:
    """Put a story back to pending (refused while the loop runs): the loop works it again."""
    _require_name(name)
    if not yes and not typer.confirm(f"put story {story_id} of PRD {name} back to pending?"):
        raise typer.Exit(1)

    async def main() -> PrdView:
        async with cli_bus("prd") as bus:
            return await (await _client(bus, project_dir)).reset_story(name, story_id)

    view = run(main)
    if json_out:
        print_json(fields(view))
        return
    state = next((r.state for r in story_rows(view.prd) if r.id == story_id), "pending")
    console.print(Text.assemble("story ", (safe(story_id), "bold"), f" of {view.name}: {state}"))


@app.command()
def finish(
    project_dir: str = PROJECT_DIR,
    name: str = NAME,
    into: str = typer.Option("", "--into", help="the branch to merge into (default: where the loop started)"),
    push: bool = typer.Option(
        False, "--push", help="push that branch to its remote (a local bare repository)"
    ),
    remote: str = typer.Option(
        "", "--remote", help="the remote to push to (default: the branch's, else origin)"
    ),
    json_out: bool = JSON,
) -> None:
    """Merge the PRD's branch into the branch its loop started from (a fast-forward or a merge
    commit; refused on a conflict, naming the files), remove its worktree, and with --push push."""

    async def main() -> PrdFinished:
        check_name(name)
        async with cli_bus("prd") as bus:
            client = await _client(bus, project_dir)
            return await client.finish(name, into=into, push=push, remote=remote)

    done = run(main)
    if json_out:
        print_json(fields(done))
        return
    how = {"fast_forward": "fast-forwarded", "merge_commit": "merged with a merge commit"}
    verb = how.get(done.merge, "already had everything of")
    console.print(Text.assemble((done.into, "bold"), safe(f" {verb} {done.branch} (now {done.commit[:12]})")))
    if done.worktree_removed:
        console.print(Text(safe(f"removed the worktree {done.worktree_removed}")))
    if done.pushed_to:
        console.print(Text(safe(f"pushed {done.into} to {done.pushed_to} ({done.remote_url})")))


def _require_name(name: str) -> None:
    """Exit 2 with the message when ``name`` is not a PRD name (before asking or connecting)."""

    async def main() -> str:
        return check_name(name)

    run(main)


@app.command()
def tui(
    project_dir: str = PROJECT_DIR,
    name: str = typer.Argument("", help="the PRD (default: the only one, else a picker)"),
) -> None:
    """A terminal UI: the stories, the running iteration's stream and checks; p pause, r resume,
    s stop, q quit."""
    from .prd_tui import run_tui  # Textual loads only for this command

    if name:
        _require_name(name)
    code = run(lambda: run_tui(project_dir, name))
    if code:
        raise typer.Exit(code)
