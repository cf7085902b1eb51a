"""The pipeline of one tool call: claim → authorize → ask → quota → execute → report.

1. **claim** the call's idempotency key (:mod:`.idempotency`): a redelivered
   request gets the first one's result (waited for holding no request slot),
   the side effect never runs twice; a request id reused for another call is a
   ``conflict``;
2. **authorize**: the tool must be in the project's catalogue under its current
   policy — a built-in the policy does not deny outright, or an asset tool the
   asset loader lists (:mod:`.forward`) — then the policy decides on the checked
   arguments (:mod:`.projects`); deny refuses;
3. **ask** a human when the policy says ``ask`` (:mod:`.approvals`), holding no
   request slot while it waits;
4. take the project's and the conversation's **quota** slots, counted across the
   replicas (:mod:`.quotas`, :mod:`.quota_leases`), holding no request slot while
   it waits (:class:`.quotas.WaitingRoom`, bounded per project), then a request
   slot again to run; they are freed once the call has answered;
5. **execute**: a built-in in-process under the limits (:mod:`.executor`), an
   asset tool on the asset loader — in a task a cancel kills (:mod:`.running`); the first
   call of a conversation's turn that can write records the turn's **checkpoint** of the
   project's files first, and every such call what it left after (:mod:`.checkpoints`);
6. **report**: ``tool.started`` once the call holds its slots, ``tool.completed``
   or ``tool.failed`` at the end (:mod:`.report`).

**The caller's deadline** (``meta.deadline``, Unix time): a call that arrives
after it is refused (``timeout``), and the approval wait, the run and a
forwarded asset tool are bounded by it. A step of a workflow or skill (request
id ``<root>/wf/…`` or ``<root>/skill/…``) is refused once its root call has
ended (cancelled, or answered), so a workflow stops when its caller stops.

**No wait of one project holds a slot another needs**: the service host's
request slots (its total concurrency) are held to run, never to wait for a
human, a quota slot, a project's MCP server to start or the first attempt of a
request sent again (decisions 0143, 0306).

**Only the owner cancels**: a cancel stops a call only when it names the
call's conversation (:meth:`Pipeline.cancel`).

Every refusal along the way is a typed error, raised where it is found and
turned into the call's ``ok: false`` result (and ``tool.failed``) at the end.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from functools import partial
from typing import Any

from jidocode.shared.bus import Bus
from jidocode.shared.egress import EgressProxy
from jidocode.shared.errors import JidoError, NotFound, PermissionDenied, RequestTimeout
from jidocode.shared.events.tools import ToolResult
from jidocode.shared.policy import Decision, authorize
from jidocode.shared.policy.decision import tool_exposed

from .approvals import ApprovalGate, refuse_denied
from .call import Call, CallKey
from .checkpoints.recorder import Checkpoints
from .egress.calls import approved_hosts, call_scope, needs_egress
from .errors import CANCELLED, CallCancelled
from .executor import Limits, check_args, error_result, result_limit, run_authorized
from .forward import AssetTools
from .idempotency import Claim, Ledger, claim_lifetime, ledger_key, needs_claim
from .mcp.host import McpHost
from .mcp.mapping import split_name
from .mcp.rules import mcp_decision, mcp_exposed
from .projects import Project, Projects
from .quotas import Quotas, WaitingRoom, slots_for
from .report import finished, started
from .running import RunningCalls
from .telemetry import call_span, note
from .tools import BUILTINS
from .tools.bash import sandbox_status

__all__ = ["Pipeline"]


def _no_release() -> AbstractAsyncContextManager[None]:
    return contextlib.nullcontext()


class Pipeline:
    """Runs the calls of one replica; its parts hold the replica's state."""

    def __init__(
        self,
        bus: Bus,
        *,
        projects: Projects,
        ledger: Ledger,
        quota_wait_s: float,
        release: Callable[[], AbstractAsyncContextManager[None]] = _no_release,
        max_pending_approvals: int | None = None,
        max_queued_calls: int | None = None,
        quotas: Quotas | None = None,
        mcp: McpHost | None = None,
        checkpoints: Checkpoints | None = None,
    ) -> None:
        self.bus = bus
        self.projects = projects
        self.ledger = ledger
        self.quota_wait_s = quota_wait_s
        self.gate = ApprovalGate(bus, release=release, max_pending=max_pending_approvals)
        #: Where calls wait for a quota slot or an MCP server without a request slot (``None``:
        #: ``JIDO_MAX_QUEUED_CALLS`` per project).
        self.waiting = WaitingRoom(release=release, limit=max_queued_calls)
        #: Per replica unless given cluster-wide leases (the service gives them: :mod:`.quota_leases`).
        self.quotas = Quotas() if quotas is None else quotas
        self.running = RunningCalls()
        self.assets = AssetTools(bus)
        #: The MCP servers' connections of this replica (``mcp__<server>__<tool>`` tools).
        self.mcp = McpHost(jido_home=None) if mcp is None else mcp
        #: The projects' checkpoint stores (``None``: no checkpoints, a replay or a unit test).
        self.checkpoints = checkpoints
        #: The conversation of each call this replica handles: the only one whose cancel counts.
        self._owners: dict[CallKey, str | None] = {}
        #: The replica's egress proxy (``None``: calls get no pass, ``web_fetch`` refuses).
        self.egress: EgressProxy | None = None

    async def run(self, call: Call) -> ToolResult:
        """The call's result: always a result, also for a refusal (claim, then :meth:`_attempt`)."""
        if not needs_claim(call.name):  # read-only: a redelivered read simply reads again
            return await self._attempt(call, None)
        claim = Claim.of(call.project_id, call.request_id, call.name, call.args, call.conversation_id)
        # a request sent again waits there for the first attempt's result, as long as that runs
        async with self.waiting.wait(call.project_id, "the result of its first attempt"):
            earlier = await self.ledger.claim(claim, partial(self._claim_lifetime, call.project_id))
        if earlier is not None:
            return earlier
        return await self.ledger.settle(claim, self._attempt(call, claim))

    def cancel(self, key: CallKey, conversation_id: str | None) -> bool:
        """Stop the call wherever it is on this replica (waiting for approval or a slot, or running),
        if ``conversation_id`` owns it. Whether it was stopped here."""
        if key not in self._owners or self._owners[key] != conversation_id:
            return False  # not here, or not the canceller's call
        return self._stop(key, CANCELLED)

    def stop_project(self, project_id: str) -> list[CallKey]:
        """Stop every call of the stopped project ``project_id`` on this replica, whoever owns it
        (the CLI's calls, which have no conversation, too); the calls stopped."""
        reason = f"{CANCELLED}: its project {project_id} was stopped"
        return [key for key in self.running.of_project(project_id) if self._stop(key, reason)]

    def _stop(self, key: CallKey, reason: str) -> bool:
        """Stop ``key`` wherever it is on this replica (its result says ``reason``); whether it was here."""
        if not self.running.cancel(key, reason):
            return False
        self.quotas.interrupt(key, CallCancelled(reason))
        self.gate.cancel(key)
        return True

    async def _attempt(self, call: Call, claim: Claim | None) -> ToolResult:
        """One run of the pipeline after the claim, reported however it ends."""
        t0 = time.monotonic()
        self._owners[call.key] = call.conversation_id
        try:
            with self.running.track(call.key), call_span(self.bus, call) as report:
                try:
                    result = await self._steps(call, claim)
                except (JidoError, OSError, TimeoutError) as exc:
                    result = error_result(exc)
                report.finish(result)
        finally:
            self._owners.pop(call.key, None)
        await self.bus.emit(finished(call, result, round((time.monotonic() - t0) * 1000, 1)), **call.ext)
        return result

    async def _steps(self, call: Call, claim: Claim | None) -> ToolResult:
        """authorize → ask → quota → execute; any refusal raises."""
        _check_deadline(call, "before it started")
        await self._check_root(call)
        project = await self.projects.get(call.project_id)
        args = check_args(call.name, call.args, project.limits)
        decision = await self._authorize(call, project, args)
        note(decision=str(decision.effect))
        asked = await self.gate.admit(
            call, decision, _bounded(call, project.tools.approval_timeout_s, "while it waited for approval")
        )
        if asked and claim is not None:
            await self.ledger.touch(claim)  # the wait may have been long: the claim lives on
        async with self._quota(call, project):
            limits = project.limits
            limits = limits.model_copy(
                update={"timeout_s": _bounded(call, limits.timeout_s, "before it could run")}
            )
            box = await sandbox_status(call.name, project.policy)
            note(sandbox=str(box.mode) if box is not None else None)
            if claim is not None:
                await self.ledger.begin(claim)  # TakenOver: another replica runs it now, not here
            await self.bus.emit(started(call, box), **call.ext)
            if not await self._writes(call, project):
                return await self.running.execute(call.key, self._tool(call, project, args, decision, limits))
            return await self._checkpointed(call, project, self._tool(call, project, args, decision, limits))

    async def _writes(self, call: Call, project: Project) -> bool:
        """Whether the call belongs to a turn to checkpoint and can write: a built-in that is not
        read-only, an MCP tool its server does not mark read-only, an asset tool."""
        if self.checkpoints is None or call.request.meta.turn_id is None or call.conversation_id is None:
            return False
        if call.name in BUILTINS:
            return needs_claim(call.name)
        if split_name(call.name) is not None:
            timeout = project.limits.timeout_s
            with contextlib.suppress(JidoError, OSError, TimeoutError):
                spec = await self.mcp.spec(call.project_id, project.policy, call.name, timeout)
                return not spec.safety.read_only
        return True

    async def _checkpointed(
        self, call: Call, project: Project, tool: Coroutine[Any, Any, ToolResult]
    ) -> ToolResult:
        """Run ``tool`` after the turn's checkpoint; record what it left, however it ended."""
        assert self.checkpoints is not None
        meta = call.request.meta
        try:
            problem = await self.checkpoints.before(meta, project.info)
        except BaseException:
            tool.close()
            raise
        try:
            result = await self.running.execute(call.key, tool)
        except BaseException:
            self.checkpoints.after(meta, project.info)  # failed or cancelled: in the background
            raise
        # before the result goes: an edit the user makes once the turn has answered is the user's
        await self.checkpoints.record_after(meta, project.info)
        return result if problem is None else result.model_copy(update={"logs": [*result.logs, problem]})

    @contextlib.asynccontextmanager
    async def _quota(self, call: Call, project: Project) -> AsyncIterator[None]:
        """Hold the call's quota slots, waited for in the waiting room: the wait holds no request
        slot; the slot is taken back (quota first, then a shared slot) before the call runs. The
        slots are freed after the call's answer has gone (decision 0349)."""
        async with self.waiting.wait(call.project_id, "a quota slot"):
            slots = slots_for(call, project.tools)
            held = await self.quotas.take(slots, self.quota_wait_s, owner=call.key)
        try:
            yield
        finally:
            self.quotas.free_later(held)

    async def _check_root(self, call: Call) -> None:
        """A workflow's or skill's step runs only while the call it belongs to has not ended."""
        root = call.request.meta.root_request_id
        if root != call.request_id and await self.ledger.ended(ledger_key(call.project_id, root)):
            raise CallCancelled(f"the call this step belongs to ({root!r}) has ended: not starting it")

    async def _authorize(self, call: Call, project: Project, args: dict[str, Any]) -> Decision:
        if split_name(call.name) is not None:
            return await self._authorize_mcp(call, project)
        if call.name not in BUILTINS:
            try:  # NotFound unless the asset loader lists it
                await self.assets.spec(call.project_id, call.name)
            except NotFound as exc:
                shown = sorted(n for n in BUILTINS if tool_exposed(project.policy, n))
                raise NotFound(
                    f"tool {call.name!r} is not in this project's tool catalogue ({exc.message}); "
                    f"its built-ins: {', '.join(shown) or 'none'}, plus the asset tools the asset loader lists",
                    details={"tool": call.name, "reason": "not_in_catalogue", "builtins": shown},
                ) from None
        if not tool_exposed(project.policy, call.name):
            raise PermissionDenied(
                f"tool {call.name!r} is not in this project's tool catalogue: its policy denies it outright",
                details={"tool": call.name, "reason": "not_in_catalogue"},
            )
        return refuse_denied(authorize(project.policy, call.name, args))

    async def _authorize_mcp(self, call: Call, project: Project) -> Decision:
        """An MCP tool: its server must list it (started if needed), then the MCP rules (default ask)."""
        if not mcp_exposed(project.policy, call.name):
            raise PermissionDenied(
                f"tool {call.name!r} is not in this project's tool catalogue: a deny rule names it or its server",
                details={"tool": call.name, "reason": "not_in_catalogue"},
            )
        timeout = _bounded(call, project.limits.timeout_s, "before its MCP server started")
        async with self.waiting.wait(call.project_id, "its MCP server to start"):  # may take long
            await self.mcp.spec(call.project_id, project.policy, call.name, timeout)
        return refuse_denied(mcp_decision(project.policy, call.name))

    def _tool(
        self, call: Call, project: Project, args: dict[str, Any], decision: Decision, limits: Limits
    ) -> Coroutine[Any, Any, ToolResult]:
        if split_name(call.name) is not None:
            return self.mcp.call(
                call.project_id,
                project.policy,
                call.name,
                args,
                limits.timeout_s,
                max_bytes=result_limit(limits),
                ask=partial(self.gate.ask_form, call, timeout_s=project.tools.approval_timeout_s),
            )
        if call.name in BUILTINS:
            return self._builtin(call, project, args, decision, limits)
        return self.assets.run(call, limits)

    async def _builtin(
        self, call: Call, project: Project, args: dict[str, Any], decision: Decision, limits: Limits
    ) -> ToolResult:
        """A built-in; one that fetches or runs programs holds a pass of the egress proxy while it runs."""
        if self.egress is None or not needs_egress(call.name):
            return await run_authorized(project.policy, call.name, args, decision, limits)
        timeout = project.tools.approval_timeout_s
        hosts = approved_hosts(args, decision)
        scope = call_scope(call, project.policy, self.gate, timeout_s=timeout, approved_hosts=hosts)
        async with self.egress.grant(scope) as egress:
            return await run_authorized(project.policy, call.name, args, decision, limits, egress=egress)

    async def _claim_lifetime(self, project_id: str) -> float:
        return claim_lifetime(await self.projects.tools_or_none(project_id), self.quota_wait_s)


def _time_left(call: Call) -> float | None:
    deadline = call.request.meta.deadline
    return None if deadline is None else deadline - time.time()


def _check_deadline(call: Call, when: str) -> None:
    left = _time_left(call)
    if left is not None and left <= 0:
        raise RequestTimeout(
            f"the caller stopped waiting {when} (its deadline passed {-left:.1f} s ago)",
            details={"deadline": call.request.meta.deadline},
            retryable=False,
        )


def _bounded(call: Call, seconds: float, when: str) -> float:
    """``seconds``, or less when the caller's deadline comes first (past it: ``RequestTimeout``)."""
    _check_deadline(call, when)
    left = _time_left(call)
    return seconds if left is None else min(seconds, left)
