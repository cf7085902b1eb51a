"""The pipeline of one tool call: claim → authorize → ask → quota → execute → report.

1. **claim** the call's idempotency key (:mod:`.idempotency`): a redelivered
   request gets the first one's result, the side effect never runs twice;
2. **authorize**: the project's policy (:mod:`.projects`) decides on the
   checked arguments; an asset tool must exist (:mod:`.forward`); deny refuses;
3. **ask** a human when the policy says ``ask`` (:mod:`.approvals`);
4. take the project's and the conversation's **quota** slots (:mod:`.quotas`);
5. **execute**: a built-in in-process under the limits (:mod:`.executor`), an
   asset tool on the asset loader — in a task a cancel kills (:mod:`.running`);
6. **report**: ``tool.started`` once the call holds its slots, ``tool.completed``
   or ``tool.failed`` at the end (:mod:`.report`).

Every refusal along the way is a typed error, raised where it is found and
turned into the call's ``ok: false`` result (and ``tool.failed``) at the end.
"""

from __future__ import annotations

import time
from collections.abc import Coroutine
from functools import partial
from typing import Any

from jidocode.shared.bus import Bus
from jidocode.shared.errors import JidoError
from jidocode.shared.events.tools import ToolResult
from jidocode.shared.policy import Decision, authorize

from .approvals import ApprovalGate, refuse_denied
from .call import Call, CallKey
from .errors import CallCancelled
from .executor import Limits, check_args, error_result, run_authorized
from .forward import AssetTools
from .idempotency import Ledger, claim_lifetime, ledger_key, needs_claim
from .projects import Project, Projects
from .quotas import Quotas, slots_for
from .report import finished, started
from .running import RunningCalls
from .tools import BUILTINS

__all__ = ["Pipeline"]


class Pipeline:
    """Runs the calls of one replica; its parts hold the replica's state."""

    def __init__(self, bus: Bus, *, projects: Projects, ledger: Ledger, quota_wait_s: float) -> None:
        self.bus = bus
        self.projects = projects
        self.ledger = ledger
        self.quota_wait_s = quota_wait_s
        self.gate = ApprovalGate(bus)
        self.quotas = Quotas()
        self.running = RunningCalls()
        self.assets = AssetTools(bus)

    async def run(self, call: Call) -> ToolResult:
        """The call's result: always a result, also for a refusal (claim, then :meth:`_attempt`)."""
        if not needs_claim(call.name):  # read-only: a redelivered read simply reads again
            return await self._attempt(call)
        key = ledger_key(call.project_id, call.request_id)
        earlier = await self.ledger.claim(key, call.name, partial(self._claim_lifetime, call.project_id))
        if earlier is not None:
            return earlier
        return await self.ledger.settle(key, self._attempt(call))

    def cancel(self, key: CallKey) -> None:
        """Stop the call wherever it is on this replica: waiting for approval or a slot, or running."""
        if not self.running.cancel(key):
            return
        self.quotas.interrupt(key, CallCancelled())
        self.gate.cancel(key)

    async def _attempt(self, call: Call) -> ToolResult:
        """One run of the pipeline after the claim, reported however it ends."""
        t0 = time.monotonic()
        with self.running.track(call.key):
            try:
                result = await self._steps(call)
            except (JidoError, OSError, TimeoutError) as exc:
                result = error_result(exc)
        await self.bus.emit(finished(call, result, round((time.monotonic() - t0) * 1000, 1)), **call.ext)
        return result

    async def _steps(self, call: Call) -> ToolResult:
        """authorize → ask → quota → execute; any refusal raises."""
        project = await self.projects.get(call.project_id)
        limits = project.limits
        args = check_args(call.name, call.args, limits)
        decision = await self._authorize(call, project, args)
        await self.gate.admit(call, decision, project.tools.approval_timeout_s)
        async with self.quotas.hold(slots_for(call, project.tools), self.quota_wait_s, owner=call.key):
            await self.bus.emit(started(call), **call.ext)
            return await self.running.execute(call.key, self._tool(call, project, args, decision, limits))

    async def _authorize(self, call: Call, project: Project, args: dict[str, Any]) -> Decision:
        if call.name not in BUILTINS:
            await self.assets.spec(call.project_id, call.name)  # NotFound unless the asset loader has it
        return refuse_denied(authorize(project.policy, call.name, args))

    def _tool(
        self, call: Call, project: Project, args: dict[str, Any], decision: Decision, limits: Limits
    ) -> Coroutine[Any, Any, ToolResult]:
        if call.name in BUILTINS:
            return run_authorized(project.policy, call.name, args, decision, limits)
        return self.assets.run(call, limits)

    async def _claim_lifetime(self, project_id: str) -> float:
        return claim_lifetime(await self.projects.tools_or_none(project_id), self.quota_wait_s)
