"""The system prompt is built once per asset generation, not once per turn."""

from __future__ import annotations

import asyncio
from pathlib import Path

from jidocode.services.conversation.llm.prompt import SystemPrompts
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.envelope import Envelope
from jidocode.shared.events.assets import AssetsReloaded, SkillRegistryUpdated
from jidocode.shared.events.engine import GetProject, ProjectInfo, ProjectStopped
from jidocode.shared.service import ServiceHost


class _Counting(SystemPrompts):
    def __init__(self, bus: Bus, **kw: object) -> None:
        super().__init__(bus, **kw)  # type: ignore[arg-type]
        self.forgotten = asyncio.Event()

    def forget(self, project_id: str) -> None:
        super().forget(project_id)
        self.forgotten.set()


async def test_prompt_is_reused_until_the_assets_reload(bus: Bus, tmp_path: Path, jido_home: Path) -> None:
    root = tmp_path / "p"
    (root / ".jido").mkdir(parents=True)
    (root / ".jido" / "JIDO.md").write_text("First rule.")
    asked: list[str] = []

    async def info(cmd: GetProject, env: Envelope) -> ProjectInfo:
        asked.append(env.id)
        return ProjectInfo(project_id="p1", root_path=str(root), data_dir=".jido", started_at="now")

    host = ServiceHost(bus, name="project")
    host.endpoint(GetProject, subjects.project("p1", "info"), info)
    await host.start()
    prompts = _Counting(bus, jido_home=jido_home, timeout_s=1.0, retry_s=3600.0)
    try:
        first = await prompts.for_project("p1")
        assert first is not None and "First rule." in first
        (root / ".jido" / "JIDO.md").write_text("Second rule.")
        for _ in range(5):  # turns in the same generation: no request, the same prompt
            assert await prompts.for_project("p1") is first
        assert len(asked) == 1

        # another project's reload leaves this one alone
        await bus.emit(AssetsReloaded(project_id="p2", generation=2, counts={}), project_id="p2")
        await asyncio.wait_for(prompts.forgotten.wait(), 10)
        prompts.forgotten.clear()
        assert await prompts.for_project("p1") is first

        await bus.emit(AssetsReloaded(project_id="p1", generation=2, counts={}), project_id="p1")
        await asyncio.wait_for(prompts.forgotten.wait(), 10)
        second = await prompts.for_project("p1")
        assert second is not None and "Second rule." in second and "First rule." not in second
        assert len(asked) == 2

        # the other signals that say the project's assets changed drop the prompt too
        for stale in (
            SkillRegistryUpdated(project_id="p1", skills=[], count=0),
            ProjectStopped(project_id="p1", root_path=str(root)),
        ):
            prompts.forgotten.clear()
            built = len(asked)
            await bus.emit(stale, project_id="p1")
            await asyncio.wait_for(prompts.forgotten.wait(), 10)
            assert await prompts.for_project("p1") is not None
            assert len(asked) == built + 1, stale.type  # rebuilt: the project was asked again
    finally:
        await prompts.close()
        await host.stop()
