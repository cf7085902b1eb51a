"""`jidocode prd …`, the TUI and the gateway's PRD routes against one running system.

A real nats-server, the engine and the prd service in this process with an instant provider
(it answers at once: the loop, git and the checks in the real sandbox are real), and the
gateway served by uvicorn on a random loopback port, reached with httpx. The CLI runs through
typer's CliRunner in a worker thread (it runs its own event loop, as from a terminal).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from click.testing import Result
from textual.widgets import OptionList, RichLog
from typer.testing import CliRunner

from jidocode.cli.main import app
from jidocode.cli.prd_tui import BusSource, PrdApp, PrdPicker
from jidocode.services.gateway.service import GatewayServer, make_context
from jidocode.services.gateway.settings import GatewaySettings
from jidocode.services.prd import service as prd_service
from jidocode.services.prd.config import PrdConfig
from jidocode.services.prd.loop import LoopSettings
from jidocode.services.prd.providers.base import Provider
from jidocode.services.registry import serve_many
from jidocode.shared.bus import Bus
from jidocode.shared.clients import EngineClient, PrdClient
from jidocode.shared.config import Config
from jidocode.shared.events.prd import StoryDraft
from jidocode.shared.natsserver import NatsServer
from jidocode.shared.trust import trust_project
from tests.helpers import wait_for_services
from tests.integration.prd.helpers import git, git_repo
from tests.integration.prd.instant import Act, InstantProvider
from tests.sse_reader import SseMessage, read_sse

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

WAIT = 60.0
TOKEN = "prd-ui-test-token-" + "k" * 24
CHECK = "test -e one.txt"


@dataclass
class System:
    config: Config
    bus: Bus
    root: Path
    project_id: str
    provider: InstantProvider
    gateway: GatewayServer
    env: dict[str, str]

    async def cli(self, *args: str, input: str | None = None) -> Result:
        """``jidocode <args>`` as a terminal would run it (its own event loop, in a thread)."""
        runner = CliRunner()
        return await asyncio.wait_for(
            asyncio.to_thread(runner.invoke, app, list(args), input=input, env=self.env), WAIT
        )

    def http(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.gateway.base_url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=WAIT
        )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[System]:
    base = tmp_path_factory.mktemp("prdui")
    home = base / "home"
    home.mkdir()
    (home / "settings.json").write_text(
        json.dumps({"prd": {"retry": {"max_retries": 1, "retry_delays": [0]}, "quality_commands": [CHECK]}})
    )
    root = git_repo(base / "repo")
    trust_project(root, home=home)
    server = NatsServer(store_dir=base / "js", sync="default").start()
    saved = {k: os.environ.get(k) for k in ("JIDO_CODE_HOME",)}
    os.environ["JIDO_CODE_HOME"] = str(home)
    config = Config(nats_url=server.url, jido_home=home, instance="test")
    provider = InstantProvider()

    def resolve(key: str, project_id: str, cfg: PrdConfig) -> Provider:
        return provider

    stop = asyncio.Event()
    tasks = [
        asyncio.create_task(serve_many(config, stop, names=("engine",))),
        asyncio.create_task(
            prd_service.serve(
                config, stop, resolve_provider=resolve, settings=LoopSettings(heartbeat_s=0.5, lease_s=3.0)
            )
        ),
    ]
    bus = await Bus.connect(config, "test")
    settings = GatewaySettings(host="127.0.0.1", port=0, token=TOKEN, data_home=base / "data", sse_ping_s=1.0)
    gateway = GatewayServer(make_context(bus, config, settings))
    try:
        await wait_for_services(config, timeout=WAIT, names=("engine", "prd"))
        await gateway.start()
        info = await EngineClient(bus).start_project(str(root), timeout=30)
        env = {"NATS_URL": server.url, "JIDO_CODE_HOME": str(home), "COLUMNS": "200"}
        yield System(config, bus, root, info.project_id, provider, gateway, env)
    finally:
        await gateway.stop()
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
        await bus.close()
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _flat(result: Result) -> str:
    return " ".join(result.output.split())


async def test_the_cli_creates_lists_shows_and_runs_a_prd_live(system: System, tmp_path: Path) -> None:
    stories = tmp_path / "stories.json"
    stories.write_text(
        json.dumps(
            [
                {"title": "One file", "acceptance_criteria": ["one.txt exists"], "priority": 1},
                {"title": "[bold]Two[/bold] files", "priority": 2},
            ]
        )
    )
    root = str(system.root)
    created = await system.cli("prd", "new", root, "demo", "--title", "Demo", "--from", str(stories))
    assert created.exit_code == 0, created.output
    assert "created demo with 2 stories" in _flat(created)
    again = await system.cli("prd", "new", root, "demo")
    assert again.exit_code == 1 and "conflict" in again.output and "demo" in again.output

    listed = await system.cli("prd", "list", root, "--json")
    assert listed.exit_code == 0, listed.output
    assert [
        (p["name"], p["stories"], p["passed"], p["state"]) for p in json.loads(listed.output)["prds"]
    ] == [("demo", 2, 0, "ready")]
    missing = await system.cli("prd", "show", root, "nosuch")
    assert missing.exit_code == 2 and "not_found" in missing.output and "nosuch" in missing.output

    system.provider.scripts["demo/US-001"] = [Act(write={"one.txt": "1\n"})]
    system.provider.scripts["demo/US-002"] = [
        Act(write={"two.txt": "[link=https://x.example]2[/link]\n"}),
        Act(write={"two.txt": "again\n"}),
    ]
    ran = await system.cli("prd", "run", root, "demo")
    out = _flat(ran)
    assert ran.exit_code == 0, ran.output
    # live: each story's header, its tool lines, the checks, the commit, then the loop's end
    for expected in (
        "━━ story US-001 · attempt 1 · instant",
        "⏺ write_file(path=one.txt)",
        "checks passed (1)",
        f"✓ {CHECK}",
        "● committed",
        "━━ story US-002 · attempt 1",
        "loop running → completed",
    ):
        assert expected in out, f"{expected!r} not in:\n{ran.output}"
    assert out.index("US-001 · attempt 1") < out.index("US-002 · attempt 1") < out.index("→ completed")
    assert len(git(system.root, "log", "--format=%s").splitlines()) >= 3  # two story commits on the first

    shown = await system.cli("prd", "show", root, "demo")
    assert shown.exit_code == 0, shown.output
    assert "✓ US-001 One file" in shown.output and "✓ US-002 [bold]Two[/bold] files" in shown.output
    assert "loop: completed" in shown.output and "last events:" in shown.output
    assert "loop running → completed" in shown.output

    again_run = await system.cli("prd", "run", root, "demo", "--detach", "--json")
    assert again_run.exit_code == 0, again_run.output  # nothing left to do: it completes at once
    reset = await system.cli("prd", "reset-story", root, "demo", "US-002", "--yes")
    assert reset.exit_code == 0, reset.output
    assert "story US-002 of demo: pending" in _flat(reset)
    # run again: the previous run's last event (→ completed) must not end this one
    rerun = await system.cli("prd", "run", root, "demo", "--json")
    assert rerun.exit_code == 0, rerun.output
    lines = [json.loads(line) for line in rerun.stdout.splitlines()]
    assert lines[0]["type"] == "prd.loop.state_changed" and lines[0]["to_state"] == "running"
    assert [e["seq"] for e in lines] == list(range(lines[0]["seq"], lines[0]["seq"] + len(lines)))
    assert {e["story_id"] for e in lines if e["type"] == "prd.iteration_started"} == {"US-002"}
    assert lines[-1]["to_state"] == "completed"


async def test_ctrl_c_in_prd_run_pauses_the_loop(system: System) -> None:
    """A real terminal's Ctrl-C (SIGINT to the process): the CLI asks for a pause, the service
    cancels the iteration in flight, and the CLI exits 130 once the loop says paused."""
    prds = PrdClient(system.bus, system.project_id, timeout=30)
    await prds.create("blk", stories=[StoryDraft(title="Blocks")])
    system.provider.scripts["blk/US-001"] = [Act(block=True)]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "jidocode.cli.main",
        "prd",
        "run",
        str(system.root),
        "blk",
        env={**os.environ, **system.env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stderr is not None and proc.stdout is not None
    try:
        line = await asyncio.wait_for(proc.stderr.readline(), WAIT)
        assert b"(Ctrl-C pauses it)" in line, line
        await asyncio.wait_for(system.provider.blocked.wait(), WAIT)
        proc.send_signal(signal.SIGINT)
        out, err = await asyncio.wait_for(proc.communicate(), WAIT)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 130, (out, err)
    assert b"pausing the loop" in err
    assert "loop running → paused" in out.decode()
    view = await prds.get("blk")
    assert view.loop is not None and view.loop.state == "paused"
    assert view.prd["userStories"][0]["inProgress"] is True  # the story stays in progress
    await prds.stop("blk")


async def test_the_tui_opens_on_the_running_system(system: System) -> None:
    prds = PrdClient(system.bus, system.project_id, timeout=30)
    await prds.create("tui", title="TUI", stories=[StoryDraft(title="Only [red]one[/red]")])
    source = BusSource(system.bus, system.project_id, "tui")
    view = await prds.get("tui")
    tui = PrdApp(source)
    async with tui.run_test() as pilot:
        await asyncio.wait_for(tui.loaded.wait(), WAIT)
        await pilot.pause()
        assert tui.model.name == "tui" and tui.model.state == (view.loop.state if view.loop else "ready")
        assert "· US-001 Only [red]one[/red]" in str(tui.query_one("#stories").render())
        await pilot.press("p")  # a loop that never ran cannot pause: shown, not raised
        await pilot.pause()
        assert tui.sent == ["pause"] and len(tui.failures) == 1 and "has no loop" in tui.failures[0]
        await pilot.press("q")
    assert tui.return_value == 0


async def test_the_tui_shows_a_finished_prds_history_and_the_picker_lists_the_prds(system: System) -> None:
    """Opened on a PRD whose loop completed, the TUI shows what the loop did (from the PRD's stored
    events), each story's criteria and attempts; without a name, the picker offers every PRD."""
    prds = PrdClient(system.bus, system.project_id, timeout=30)
    story = StoryDraft(title="History", acceptance_criteria=["hist.txt exists", "one.txt stays"])
    await prds.create("hist", title="History", stories=[story])
    system.provider.scripts["hist/US-001"] = [
        Act(write={"hist.txt": "h\n", "one.txt": "1\n"}, say="wrote it")
    ]
    ran = await system.cli("prd", "run", str(system.root), "hist")
    assert ran.exit_code == 0, ran.output

    tui = PrdApp(BusSource(system.bus, system.project_id, "hist"))
    async with tui.run_test(size=(160, 50)) as pilot:
        await asyncio.wait_for(tui.loaded.wait(), WAIT)

        async def history_drawn() -> None:
            while tui.model.seq < tui.read_seq or not tui.query_one("#stream", RichLog).lines:
                await pilot.pause()

        await asyncio.wait_for(history_drawn(), WAIT)
        await pilot.pause()
        stream = "\n".join(strip.text for strip in tui.query_one("#stream", RichLog).lines)
        for expected in ("━━ story US-001 · attempt 1 · instant", "wrote it", "● committed", "→ completed"):
            assert expected in stream, f"{expected!r} not in:\n{stream}"
        checks = "\n".join(strip.text for strip in tui.query_one("#checks", RichLog).lines)
        assert f"✓ {CHECK}" in checks
        assert tui.model.state == "completed"
        shown = str(tui.query_one("#story").render())
        for expected in (
            "✓ US-001 History",
            "• hist.txt exists",
            "• one.txt stays",
            "attempts: 1",
            "#1 committed",
        ):
            assert expected in shown, f"{expected!r} not in:\n{shown}"
        await pilot.press("q")

    await prds.create("hist-next", title="Next", stories=[story])
    listed = (await prds.list()).prds
    picker = PrdPicker(listed)
    async with picker.run_test() as pilot:
        await pilot.pause()
        names = [p.name for p in listed]
        assert {"hist", "hist-next"} <= set(names)
        options = picker.query_one("#prds", OptionList)
        for _ in range(names.index("hist") - (options.highlighted or 0)):
            await pilot.press("down")
        await pilot.press("enter")
    assert picker.return_value == "hist"


async def _collect(
    http: httpx.AsyncClient, path: str, until: str, headers: dict[str, str] | None = None
) -> list[SseMessage]:
    got: list[SseMessage] = []

    async def run() -> list[SseMessage]:
        async with http.stream("GET", path, headers=headers or {}) as response:
            assert response.status_code == 200, await response.aread()
            async for message in read_sse(response.aiter_lines()):
                got.append(message)
                data = message.json().get("data", {})
                if message.event == "prd.loop.state_changed" and data.get("to_state") == until:
                    return got
        raise AssertionError(f"the stream ended early: {[m.event for m in got]}")

    return await asyncio.wait_for(run(), WAIT)


async def test_the_gateway_lists_drives_and_streams_a_prd(system: System) -> None:
    pid = system.project_id
    await PrdClient(system.bus, pid, timeout=30).create(
        "web", title="Web", stories=[StoryDraft(title="Web one")]
    )
    system.provider.scripts["web/US-001"] = [Act(write={"web.txt": "w\n"})]
    base = f"/api/projects/{pid}/prds"
    async with system.http() as http:
        listed = await http.get(base)
        assert listed.status_code == 200 and "web" in [p["name"] for p in listed.json()["prds"]]
        got = await http.get(f"{base}/web")
        assert got.status_code == 200 and got.json()["prd"]["userStories"][0]["title"] == "Web one"
        unknown = await http.get(f"{base}/nosuch")
        assert unknown.status_code == 404 and unknown.json()["error"]["type"] == "not_found"
        assert (await http.get(f"{base}/nosuch/events")).status_code == 404
        bad = await http.get(f"{base}/bad.name")
        assert bad.status_code == 400 and "invalid PRD name 'bad.name'" in bad.json()["error"]["message"]
        wrong = await http.post(f"{base}/web/run", json={"provider": "x" * 65})
        assert wrong.status_code == 422 and "provider" in wrong.text
        badseq = await http.get(f"{base}/web/events", headers={"Last-Event-ID": "abc"})
        assert badseq.status_code == 400 and "seq" in badseq.json()["error"]["message"]

        run = await http.post(f"{base}/web/run", json={})
        assert run.status_code == 200, run.text
        assert run.json()["state"] in ("running", "completed")
        events = await _collect(http, f"{base}/web/events", "completed")
        seqs = [int(m.id or 0) for m in events]
        assert seqs == list(range(1, len(seqs) + 1))  # the SSE ids are the PRD's gapless seq
        for message in events:
            assert message.json()["type"] == message.event and message.json()["data"]["seq"] == int(
                message.id or 0
            )
        types = [m.event for m in events]
        assert (
            "prd.iteration_started" in types
            and "prd.quality.report" in types
            and "prd.git.committed" in types
        )

        middle = len(events) // 2
        rest = await _collect(http, f"{base}/web/events", "completed", {"Last-Event-ID": str(seqs[middle])})
        assert [int(m.id or 0) for m in rest] == seqs[middle + 1 :]

        paused = await http.post(f"{base}/web/pause")
        assert paused.status_code == 409 and paused.json()["error"]["type"] == "conflict"
        stopped = await http.post(f"{base}/web/stop", json={"reason": "r" * 501})
        assert stopped.status_code == 422 and "reason" in stopped.text

        page = await http.get(f"/console/projects/{pid}/prds/web")
        assert page.status_code == 200 and "Web one" in page.text and "completed" in page.text
        listing = await http.get(f"/console/projects/{pid}/prds")
        assert listing.status_code == 200 and f"/console/projects/{pid}/prds/web" in listing.text
        assert (await http.get(f"/console/projects/{pid}/prds/nosuch")).status_code == 404
    openapi = await _openapi(system)
    assert {"/api/projects/{pid}/prds", "/api/projects/{pid}/prds/{name}/events"} <= set(openapi["paths"])


async def _openapi(system: System) -> Any:
    async with system.http() as http:
        return (await http.get("/openapi.json")).json()


CHROMIUM = Path("/usr/bin/chromium")
HOSTILE_FILE = "<img src=x onerror=alert(1)>.txt"


async def test_the_console_prd_page_runs_and_follows_a_prd_in_a_browser(
    system: System, tmp_path: Path
) -> None:
    """Debian's Chromium through Playwright: the page's script follows the SSE stream (loop state,
    story states, events, checks), Run and Pause answer, and event text stays text."""
    if not CHROMIUM.exists():
        pytest.skip(f"needs Debian's Chromium at {CHROMIUM} (apt-get install chromium)")
    from playwright.async_api import async_playwright

    from tests.e2e.console_fixtures import CHROMIUM_ARGS

    prds = PrdClient(system.bus, system.project_id, timeout=30)
    await prds.create("page", title="<b>Page</b>", stories=[StoryDraft(title="<script>x()</script> story")])
    system.provider.scripts["page/US-001"] = [Act(write={"one.txt": "1\n", HOSTILE_FILE: "x\n"})]
    url = f"{system.gateway.base_url}/console/projects/{system.project_id}/prds/page"
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on("dialog", lambda dialog: errors.append(f"dialog: {dialog.message}"))
            await page.goto(f"{system.gateway.base_url}/login?token={TOKEN}")
            await page.goto(url)
            await page.locator("#connection", has_text="live").wait_for(timeout=WAIT * 1000)
            await page.click("button[data-verb=run]")
            await page.locator("#loop-state", has_text="completed").wait_for(timeout=WAIT * 1000)
            story = page.locator('#stories li[data-story-id="US-001"]')
            assert await story.get_attribute("class") == "story passed"
            assert "<script>x()</script> story" in await story.inner_text()
            events = await page.locator("#prd-events li").all_inner_texts()
            text = "\n".join(events)
            assert (
                "loop ready → running" in text and "committed" in text and "loop running → completed" in text
            )
            assert f"⏺ write_file(path={HOSTILE_FILE})" in text  # the tool's input, as text
            assert await page.locator("#prd-events img, #stories script, #prd-events b").count() == 0
            assert "checks passed" in await page.locator("#checks").inner_text()
            await page.screenshot(path=str(tmp_path / "prd-page.png"), full_page=True)

            await page.click("button[data-verb=pause]")
            await page.locator("#loop-controls output", has_text="conflict").wait_for(timeout=WAIT * 1000)

            await page.reload()  # the same events again, from the stream
            await page.locator("#prd-events li", has_text="loop running → completed").wait_for(
                timeout=WAIT * 1000
            )
            assert await page.locator("#prd-events li").all_inner_texts() == events
            assert errors == []
        finally:
            await browser.close()
