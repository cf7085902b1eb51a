"""The web console in a real headless browser (Debian's Chromium driven by Playwright) against
the gateway on a random loopback port, every service in-process and the scripted model:
log in, start a project and a conversation, watch an answer stream in, approve a tool call
with a click, see model text with markup shown as text, watch the bus view.

Screenshots are saved under ``$JIDO_TEST_ARTIFACTS/console`` (else pytest's tmp dir; the
path is printed).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest
from playwright.async_api import BrowserContext, Locator, Page, expect

from jidocode.cli.dev.scripted_llm import Reply, call
from tests.e2e.console_fixtures import CHROMIUM, MODEL, ConsoleSystem, console_system, screenshots
from tests.integration.tools.mcp_support import FLAKY, sandbox_readable, stdio, write_mcp_json

__all__ = ["console_system", "screenshots"]  # fixtures

pytestmark = [
    pytest.mark.slow,
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"needs Debian's Chromium at {CHROMIUM}"),
]

#: Generous for a loaded machine: every wait below is for an event, this only bounds it.
WAIT_MS = 30_000
expect.set_options(timeout=WAIT_MS)

ANSWER = "Hello from the scripted model, streamed in small pieces."
MARKUP = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2"><b>bold?</b>'


async def _log_in(system: ConsoleSystem) -> BrowserContext:
    """A browser context that logged in with the token (its cookie is set)."""
    context = await system.browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(WAIT_MS)
    page = await context.new_page()
    response = await page.goto(f"{system.base_url}/login?token={system.token}")
    assert response is not None and response.ok
    assert page.url == f"{system.base_url}/"
    await page.close()
    return context


async def _send(page: Page, text: str) -> None:
    await page.fill("#composer textarea", text)
    await page.click("#composer button[type=submit]")


async def _pages_need_the_token(console_system: ConsoleSystem) -> None:
    context = await console_system.browser.new_context()
    try:
        page = await context.new_page()
        response = await page.goto(f"{console_system.base_url}/")
        assert response is not None and response.status == 401
        body = await response.text()
        assert "unauthorized" in body and console_system.token not in body
        response = await page.goto(f"{console_system.base_url}/login?token=not-{console_system.token}")
        assert response is not None and response.status == 401
    finally:
        await context.close()


async def _conversation_live_from_start_to_approval(
    logged_in: BrowserContext, console_system: ConsoleSystem, screenshots: Path
) -> None:
    system = console_system
    page = await logged_in.new_page()
    await page.goto(f"{system.base_url}/")
    await expect(page.locator("h1")).to_have_text("Projects")

    # start the project by its path
    await page.fill("#root", str(system.project))
    await page.click("#start-project button[type=submit]")
    await page.wait_for_url(re.compile(r"/console/projects/[^/]+$"))
    await expect(page.locator("h1 .path")).to_have_text(str(system.project.resolve()))
    await expect(page.locator("dl.tools")).to_contain_text("read_file")
    await page.screenshot(path=screenshots / "1-project.png", full_page=True)

    # start a conversation
    await page.fill("#conversation-id", "console-demo")
    await page.click("#start-conversation button[type=submit]")
    await page.wait_for_url(re.compile(r"/conversations/console-demo$"))
    response = await page.request.get(page.url)
    assert "script-src 'self'" in response.headers["content-security-policy"]
    await expect(page.locator("#connection")).to_have_text("live")

    # every text the assistant's bubble shows, recorded as the page changes (a MutationObserver
    # runs after each SSE message's task, so the pieces are seen however loaded the machine is)
    await page.evaluate(
        """() => {
            window.__seen = [];
            new MutationObserver(() => {
                const bubble = document.querySelector("#timeline .message.assistant .text");
                if (bubble) window.__seen.push(bubble.textContent);
            }).observe(document.getElementById("timeline"), {childList: true, subtree: true, characterData: true});
        }"""
    )
    system.llm.script(
        Reply.answer(ANSWER, chunk_chars=6, chunk_delay_s=0.02, prompt_tokens=120, completion_tokens=12)
    )
    await _send(page, "Say hello")
    await expect(page.locator("#timeline .message.user .text")).to_have_text("Say hello")
    done = page.locator("#timeline .message.assistant[data-complete=true] .text")
    await expect(done).to_have_text(ANSWER)
    seen: list[str] = await page.evaluate("window.__seen")
    partial = [text for text in seen if text and text != ANSWER]
    assert partial, f"the answer never showed in pieces: {seen}"
    assert all(ANSWER.startswith(text) for text in partial)
    await expect(page.locator("#usage-calls")).to_have_text("1")
    await expect(page.locator("#usage-prompt")).to_have_text("120")
    await expect(page.locator("#usage-completion")).to_have_text("12")
    # the cost is litellm's price of the model for those tokens (imported here, not at collection:
    # it takes seconds, and the fixture has imported it already)
    import litellm

    prompt_cost, completion_cost = litellm.cost_per_token(
        model=MODEL, prompt_tokens=120, completion_tokens=12
    )
    shown = await page.locator("#usage-cost").inner_text()
    assert shown.startswith("$") and float(shown[1:]) == pytest.approx(
        prompt_cost + completion_cost, rel=0.01
    )
    await expect(page.locator("#usage-model")).to_contain_text(MODEL)
    await page.screenshot(path=screenshots / "2-answer-streamed.png", full_page=True)

    # a tool call under an `ask` rule: approved with a click
    system.llm.script(
        Reply.tools(call("write_file", path="ask/x.txt", content="after\n")),
        Reply.answer("Written, thanks for approving."),
    )
    await _send(page, "Please write ask/x.txt")
    tool = page.locator("#timeline .tool").first
    await expect(tool.locator(".name")).to_have_text("write_file")
    await expect(tool.locator(".args")).to_contain_text('"path": "ask/x.txt"')
    allow = tool.locator(".approval button.allow")
    await expect(allow).to_be_visible()
    await expect(tool.locator(".badge")).to_have_text("waiting for you")
    await page.screenshot(path=screenshots / "3-approval-asked.png", full_page=True)
    assert (system.project / "ask" / "x.txt").read_text() == "before\n"
    await allow.click()
    await expect(tool.locator(".badge")).to_have_text("completed")
    await expect(tool.locator(".decision")).to_have_text("approved by you (once)")
    await expect(tool.locator(".duration")).to_have_text(re.compile(r"^\d+ ms$"))
    await expect(tool.locator(".result")).to_be_visible()
    await expect(page.locator("#timeline .message.assistant[data-complete=true] .text").last).to_have_text(
        "Written, thanks for approving."
    )
    assert (system.project / "ask" / "x.txt").read_text() == "after\n"
    await expect(page.locator("#usage-calls")).to_have_text("3")
    # the tool-call turn's model call left no empty bubble behind
    await expect(page.locator("#timeline .message.assistant")).to_have_count(2)
    await page.screenshot(path=screenshots / "4-approved.png", full_page=True)

    # model text is untrusted: markup in it is shown as text, never run
    system.llm.script(Reply.answer(MARKUP))
    await _send(page, "Answer with some markup")
    last = page.locator("#timeline .message.assistant[data-complete=true] .text").last
    await expect(last).to_have_text(MARKUP)
    assert await page.evaluate("window.__pwned") is None
    assert await page.locator("#timeline img, #timeline b, #timeline script").count() == 0
    await page.screenshot(path=screenshots / "5-markup-as-text.png", full_page=True)

    # a reload replays the whole conversation from its start
    await page.reload()
    await expect(page.locator("#timeline .message.user")).to_have_count(3)
    await expect(page.locator("#timeline .tool .decision")).to_have_text("approved by you (once)")
    await expect(page.locator("#usage-calls")).to_have_text("4")
    await expect(page.locator("#timeline .message.assistant")).to_have_count(3)
    await page.close()


async def _deny_with_a_click_and_cancel(logged_in: BrowserContext, console_system: ConsoleSystem) -> None:
    system = console_system
    async with httpx.AsyncClient(
        base_url=system.base_url, headers={"Authorization": f"Bearer {system.token}"}, timeout=30
    ) as api:
        pid = (await api.post("/api/projects", json={"root": str(system.project)})).json()["project_id"]
        await api.post(f"/api/projects/{pid}/conversations", json={"conversation_id": "deny-demo"})
    page = await logged_in.new_page()
    await page.goto(f"{system.base_url}/console/projects/{pid}/conversations/deny-demo")
    await expect(page.locator("#connection")).to_have_text("live")
    system.llm.script(
        Reply.tools(call("write_file", path="ask/denied.txt", content="no\n")),
        Reply.answer("Understood, not written."),
    )
    await _send(page, "Write ask/denied.txt")
    tool = page.locator("#timeline .tool").first
    await tool.locator(".approval button.deny").click()
    await expect(tool.locator(".decision")).to_have_text("denied by you")
    await expect(tool.locator(".badge")).to_have_text("failed")
    await expect(tool.locator(".outcome summary")).to_have_text("error")
    await expect(page.locator("#timeline .message.assistant[data-complete=true] .text")).to_have_text(
        "Understood, not written."
    )
    assert not (system.project / "ask" / "denied.txt").exists()

    # Cancel puts a notice in the timeline (the conversation's own conversation.cancel)
    await page.click("#cancel")
    await expect(page.locator("#timeline .notice[data-type='conversation.cancel']")).to_contain_text(
        "cancelled: cancelled from the console"
    )
    await page.click("#resume")
    await expect(page.locator("#timeline .notice[data-type='conversation.resume']")).to_have_text(
        re.compile(r"resumed$")
    )
    await page.close()


async def _bus_view_shows_events_as_they_happen(
    logged_in: BrowserContext, console_system: ConsoleSystem, screenshots: Path
) -> None:
    system = console_system
    async with httpx.AsyncClient(
        base_url=system.base_url, headers={"Authorization": f"Bearer {system.token}"}, timeout=30
    ) as api:
        started = await api.post("/api/projects", json={"root": str(system.project)})
        pid = started.json()["project_id"]
        await api.post(f"/api/projects/{pid}/conversations", json={"conversation_id": "bus-demo"})
        page = await logged_in.new_page()
        await page.goto(f"{system.base_url}/console/bus?conversation=bus-demo")
        await expect(page.locator("#connection")).to_have_text("live")
        system.llm.script(Reply.answer("Seen on the bus."))
        sent = await api.post(f"/api/projects/{pid}/conversations/bus-demo/messages", json={"text": "hi bus"})
        assert sent.status_code == 202, sent.text

        def rows(event_type: str) -> Locator:
            return page.locator(f"#events tr[data-type='{event_type}']")

        await expect(rows("conversation.user.message")).to_have_count(1)
        await expect(rows("llm.completed")).to_have_count(1)
        await expect(rows("conversation.assistant.message")).to_have_count(1)
        conversations = await page.locator("#events tr td:nth-child(4)").all_inner_texts()
        assert conversations and set(conversations) == {"bus-demo"}
        await page.screenshot(path=screenshots / "6-bus.png", full_page=True)

        # the type filter (a prefix ending in *), set through the form
        await page.fill("#filters input[name=type]", "llm.*")
        await page.click("#filters button[type=submit]")
        await page.wait_for_url(re.compile(r"type=llm\.\*"))
        await expect(page.locator("#connection")).to_have_text("live")
        system.llm.script(Reply.answer("Filtered."))
        await api.post(f"/api/projects/{pid}/conversations/bus-demo/messages", json={"text": "again"})
        await expect(rows("llm.completed")).to_have_count(1)
        types = await page.locator("#events tr td.type").all_inner_texts()
        assert types and all(t.startswith("llm.") for t in types), types
        await page.close()


async def _pages_of_what_does_not_exist_say_so(console_system: ConsoleSystem) -> None:
    system = console_system
    async with httpx.AsyncClient(
        base_url=system.base_url, headers={"Authorization": f"Bearer {system.token}"}, timeout=30
    ) as api:
        pid = (await api.post("/api/projects", json={"root": str(system.project)})).json()["project_id"]
        missing = await api.get(f"/console/projects/{pid}/conversations/nobody-here")
        assert missing.status_code == 404
        assert "no conversation &#39;nobody-here&#39; in project" in missing.text
        unknown = await api.get("/console/projects/no-such-project")
        assert unknown.status_code == 404, unknown.text
        assert "not_found" in unknown.text


async def _stop_a_project_from_the_projects_page(
    logged_in: BrowserContext, console_system: ConsoleSystem
) -> None:
    other = console_system.project.parent / "other"
    other.mkdir()
    page = await logged_in.new_page()
    await page.goto(f"{console_system.base_url}/")
    await page.fill("#root", str(other))
    await page.click("#start-project button[type=submit]")
    await page.wait_for_url(re.compile(r"/console/projects/[^/]+$"))
    pid = page.url.rsplit("/", 1)[1]
    await page.goto(f"{console_system.base_url}/")
    row = page.locator("table.list tbody tr", has=page.locator(f"a[href$='/{pid}']"))
    await expect(row.locator(".badge")).to_have_text("running")
    await row.locator("button.stop-project").click()
    await expect(row.locator(".badge")).to_have_text("stopped")
    await expect(row.locator("button.stop-project")).to_have_count(0)

    # a path the engine refuses: its error shows beside the form
    await page.fill("#root", "/")
    await page.click("#start-project button[type=submit]")
    await expect(page.locator("#start-project output.error")).not_to_be_empty()
    assert page.url == f"{console_system.base_url}/"
    await page.close()


async def _fill_a_servers_form(logged_in: BrowserContext, console_system: ConsoleSystem) -> None:
    """An MCP server's elicitation with a form (issue 26): the card shows typed inputs, the
    server's choices as text; Send gives the server typed values."""
    system = console_system
    root = system.project.parent / "forms"  # under the trusted folder
    write_mcp_json(root, {"flaky": stdio(FLAKY)})
    # the sandbox reads the test server's folder (the global layer names it, as in the MCP tests)
    (system.project.parent / "jido_home" / "settings.json").write_text(
        json.dumps({"permissions": {"additional_directories": sandbox_readable()}})
    )
    (root / ".jido").mkdir()
    (root / ".jido" / "settings.json").write_text(json.dumps({"permissions": {"allow": ["mcp__flaky"]}}))
    async with httpx.AsyncClient(
        base_url=system.base_url, headers={"Authorization": f"Bearer {system.token}"}, timeout=60
    ) as api:
        pid = (await api.post("/api/projects", json={"root": str(root)})).json()["project_id"]
        await api.post(f"/api/projects/{pid}/conversations", json={"conversation_id": "form-demo"})
    page = await logged_in.new_page()
    await page.goto(f"{system.base_url}/console/projects/{pid}/conversations/form-demo")
    await expect(page.locator("#connection")).to_have_text("live")
    system.llm.script(Reply.tools(call("mcp__flaky__order")), Reply.answer("Order placed."))
    await _send(page, "Order something")
    form = page.locator("#timeline .tool .approval form.elicitation")
    await expect(form.locator("select option")).to_have_text(["red", "green", "blue"], timeout=90_000)
    await expect(page.locator("#timeline .tool .approval:has(form.elicitation)")).to_contain_text(
        "Your order?"
    )
    await expect(form).to_contain_text("Who orders")
    await form.locator("input[type=text]").fill("Ada")
    await form.locator("input[type=number]").fill("3")
    await form.locator("input[type=checkbox]").check()
    await form.locator("select").select_option("green")
    await form.locator("button[type=submit]").click()
    await expect(page.locator("#timeline .message.assistant[data-complete=true] .text").last).to_have_text(
        "Order placed."
    )
    await expect(page.locator("#timeline .tool .result").first).to_contain_text('\\"count\\": 3')
    await page.close()


@pytest.mark.timeout(300)  # set-up and steps take ~25 s idle, ~60 s on two cores busy with other tests
async def test_the_console(console_system: ConsoleSystem, screenshots: Path) -> None:
    """The steps share one system and one browser: as one test, whatever runs the suite's
    tests on which worker, the module starts them once."""
    await _pages_need_the_token(console_system)
    logged_in = await _log_in(console_system)
    try:
        await _conversation_live_from_start_to_approval(logged_in, console_system, screenshots)
        await _deny_with_a_click_and_cancel(logged_in, console_system)
        await _fill_a_servers_form(logged_in, console_system)
        await _bus_view_shows_events_as_they_happen(logged_in, console_system, screenshots)
        await _pages_of_what_does_not_exist_say_so(console_system)
        await _stop_a_project_from_the_projects_page(logged_in, console_system)
    finally:
        await logged_in.close()
