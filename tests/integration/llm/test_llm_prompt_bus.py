"""The system prompt gathered over the bus, degrading part by part."""

from __future__ import annotations

import json
from pathlib import Path

from jidocode.services.conversation.llm.prompt import SystemPrompts
from jidocode.shared.bus import Bus
from jidocode.shared.endpoints import endpoint
from jidocode.shared.envelope import Envelope
from jidocode.shared.events.engine import GetProject, ProjectInfo
from jidocode.shared.service import ServiceHost


async def test_unknown_project_gives_no_prompt(bus: Bus) -> None:
    assert await SystemPrompts(bus, timeout_s=1.0).for_project("nobody") is None


async def test_without_asset_loader_the_prompt_says_so(bus: Bus, tmp_path: Path, jido_home: Path) -> None:
    root = tmp_path / "p"
    (root / ".jido").mkdir(parents=True)
    (root / ".jido" / "settings.json").write_text(json.dumps({"permissions": {"deny": ["Bash(rm:*)"]}}))
    (root / "CLAUDE.md").write_text("Prefer small diffs.")
    (jido_home / "JIDO.md").write_text("Be brief.")

    async def info(cmd: GetProject, env: Envelope) -> ProjectInfo:
        assert env.project_id == "p1"
        return ProjectInfo(project_id="p1", root_path=str(root), data_dir=".jido", started_at="now")

    host = ServiceHost(bus, name="project")
    host.serve(endpoint("project", "info"), info)
    await host.start()
    try:
        prompts = SystemPrompts(bus, jido_home=jido_home, timeout_s=1.0)
        text = await prompts.for_project("p1")
        assert text is not None
        assert f"Project root: {root}" in text
        assert "Denied: Bash(rm:*)" in text
        assert "Be brief." in text and "Prefer small diffs." in text
        assert "index is unavailable right now: service_unavailable" in text
        assert await prompts.for_project("p1") is text  # cached
    finally:
        await host.stop()
