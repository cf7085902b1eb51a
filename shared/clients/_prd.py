"""The PRD service's client (seed 004): create, list, read and drive a project's PRD loops."""

from __future__ import annotations

from collections.abc import Sequence

from jidocode.shared.events.prd import (
    CreatePrd,
    FinishPrd,
    GetPrd,
    ListPrds,
    LoopInfo,
    PausePrd,
    PrdFinished,
    PrdList,
    PrdView,
    ResetStory,
    ResumePrd,
    RunPrd,
    StopPrd,
    StoryDraft,
)

from ._base import Ext, ProjectScoped

#: The least a ``finish`` is waited for: a merge, a worktree removal and a push are a dozen git
#: commands, each in the sandbox.
FINISH_TIMEOUT_S = 120.0

__all__ = ["PrdClient"]


class PrdClient(ProjectScoped):
    """``jido.prds.<p>.<verb>`` of one project."""

    service = "prd"

    async def create(
        self,
        name: str,
        *,
        title: str = "",
        description: str = "",
        branch_name: str = "",
        stories: Sequence[StoryDraft] = (),
        timeout: float | None = None,
        **ext: Ext,
    ) -> PrdView:
        cmd = CreatePrd(
            name=name, title=title, description=description, branch_name=branch_name, stories=list(stories)
        )
        return await self._scoped("create", cmd, timeout=timeout, **ext)

    async def list(self, *, timeout: float | None = None, **ext: Ext) -> PrdList:
        return await self._scoped("list", ListPrds(), timeout=timeout, **ext)

    async def get(self, name: str, *, timeout: float | None = None, **ext: Ext) -> PrdView:
        return await self._scoped("get", GetPrd(name=name), timeout=timeout, **ext)

    async def run(
        self,
        name: str,
        *,
        provider: str = "",
        model: str = "",
        worktree: bool = False,
        branch: str = "",
        allow_dirty: bool = False,
        timeout: float | None = None,
        **ext: Ext,
    ) -> LoopInfo:
        """Start the loop; it runs on in the service (follow ``jido.prd.<p>.<name>.>``)."""
        cmd = RunPrd(
            name=name,
            provider=provider,
            model=model,
            worktree=worktree,
            branch=branch,
            allow_dirty=allow_dirty,
        )
        return await self._scoped("run", cmd, timeout=timeout, **ext)

    async def pause(self, name: str, *, timeout: float | None = None, **ext: Ext) -> LoopInfo:
        return await self._scoped("pause", PausePrd(name=name), timeout=timeout, **ext)

    async def resume(self, name: str, *, timeout: float | None = None, **ext: Ext) -> LoopInfo:
        return await self._scoped("resume", ResumePrd(name=name), timeout=timeout, **ext)

    async def stop(
        self, name: str, *, reason: str = "", timeout: float | None = None, **ext: Ext
    ) -> LoopInfo:
        return await self._scoped("stop", StopPrd(name=name, reason=reason), timeout=timeout, **ext)

    async def reset_story(
        self, name: str, story_id: str, *, timeout: float | None = None, **ext: Ext
    ) -> PrdView:
        cmd = ResetStory(name=name, story_id=story_id)
        return await self._scoped("reset_story", cmd, timeout=timeout, **ext)

    async def finish(
        self,
        name: str,
        *,
        into: str = "",
        push: bool = False,
        remote: str = "",
        timeout: float | None = None,
        **ext: Ext,
    ) -> PrdFinished:
        """Merge the PRD's branch into ``into`` (default: where its loop started), remove its
        worktree, and with ``push`` push ``into`` to ``remote`` (default: the branch's, else
        ``origin``)."""
        cmd = FinishPrd(name=name, into=into, push=push, remote=remote)
        wait = max(timeout or 0.0, FINISH_TIMEOUT_S)
        return await self._scoped("finish", cmd, timeout=wait, **ext)
