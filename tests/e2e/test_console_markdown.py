"""The console renders an answer's markdown (parsed by the gateway, built as DOM nodes) and keeps
hostile text inert; a model without a price shows an unknown cost, never $0; a project's page
lists its conversations by title with their whole ids. In headless Chromium against the running
system (tests/e2e/console_fixtures.py)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from playwright.async_api import BrowserContext, expect

from jidocode.cli.dev.scripted_llm import Reply
from jidocode.shared.bus import Bus
from jidocode.shared.clients import ConversationsClient
from tests.e2e.console_fixtures import CHROMIUM, ConsoleSystem, console_system, screenshots

__all__ = ["console_system", "screenshots"]  # fixtures

pytestmark = [
    pytest.mark.slow,
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"needs Debian's Chromium at {CHROMIUM}"),
]

WAIT_MS = 30_000
expect.set_options(timeout=WAIT_MS)

MARKDOWN = (
    "# Plan\n\n"
    "Run **the tests** with `pytest`, then:\n\n"
    "- read the log\n- fix it\n\n"
    "```\nprint('<b>not bold</b>')\n```\n\n"
    "| step | done |\n|---|---|\n| one | yes |\n\n"
    "See [the docs](https://example.com/docs) or [this](javascript:window.__pwned=3) "
    "[or that](data:text/html,<script>window.__pwned=4</script>).\n\n"
    '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2"><b>bold?</b>'
)
TITLE = "Plan the test run, in markdown please"


async def _logged_in(system: ConsoleSystem) -> BrowserContext:
    context = await system.browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(WAIT_MS)
    page = await context.new_page()
    response = await page.goto(f"{system.base_url}/login?token={system.token}")
    assert response is not None and response.ok
    await page.close()
    return context


async def _conversation(system: ConsoleSystem, cid: str) -> str:
    """The project started over HTTP, and a conversation in it whose model litellm has no price
    for (a per-conversation setting, sent on the bus: the HTTP body has none; the same scripted
    server answers)."""
    async with httpx.AsyncClient(
        base_url=system.base_url, headers={"Authorization": f"Bearer {system.token}"}, timeout=60
    ) as api:
        started = await api.post("/api/projects", json={"root": str(system.project)})
        assert started.status_code == 200, started.text
        pid = str(started.json()["project_id"])
    bus = await Bus.connect(system.config, "markdown-test")
    try:
        await ConversationsClient(bus, pid).start(cid, settings={"model": "openai/scripted"})
    finally:
        await bus.close()
    return pid


@pytest.mark.timeout(300)
async def test_markdown_renders_inert_and_an_unpriced_cost_is_unknown(
    console_system: ConsoleSystem, screenshots: Path
) -> None:
    system = console_system
    cid = "markdown-demo-with-a-long-id-that-is-shown-whole-in-the-list-0123456789"
    pid = await _conversation(system, cid)
    context = await _logged_in(system)
    try:
        page = await context.new_page()
        await page.goto(f"{system.base_url}/console/projects/{pid}/conversations/{cid}")
        await expect(page.locator("#connection")).to_have_text("live")
        system.llm.script(Reply.answer(MARKDOWN))
        await page.fill("#composer textarea", TITLE)
        await page.click("#composer button[type=submit]")
        answer = page.locator("#timeline .message.assistant[data-complete=true] .text")
        await expect(answer.locator("h1")).to_have_text("Plan")
        await expect(answer.locator("strong").first).to_have_text("the tests")
        await expect(answer.locator("p code")).to_have_text("pytest")
        await expect(answer.locator("ul > li")).to_have_count(2)
        await expect(answer.locator("pre code")).to_have_text("print('<b>not bold</b>')\n")
        await expect(answer.locator("table td").first).to_have_text("one")
        link = answer.locator("a")
        await expect(link).to_have_count(1)
        await expect(link).to_have_attribute("href", "https://example.com/docs")
        await expect(link).to_have_attribute("rel", "noopener noreferrer nofollow")
        # the hostile parts are text: no element of theirs, nothing ran
        await expect(answer).to_contain_text(
            '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
        )
        await expect(answer).to_contain_text("[this](javascript:window.__pwned=3)")
        assert await page.locator("#timeline script, #timeline img, #timeline iframe").count() == 0
        assert await answer.locator("b").count() == 0
        assert await page.evaluate("window.__pwned") is None
        # the model has no price: the cost is unknown, never $0
        await expect(page.locator("#usage-calls")).to_have_text("1")
        await expect(page.locator("#usage-cost")).to_have_text("unknown (1 call unpriced)")
        await page.screenshot(path=screenshots / "markdown-answer.png", full_page=True)

        # a reload replays it: rendered the same
        await page.reload()
        await expect(answer.locator("h1")).to_have_text("Plan")
        await expect(page.locator("#usage-cost")).to_have_text("unknown (1 call unpriced)")

        # the project's page lists it by its title, with its whole id
        await page.goto(f"{system.base_url}/console/projects/{pid}")
        row = page.locator("table.list tbody tr", has=page.locator(f"a[href$='/{cid}']"))
        await expect(row.locator("td.id")).to_have_text(cid)
        await expect(row.locator("td.title")).to_have_text(TITLE)
        await page.close()
    finally:
        await context.close()
