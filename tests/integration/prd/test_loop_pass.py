"""When a story passes, the budgets, the notices (issue 28 points 1 and 4), through the real prd
service: the system of ``test_loop.py`` (engine + prd on a real nats-server, real git, checks in
the real sandbox, the instant provider), one for this module. The global layer is changed per test
(:func:`prd_settings`): a loop reads its configuration when it is run or resumed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from typer.testing import CliRunner

from jidocode.cli.main import app
from jidocode.shared.clients import EngineClient
from jidocode.shared.clients._prd import PrdClient
from jidocode.shared.events.prd import StoryDraft

from . import test_loop
from .helpers import WAIT, Events, git, git_repo
from .instant import Act
from .test_loop import MAX_RETRIES, System

pytestmark = pytest.mark.asyncio(loop_scope="module")

#: The module's system: ``test_loop.py``'s fixture, one instance for this module.
system = test_loop.system


@contextlib.contextmanager
def prd_settings(**prd: object) -> Iterator[None]:
    """The global layer's ``prd`` key with ``prd`` set in it, for the ``with`` block."""
    path = Path(os.environ["JIDO_CODE_HOME"]) / "settings.json"
    saved = path.read_text()
    data = json.loads(saved)
    data["prd"] = {**data["prd"], **prd}
    path.write_text(json.dumps(data))
    try:
        yield
    finally:
        path.write_text(saved)


class Receiver:
    """A webhook receiver on 127.0.0.1: ``/moved`` answers a redirect, any other path 200."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, dict[str, Any]]] = []
        self.changed = asyncio.Condition()
        self.url = ""

    async def on_post(self, request: web.Request) -> web.StreamResponse:
        async with self.changed:
            self.posts.append((request.path, await request.json()))
            self.changed.notify_all()
        if request.path == "/moved":
            raise web.HTTPFound("/elsewhere")
        return web.json_response({"ok": True})

    async def wait(self, path: str) -> dict[str, Any]:
        """The first notice POSTed to ``path`` (waited for)."""

        def found() -> dict[str, Any] | None:
            return next((body for p, body in self.posts if p == path), None)

        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(lambda: found() is not None), WAIT)
        body = found()
        assert body is not None
        return body


@contextlib.asynccontextmanager
async def receiver() -> AsyncIterator[Receiver]:
    got = Receiver()
    app = web.Application()
    app.router.add_post("/{name}", got.on_post)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    got.url = f"http://{host}:{port}"
    try:
        yield got
    finally:
        await runner.cleanup()


async def test_a_story_where_nothing_was_done_and_nothing_checked_ends_in_error_naming_it(
    system: System,
) -> None:
    """The issue's reproduction: no quality commands, a provider that writes nothing."""
    p = system.provider
    p.scripts["idle/US-001"] = [Act()]
    p.scripts["busy/US-001"] = [Act(write={"busy.txt": "busy\n"})]
    await system.create("idle", "Do nothing")
    await system.create("busy", "Do something")
    with prd_settings(quality_commands=[]):
        info = await system.prds.run("idle", worktree=True)
        busy = await system.prds.run("busy", worktree=True)
        await system.events.wait_state("idle", "error")
        await system.events.wait_state("busy", "completed")
    assert any("no quality commands are configured" in w for w in info.warnings), info.warnings

    story = system.stories("idle")[0]
    assert story["passes"] is False and story["attempts"] == MAX_RETRIES + 1
    loop = (await system.prds.get("idle")).loop
    assert loop is not None and loop.state == "error"
    assert "story US-001" in loop.error and "nothing changed and no quality check ran" in loop.error
    retried = system.events.of("idle", "prd.retry.scheduled")
    assert len(retried) == MAX_RETRIES and all("nothing changed" in e["reason"] for e in retried)
    assert [e["kind"] for e in system.events.of("idle", "prd.error")] == ["nothing_done"]
    assert system.events.of("idle", "prd.git.committed") == []
    # the retry was told why
    assert "changed no file" in [r.prompt for r in p.requests if r.metadata.get("prd") == "idle"][-1]
    # a story that changed something passes without checks (its provider has no "done" of its own)
    assert system.stories("busy")[0]["passes"] is True
    assert git(Path(busy.work_dir), "log", "-1", "--format=%s") == "US-001: Do something"


async def test_prd_new_and_run_warn_on_stderr_when_no_quality_commands_are_configured(
    system: System,
) -> None:
    """Through the real CLI (typer's runner in a thread: it runs its own event loop)."""
    env = {
        "NATS_URL": system.bus.nc.connected_url.geturl(),  # type: ignore[union-attr]
        "JIDO_CODE_HOME": os.environ["JIDO_CODE_HOME"],
        "COLUMNS": "200",
    }

    async def cli(*args: str) -> str:
        result = await asyncio.wait_for(asyncio.to_thread(CliRunner().invoke, app, list(args), env=env), WAIT)
        assert result.exit_code == 0, result.output
        return result.stderr

    warning = "warning: no quality commands are configured"
    assert warning not in await cli("prd", "new", str(system.root), "checked", "--json")
    with prd_settings(quality_commands=[]):
        assert warning in await cli("prd", "new", str(system.root), "unchecked", "--json")
        assert warning in await cli("prd", "run", str(system.root), "unchecked", "--worktree", "--detach")
        await system.events.wait_state("unchecked", "completed")  # no story: nothing to do


async def test_a_story_the_provider_does_not_report_done_is_tried_again(system: System) -> None:
    p = system.provider
    p.scripts["undone/US-001"] = [
        Act(write={"undone.txt": "half\n"}, done=False),
        Act(write={"undone.txt": "whole\n"}, done=True),
    ]
    await system.create("undone", "Finish it")
    info = await system.prds.run("undone", worktree=True)
    await system.events.wait_state("undone", "completed")
    [retry] = system.events.of("undone", "prd.retry.scheduled")
    assert retry["attempt"] == 1 and "did not report the story done" in retry["reason"]
    # the checks ran only for the attempt that said it was done
    assert [r["attempt"] for r in system.events.of("undone", "prd.quality.report")] == [2]
    assert system.stories("undone")[0]["attempts"] == 2
    assert git(Path(info.work_dir), "show", "HEAD:undone.txt") == "whole"


async def test_max_iterations_pauses_the_loop_with_the_reason_and_resume_goes_on(system: System) -> None:
    p = system.provider
    p.scripts["tries/US-001"] = [
        Act(write={"tries.txt": "1\n", "broken.txt": "x"}),
        Act(write={"tries.txt": "2\n"}),
        Act(delete=("broken.txt",)),
    ]
    await system.create("tries", "Three tries")
    with prd_settings(max_iterations=2):
        await system.prds.run("tries", worktree=True)
        await system.events.wait_state("tries", "paused")
    loop = (await system.prds.get("tries")).loop
    assert loop is not None and loop.state == "paused" and loop.iterations == 2
    assert "max_iterations is 2" in loop.error
    [paused] = [e for e in system.events.of("tries", "prd.loop.state_changed") if e["to_state"] == "paused"]
    assert "budget reached" in paused["reason"]
    assert len([r for r in p.requests if r.metadata.get("prd") == "tries"]) == 2

    with prd_settings(max_iterations=3):
        await system.prds.resume("tries")
        await system.events.wait_state("tries", "completed")
    assert system.stories("tries")[0]["passes"] is True
    assert (await system.prds.get("tries")).loop.iterations == 3  # type: ignore[union-attr]


async def test_max_cost_usd_pauses_the_loop_once_spent(system: System) -> None:
    p = system.provider
    for story in ("US-001", "US-002", "US-003"):
        p.scripts[f"spend/{story}"] = [Act(write={f"{story}.txt": "x"}, cost_usd=0.6)]
    await system.create("spend", "One", "Two", "Three")
    with prd_settings(max_cost_usd=1.0):
        await system.prds.run("spend", worktree=True)
        await system.events.wait_state("spend", "paused")
    loop = (await system.prds.get("spend")).loop
    assert loop is not None and loop.cost_usd == pytest.approx(1.2)
    assert "max_cost_usd is $1" in loop.error
    assert [s["passes"] for s in system.stories("spend")] == [True, True, False]
    await system.prds.stop("spend")


async def test_a_notify_webhook_gets_the_completed_loop_and_a_failing_one_is_an_event(
    system: System,
) -> None:
    system.provider.scripts["told/US-001"] = [Act(write={"told.txt": "t\n"})]
    await system.create("told", "Tell me")
    async with receiver() as got:
        hooks = [{"url": f"{got.url}/done", "on": ["completed"]}, {"url": f"{got.url}/moved"}]
        with prd_settings(notify=hooks):
            info = await system.prds.run("told", worktree=True)
            notice = await got.wait("/done")
            await got.wait("/moved")
    assert notice["type"] == "prd.notice" and notice["state"] == "completed"
    assert notice["reason"] == "every story passed"
    assert notice["prd"] == "told" and notice["project_id"] == system.project_id
    assert notice["branch"] == info.branch and notice["iterations"] == 1
    await system.events.wait(lambda: bool(system.events.of("told", "prd.error")))
    [failed] = system.events.of("told", "prd.error")
    assert failed["kind"] == "notify" and "redirect, not followed" in failed["message"]
    assert [p for p, _ in got.posts] == ["/done", "/moved"]  # the redirect was not followed
    loop = (await system.prds.get("told")).loop
    assert loop is not None and loop.state == "completed"  # a failed notice changes nothing


async def test_an_untrusted_projects_notify_is_ignored_with_a_notice(system: System, tmp_path: Path) -> None:
    root = git_repo(tmp_path / "untrusted")
    (root / ".jido").mkdir()
    async with receiver() as got:
        layer = {"prd": {"notify": [{"url": f"{got.url}/project"}]}}
        (root / ".jido" / "settings.json").write_text(json.dumps(layer))
        git(root, "add", ".jido/settings.json")
        git(root, "commit", "-q", "-m", "a project that asks to be told")
        project = await EngineClient(system.bus).start_project(str(root), timeout=30)
        events = Events()
        await events.follow(system.bus, project.project_id)
        prds = PrdClient(system.bus, project.project_id, timeout=30)
        system.provider.scripts["quiet/US-001"] = [Act(write={"quiet.txt": "q\n"})]
        await prds.create("quiet", stories=[StoryDraft(title="Quiet")])
        with prd_settings(notify=[{"url": f"{got.url}/global"}]):
            info = await prds.run("quiet", worktree=True)
            await got.wait("/global")  # the user's own hook, sent once the loop completed
        await events.wait_state("quiet", "completed")
    assert [p for p, _ in got.posts] == ["/global"]
    assert any("not trusted" in w and "notify" in w for w in info.warnings), info.warnings
