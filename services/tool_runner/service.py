"""The tool-runner service: the single execution path of every tool call.

Endpoints (nats.micro ``jidocode-tool-runner``, queue group shared by the replicas)::

    jido.tools.<p>.run      RunTool    -> ToolResult (always a result, also for a refusal)
    jido.tools.<p>.cancel   CancelTool -> ToolCancelAccepted
    jido.tools.<p>.checkpoints_list|diff|restore    the project's checkpoints (:mod:`.checkpoints`)

A ``run`` goes through the :mod:`.pipeline` (claim → authorize → ask → quota →
execute → report). A ``cancel`` is served by one replica: it records the
cancellation in the ledger (a call that has not started yet never starts) and
broadcasts ``tool.cancel_requested`` on ``jido.sig.tool.cancel_requested``;
every replica listens (no queue group) and the one handling the call stops it.
A cancel names its conversation and stops only that conversation's call: a
cancel by anybody else neither stops a running call nor keeps one from starting.
A cancel for a project nobody runs is ``not_found``; so is one for a request id no
call has used (it is still kept, so a call with that id still on its way never starts).
``project.stopped`` (also heard by every replica) stops every call of that project,
whoever started it (the CLI's calls have no conversation to stop them), and its MCP
servers: the calls answer ``cancelled`` and their processes end, whole trees, under
either sandbox.

Waiting for an approval, for a quota slot, for a project's MCP server to start or
for the first attempt of a request sent again gives the request's slot of the
service host back (``ServiceHost.released``), so a flood of asked or queued calls
of one project cannot block the other projects' calls: the ``max_concurrent``
slots bound the calls that run, not those that wait. The waits are bounded per
project instead (``JIDO_MAX_PENDING_APPROVALS``, ``JIDO_MAX_QUEUED_CALLS``;
decisions 0143, 0306).

This module is the adapter: it decodes requests, hands them to the pipeline
and answers; the parts (:mod:`.idempotency`, :mod:`.approvals`, :mod:`.quotas`,
:mod:`.projects`, :mod:`.forward`, :mod:`.running`, :mod:`.report`) hold the
rules. Session approvals are per replica process; quotas hold across the
replicas, through leases in the KV bucket ``jido_tool_quotas``
(:mod:`.quota_leases`, ``JIDO_TOOL_QUOTA_LEASE_S``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from typing import Final

import nats.errors
from nats.aio.subscription import Subscription

from jidocode.shared import sandbox, subjects
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.endpoints import endpoint
from jidocode.shared.envelope import Envelope
from jidocode.shared.errors import NotFound, PermissionDenied
from jidocode.shared.events.engine import ProjectStopped
from jidocode.shared.events.mcp import ListMcpServers, McpServerInfo, McpServerList
from jidocode.shared.events.tools import (
    CancelTool,
    CheckpointDiff,
    CheckpointList,
    CheckpointRestored,
    DiffCheckpoint,
    ListCheckpoints,
    ListTools,
    RestoreCheckpoint,
    RunTool,
    ToolCancelAccepted,
    ToolCancelRequested,
    ToolCatalog,
    ToolResult,
)
from jidocode.shared.service import ServiceHost, ServiceLifecycle

from .call import Call
from .checkpoints.recorder import Checkpoints
from .egress.calls import start_proxy
from .idempotency import Ledger, ledger_key
from .mcp.host import McpHost
from .pipeline import Pipeline
from .projects import Projects
from .quota_leases import QuotaLeases, check_lease
from .quotas import Quotas
from .replicas import Replicas

__all__ = ["DEFAULT_QUOTA_WAIT_S", "ToolRunner", "serve"]

log = logging.getLogger("jidocode.tool_runner")

#: Default bound of the wait for a free quota slot before ``quota_exceeded``.
DEFAULT_QUOTA_WAIT_S: Final = 30.0


class ToolRunner:
    """One replica: the endpoints, the cancel broadcast, and the pipeline behind them."""

    def __init__(
        self,
        bus: Bus,
        config: Config,
        *,
        quota_wait_s: float = DEFAULT_QUOTA_WAIT_S,
        max_concurrent: int = 256,
        max_pending_approvals: int | None = None,
        max_queued_calls: int | None = None,
        quota_lease_s: int | None = None,
        mcp: McpHost | None = None,
        checkpoints: Checkpoints | None = None,
    ) -> None:
        self.bus = bus
        self.config = config
        #: The MCP servers' host (``None``: one for the global home; a replay passes its own).
        self.mcp = mcp
        #: The projects' checkpoints (``None``: under ``<data home>/checkpoints``).
        self.checkpoints = checkpoints
        self.quota_wait_s = quota_wait_s
        #: How long a quota slot of a replica that died stays busy (``None``: ``JIDO_TOOL_QUOTA_LEASE_S``).
        self.quota_lease_s = None if quota_lease_s is None else check_lease(quota_lease_s, "quota_lease_s")
        self.max_concurrent = max_concurrent
        self.max_pending_approvals = max_pending_approvals
        #: Calls of one project that may wait for a quota slot at once (``None``: ``JIDO_MAX_QUEUED_CALLS``).
        self.max_queued_calls = max_queued_calls
        self.pipeline: Pipeline | None = None
        self.host: ServiceHost | None = None
        self._subs: list[Subscription] = []

    async def start(self) -> None:
        # ServiceHost handles each request in a task of its own, so long calls run side by side
        host = ServiceHost(
            self.bus,
            name="tool_runner",
            description="JidoCode tool runner",
            max_concurrent=self.max_concurrent,
        )
        self.pipeline = Pipeline(
            self.bus,
            projects=await Projects.open(self.bus, self.config.jido_home),
            ledger=await Ledger.open(self.bus),
            quota_wait_s=self.quota_wait_s,
            release=host.released,
            max_pending_approvals=self.max_pending_approvals,
            max_queued_calls=self.max_queued_calls,
            quotas=Quotas(await QuotaLeases.open(self.bus, lease_s=self.quota_lease_s)),
            mcp=self.mcp or McpHost(jido_home=self.config.jido_home),
            checkpoints=self.checkpoints or Checkpoints(jido_home=self.config.jido_home),
        )
        self._subs.append(
            await self.bus.subscribe(subjects.signal(ToolCancelRequested.TYPE), self._on_cancel_signal)
        )
        self.pipeline.egress = await start_proxy(self.bus, self.config)
        host.serve_project(endpoint("tool_runner", "run"), self.handle_run)
        host.serve_project(endpoint("tool_runner", "cancel"), self.handle_cancel)
        host.serve_project(endpoint("tool_runner", "mcp_tools"), self.handle_mcp_tools)
        host.serve_project(endpoint("tool_runner", "mcp_servers"), self.handle_mcp_servers)
        host.serve_project(endpoint("tool_runner", "checkpoints_list"), self.handle_checkpoints_list)
        host.serve_project(endpoint("tool_runner", "checkpoints_diff"), self.handle_checkpoints_diff)
        host.serve_project(endpoint("tool_runner", "checkpoints_restore"), self.handle_checkpoints_restore)
        self._subs.append(
            await self.bus.subscribe(subjects.signal(ProjectStopped.TYPE), self._on_project_stopped)
        )
        await host.start()
        if host.service is not None:  # claims name this replica by its micro service id
            self.pipeline.ledger.replicas = Replicas(self.bus.nc, host.service.id)
        self.host = host

    async def stop(self) -> None:
        if self.pipeline is not None:
            self.pipeline.running.cancel_all()
        if self.host is not None:
            await self.host.stop()
        if self.pipeline is not None:
            await self.pipeline.quotas.drain()  # the slots of calls that answered: freed, not left to expire
        for sub in self._subs:
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()
        if self.pipeline is not None:
            await self.pipeline.gate.close()
            if self.pipeline.egress is not None:
                await self.pipeline.egress.close()
            await self.pipeline.mcp.close()
            await self.pipeline.projects.close()
            if self.pipeline.checkpoints is not None:
                await self.pipeline.checkpoints.aclose()

    def _pipeline(self) -> Pipeline:
        if self.pipeline is None:
            raise RuntimeError("the tool runner is not started")
        return self.pipeline

    async def handle_run(self, project_id: str, request: RunTool, env: Envelope) -> ToolResult:
        return await self._pipeline().run(Call.of(project_id, request, env))

    async def handle_cancel(self, project_id: str, cancel: CancelTool, env: Envelope) -> ToolCancelAccepted:
        """Record the cancel and tell every replica; ``NotFound`` for an unknown project or call."""
        pipeline = self._pipeline()
        await pipeline.projects.info(project_id)  # NotFound: no such project runs
        owner = cancel.conversation_id
        if owner is None:
            owner = env.conversation_id
        found = await pipeline.ledger.forbid(ledger_key(project_id, cancel.request_id), owner)
        if found != "other":
            await self.bus.emit(
                ToolCancelRequested(
                    project_id=project_id, request_id=cancel.request_id, conversation_id=owner
                ),
                project_id=project_id,
                causation_id=env.id,
            )
        if found == "unknown" and (project_id, cancel.request_id) not in pipeline.running.of_project(
            project_id
        ):
            raise NotFound(
                f"no tool call {cancel.request_id!r} is known in project {project_id}: none was claimed "
                "and none runs on this replica; the cancel is kept, so a call with that request id "
                "that arrives later does not start",
                details={"request_id": cancel.request_id, "project_id": project_id},
            )
        return ToolCancelAccepted(request_id=cancel.request_id, cancel_requested=found != "other")

    async def handle_mcp_tools(self, project_id: str, request: ListTools, env: Envelope) -> ToolCatalog:
        """The tools of the project's MCP servers on this replica (started on first use)."""
        pipeline = self._pipeline()
        project = await pipeline.projects.get(project_id)
        specs = await pipeline.mcp.specs(
            project_id,
            project.policy,
            wait_s=project.limits.timeout_s,  # a server slower to start joins a later listing
            include_hidden=request.include_hidden,
        )
        return ToolCatalog(tools=specs)

    async def handle_mcp_servers(
        self, project_id: str, request: ListMcpServers, env: Envelope
    ) -> McpServerList:
        """The project's MCP servers as this replica sees them (starts none)."""
        pipeline = self._pipeline()
        project = await pipeline.projects.get(project_id)
        servers, problems = await pipeline.mcp.status(project_id, project.policy)
        return McpServerList(
            servers=[McpServerInfo.model_validate(vars(s)) for s in servers], problems=problems
        )

    def _checkpoints(self) -> Checkpoints:
        checkpoints = self._pipeline().checkpoints
        if checkpoints is None:
            raise NotFound("this tool runner keeps no checkpoints")
        return checkpoints

    async def handle_checkpoints_list(
        self, project_id: str, request: ListCheckpoints, env: Envelope
    ) -> CheckpointList:
        """The project's checkpoints (of one conversation when named), oldest first."""
        info = await self._pipeline().projects.info(project_id)
        return await self._checkpoints().listed(info, request.conversation_id)

    async def handle_checkpoints_diff(
        self, project_id: str, request: DiffCheckpoint, env: Envelope
    ) -> CheckpointDiff:
        """What restoring the checkpoint would change, and what the user changed since."""
        info = await self._pipeline().projects.info(project_id)
        return await self._checkpoints().diff(info, request.checkpoint)

    async def handle_checkpoints_restore(
        self, project_id: str, request: RestoreCheckpoint, env: Envelope
    ) -> CheckpointRestored:
        """Put the project's files back as the checkpoint holds them (user changes kept unless told)."""
        info = await self._pipeline().projects.info(project_id)
        return await self._checkpoints().restore(
            info, request.checkpoint, request.paths, request.overwrite_user_changes
        )

    async def _on_project_stopped(self, env: Envelope) -> None:
        """A stopped project's calls and MCP servers stop on every replica."""
        if env.type != ProjectStopped.TYPE or self.pipeline is None:
            return
        try:
            sig = ProjectStopped.model_validate({**(env.data or {}), "type": env.type})
        except ValueError:
            return
        stopped = self.pipeline.stop_project(sig.project_id)
        if stopped:
            log.info("project %s stopped: %d running call(s) stopped", sig.project_id, len(stopped))
        await self.pipeline.mcp.stop_project(sig.project_id)

    async def _on_cancel_signal(self, env: Envelope) -> None:
        if env.type != ToolCancelRequested.TYPE or self.pipeline is None:
            return
        try:
            sig = ToolCancelRequested.model_validate({**(env.data or {}), "type": env.type})
        except ValueError:
            return
        self.pipeline.cancel((sig.project_id, sig.request_id), sig.conversation_id)


def _say_sandbox(config: Config) -> None:
    """Say once, at start, which OS sandbox bash calls get here under the user's settings (a
    project can only ask for a stronger one), and how to get a stronger one when it is not
    bubblewrap: a fallback to Landlock, or no sandbox at all, is never silent."""
    home = str(config.jido_home)
    try:
        choice = sandbox.choose(sandbox.effective_settings(home, jido_home=home), sandbox.detect())
    except PermissionDenied as exc:  # a settings file with an error: every call is refused, saying so
        log.error("OS sandbox for tool processes: %s", exc.message)
        return
    if choice.mode == "bubblewrap":
        log.info("OS sandbox for tool processes: %s", choice.reason)
        return
    log.warning("OS sandbox for tool processes: %s — %s (%s)", choice.mode, choice.reason, choice.hint)


async def serve(config: Config, stop: asyncio.Event) -> None:
    """Run one tool-runner replica until ``stop`` is set."""
    async with ServiceLifecycle(config, "tool_runner") as life:
        wait = float(os.environ.get("JIDO_TOOL_QUOTA_WAIT_S", DEFAULT_QUOTA_WAIT_S))
        await life.start(ToolRunner(life.bus, config, quota_wait_s=wait))
        await asyncio.to_thread(_say_sandbox, config)
        await life.run(stop, ready="tool runner ready")
