"""The tool-runner service: the single execution path of every tool call.

Endpoints (nats.micro ``jidocode-tool-runner``, queue group shared by the replicas)::

    jido.tools.<p>.run      RunTool   -> ToolResult (always a result, also for a refusal)
    jido.tools.<p>.cancel   CancelTool -> {"request_id", "cancel_requested": true}

A ``cancel`` is served by one replica, which broadcasts ``tool.cancel_requested``
on ``jido.sig.tool.cancel_requested``; every replica listens (no queue
group) and the one running the call kills it. The cancellation is also
recorded in the ``jido_tool_calls`` KV bucket, so a call that has not started
yet never starts.

Per call: look up the project (KV ``jido_projects``), build its policy from
settings.json (cached until a settings file changes), refuse oversize
arguments, authorize (deny → refused; ask → an approval request on the
conversation's output subject and a wait for the answer on its input subject;
no conversation or no answer in time → refused), take a slot of the project's
and the conversation's quota (waiting at most ``quota_wait_s``, then refused
with ``quota_exceeded``), run under the timeout and output cap, publish
``tool.started`` / ``tool.completed`` / ``tool.failed``.

Idempotency: ``meta.request_id`` keys the call in ``jido_tool_calls``. The
first request claims the key (KV create); a redelivered request finds the
claim and waits for (or returns) the stored result — the side effect never
runs twice. Read-only built-ins (``read_file``, ``list_dir``, ``glob``,
``grep``) have no side effect to protect and skip the two KV writes: a
redelivered read simply reads again. Quotas and session approvals are per
replica process.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Final

import nats.errors
import nats.js.errors
from nats.aio.subscription import Subscription
from nats.js.kv import KeyValue

from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.clients import AssetsClient
from jidocode.shared.config import Config
from jidocode.shared.endpoints import endpoint
from jidocode.shared.envelope import Envelope
from jidocode.shared.errors import (
    JidoError,
    NotFound,
    PermissionDenied,
)
from jidocode.shared.events.conversation import ApprovalRequested, ApprovalResponse
from jidocode.shared.events.engine import ProjectInfo
from jidocode.shared.events.tools import (
    CancelTool,
    RunTool,
    ToolCancelAccepted,
    ToolCancelRequested,
    ToolCompleted,
    ToolFailed,
    ToolResult,
    ToolResultError,
    ToolStarted,
)
from jidocode.shared.policy import Decision, Effect, Policy, authorize
from jidocode.shared.policy.loader import PolicyCache
from jidocode.shared.registry import ProjectDirectory
from jidocode.shared.service import ServiceHost, scoped_project_id
from jidocode.shared.settings import ToolSettings

from .executor import Limits, check_args, error_result, run_authorized
from .tools import BUILTINS

#: Asset tools made of other tool calls, and how many per-call timeouts they may take.
COMPOSITE_ASSET_TOOLS: frozenset[str] = frozenset({"run_workflow", "invoke_skill"})
COMPOSITE_STEPS = 10

#: Built-ins without side effects: no idempotency claim needed.
READ_ONLY: frozenset[str] = frozenset({"read_file", "list_dir", "glob", "grep"})

__all__ = ["ToolRunner", "serve"]

log = logging.getLogger("jidocode.tool_runner")

#: How long a finished call's result is kept for redelivered requests.
RESULT_TTL_S: Final = 24 * 3600.0
#: ``approve_session`` memory bounds (a forgotten approval is simply asked again).
MAX_SESSION_APPROVALS: Final = 256
MAX_APPROVAL_CONVERSATIONS: Final = 4096
#: Default bound of the wait for a free quota slot before ``quota_exceeded``.
DEFAULT_QUOTA_WAIT_S: Final = 30.0


def _call_key(project_id: str, request_id: str) -> str:
    digest = hashlib.sha256(f"{project_id}\0{request_id}".encode()).hexdigest()[:40]
    return f"{project_id}.{digest}"


@dataclass
class _Project:
    info: ProjectInfo
    policy: Policy
    tools: ToolSettings


@dataclass
class _Quota:
    limit: int
    running: int = 0
    waiters: list[asyncio.Future[None]] = field(default_factory=list)


class _Quotas:
    """Counting slots per key, with a bounded wait (per replica process)."""

    def __init__(self) -> None:
        self._q: dict[str, _Quota] = {}
        self._waiting: dict[object, asyncio.Future[None]] = {}

    def interrupt(self, owner: object, error: JidoError) -> None:
        """Stop ``owner``'s wait for a slot with ``error`` (a cancelled call)."""
        fut = self._waiting.get(owner)
        if fut is not None and not fut.done():
            fut.set_exception(error)

    @contextlib.asynccontextmanager
    async def slot(
        self, key: str, limit: int, wait_s: float, what: str, *, owner: object = None
    ) -> AsyncIterator[None]:
        q = self._q.setdefault(key, _Quota(limit))
        q.limit = limit
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while q.running >= q.limit:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise _quota_error(what, limit)
            fut: asyncio.Future[None] = loop.create_future()
            q.waiters.append(fut)
            if owner is not None:
                self._waiting[owner] = fut
            try:
                await asyncio.wait_for(fut, remaining)
            except TimeoutError:
                raise _quota_error(what, limit) from None
            except asyncio.CancelledError:
                if fut.done() and not fut.cancelled():
                    self._wake(q)  # pass the wake-up on: this waiter will not take the slot
                raise
            finally:
                if fut in q.waiters:
                    q.waiters.remove(fut)
                if owner is not None and self._waiting.get(owner) is fut:
                    del self._waiting[owner]
        q.running += 1
        try:
            yield
        finally:
            q.running -= 1
            self._wake(q)
            if q.running == 0 and not q.waiters:
                self._q.pop(key, None)

    @staticmethod
    def _wake(q: _Quota) -> None:
        while q.waiters:
            w = q.waiters.pop(0)
            if not w.done():
                w.set_result(None)
                return


def _quota_error(what: str, limit: int) -> JidoError:
    return JidoError(
        f"too many tool calls running for this {what} (limit {limit}); retry later",
        error_type="quota_exceeded",
        retryable=True,
        details={"scope": what, "limit": limit},
    )


class ToolRunner:
    """One replica's state: policies, running calls, quotas, pending approvals."""

    def __init__(self, bus: Bus, config: Config, *, quota_wait_s: float = DEFAULT_QUOTA_WAIT_S) -> None:
        self.bus = bus
        self.config = config
        self.quota_wait_s = quota_wait_s
        self.directory: ProjectDirectory | None = None
        self.calls: KeyValue | None = None
        self._policies = PolicyCache(config.jido_home)
        self._running: dict[tuple[str, str], asyncio.Task[ToolResult]] = {}
        self._cancelled: set[tuple[str, str]] = set()
        #: Calls this replica is handling (from lookup to result), so a cancel is never missed.
        self._active: set[tuple[str, str]] = set()
        self._quotas = _Quotas()
        self._session_approvals: OrderedDict[tuple[str, str], set[str]] = OrderedDict()
        self._pending: dict[tuple[str, str, str], asyncio.Future[str]] = {}
        self._conv_subs: dict[tuple[str, str], tuple[Subscription, int]] = {}
        self._subs: list[Subscription] = []
        self.host: ServiceHost | None = None

    # -- lifecycle ------------------------------------------------------------

    async def start(self) -> None:
        self.directory = await ProjectDirectory.open(self.bus)
        self.calls = await self.bus.kv(subjects.BUCKET_TOOL_CALLS, history=1, ttl=RESULT_TTL_S)
        self._subs.append(
            await self.bus.subscribe(subjects.signal("tool.cancel_requested"), self._on_cancel_signal)
        )
        # ServiceHost handles each request in a task of its own, so long calls run side by side
        host = ServiceHost(self.bus, name="tool_runner", description="JidoCode tool runner")
        host.serve(endpoint("tool_runner", "run"), self.handle_run)
        host.serve(endpoint("tool_runner", "cancel"), self.handle_cancel)
        await host.start()
        self.host = host

    async def stop(self) -> None:
        for task in list(self._running.values()):
            task.cancel()
        if self.host is not None:
            await self.host.stop()
        for sub in self._subs:
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()
        for sub, _ in list(self._conv_subs.values()):
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()

    # -- projects and policies ------------------------------------------------------

    async def project(self, project_id: str) -> _Project:
        """The project's record and its current policy (rebuilt when a settings file changes)."""
        assert self.directory is not None
        info = await self.directory.get(project_id)
        policy, tools = self._policies.get(project_id, info.root_path, info.data_dir)
        return _Project(info=info, policy=policy, tools=tools)

    # -- run ------------------------------------------------------------------------------

    async def handle_run(self, call: RunTool, env: Envelope) -> ToolResult:
        project_id = scoped_project_id(env)
        if call.name in READ_ONLY:
            return await self._run(project_id, call, env)
        key = _call_key(project_id, call.meta.request_id)
        stored = await self._claim(key, project_id, call)
        if stored is not None:
            return stored
        result: ToolResult | None = None
        try:
            result = await self._run(project_id, call, env)
        except asyncio.CancelledError:
            result = ToolResult(
                ok=False, error=ToolResultError(type="cancelled", message="the call was cancelled")
            )
            raise
        finally:
            if result is None:
                result = ToolResult(
                    ok=False, error=ToolResultError(type="internal", message="the call failed")
                )
            await self._store(key, {"state": "done", "result": result.model_dump(mode="json")})
        return result

    async def _claim(self, key: str, project_id: str, call: RunTool) -> ToolResult | None:
        """Claim the call's idempotency key; a stored (or awaited) result when another got it first."""
        assert self.calls is not None
        record = {"state": "running", "instance": self.bus.source, "name": call.name, "at": time.time()}
        try:
            await self.calls.create(key, json.dumps(record).encode())
            return None
        except nats.js.errors.KeyWrongLastSequenceError:
            pass
        entry = await self.calls.get(key)
        value = json.loads(entry.value or b"{}")
        if value.get("state") == "cancelled":
            # cancelled before it started: claim it so it never runs, answer cancelled
            return ToolResult(
                ok=False, error=ToolResultError(type="cancelled", message="the call was cancelled")
            )
        if value.get("state") == "done":
            return ToolResult.model_validate(value["result"])
        # running elsewhere (a redelivery while the first is still running): wait for its result
        wait = await self._max_wait(project_id)
        started_at = float(value.get("at", 0.0))
        if time.time() - started_at > wait:
            return await self._lost(key, value)
        watcher = await self.calls.watch(key)
        try:
            deadline = time.monotonic() + max(0.0, wait - (time.time() - started_at))
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return await self._lost(key, value)
                try:
                    update = await watcher.updates(timeout=remaining)  # type: ignore[no-untyped-call]
                except nats.errors.TimeoutError:
                    continue
                if update is None or not update.value:
                    continue
                value = json.loads(update.value)
                if value.get("state") == "done":
                    return ToolResult.model_validate(value["result"])
        finally:
            with contextlib.suppress(nats.errors.Error):
                await watcher.stop()  # type: ignore[no-untyped-call]

    async def _lost(self, key: str, claim: dict[str, Any]) -> ToolResult:
        """A claim older than any call can take: its replica died. Never re-run: report it."""
        result = ToolResult(
            ok=False,
            error=ToolResultError(
                type="outcome_unknown",
                message="the replica running this call stopped before answering; it is not run again "
                "(its side effects may or may not have happened)",
                details={"instance": claim.get("instance")},
            ),
        )
        await self._store(key, {"state": "done", "result": result.model_dump(mode="json")})
        return result

    async def _max_wait(self, project_id: str) -> float:
        try:
            tools = (await self.project(project_id)).tools
        except JidoError:
            return 60.0
        return float(tools.timeout_s + tools.approval_timeout_s) + self.quota_wait_s + 10.0

    async def _store(self, key: str, value: dict[str, Any]) -> None:
        assert self.calls is not None
        try:
            await self.calls.put(key, json.dumps(value).encode())
        except (nats.errors.Error, nats.js.errors.Error):
            log.exception("could not store the result of %s", key)

    async def _run(self, project_id: str, call: RunTool, env: Envelope) -> ToolResult:
        cid = call.meta.conversation_id
        ext: dict[str, Any] = {
            "project_id": project_id,
            "conversation_id": cid,
            "correlation_id": call.meta.correlation_id or env.correlation_id,
            "causation_id": env.id,
        }
        started = time.monotonic()
        call_key = (project_id, call.meta.request_id)
        self._active.add(call_key)
        try:
            project = await self.project(project_id)
            limits = Limits(timeout_s=project.tools.timeout_s, output_cap=project.tools.output_cap_bytes)
            args = check_args(call.name, call.args, limits)
            builtin = call.name in BUILTINS
            if not builtin:
                await self._asset_tool_spec(project_id, call.name)
            decision = authorize(project.policy, call.name, args)
            await self._gate(project_id, project, call, decision, ext)
            async with contextlib.AsyncExitStack() as stack:
                await stack.enter_async_context(
                    self._quotas.slot(
                        f"p:{project_id}",
                        project.tools.max_concurrent_per_project,
                        self.quota_wait_s,
                        "project",
                        owner=call_key,
                    )
                )
                if cid is not None:
                    await stack.enter_async_context(
                        self._quotas.slot(
                            f"c:{project_id}:{cid}",
                            project.tools.max_concurrent_per_conversation,
                            self.quota_wait_s,
                            "conversation",
                            owner=call_key,
                        )
                    )
                await self.bus.publish(
                    subjects.signal("tool.started"),
                    ToolStarted(
                        project_id=project_id,
                        name=call.name,
                        request_id=call.meta.request_id,
                        conversation_id=cid,
                    ),
                    **ext,
                )
                if builtin:
                    coro = run_authorized(project.policy, call.name, args, decision, limits)
                else:
                    coro = self._forward(project_id, call, limits, ext)
                if call_key in self._cancelled:  # no await between this check and the registration
                    coro.close()
                    raise JidoError("the call was cancelled", error_type="cancelled")
                task = asyncio.create_task(coro)
                self._running[call_key] = task
                try:
                    result = await task
                except asyncio.CancelledError:
                    if call_key not in self._cancelled:
                        # this handler itself is cancelled (shutdown): take the tool down with it
                        task.cancel()
                        with contextlib.suppress(asyncio.CancelledError, JidoError, OSError, TimeoutError):
                            await task
                        raise
                    raise JidoError("the call was cancelled", error_type="cancelled") from None
                finally:
                    self._running.pop(call_key, None)
        except (JidoError, OSError, TimeoutError) as exc:
            result = error_result(exc)
        finally:
            self._cancelled.discard(call_key)
            self._active.discard(call_key)
        duration = round((time.monotonic() - started) * 1000, 1)
        if result.ok:
            truncated = isinstance(result.data, dict) and bool(result.data.get("truncated"))
            await self.bus.publish(
                subjects.signal("tool.completed"),
                ToolCompleted(
                    project_id=project_id,
                    name=call.name,
                    request_id=call.meta.request_id,
                    conversation_id=cid,
                    duration_ms=duration,
                    truncated=truncated,
                ),
                **ext,
            )
        else:
            assert result.error is not None
            await self.bus.publish(
                subjects.signal("tool.failed"),
                ToolFailed(
                    project_id=project_id,
                    name=call.name,
                    request_id=call.meta.request_id,
                    conversation_id=cid,
                    error=ToolResultError(type=result.error.type, message=result.error.message[:1000]),
                    duration_ms=duration,
                ),
                **ext,
            )
        return result

    # -- authorization gate -------------------------------------------------------------------

    async def _gate(
        self, project_id: str, project: _Project, call: RunTool, decision: Decision, ext: dict[str, Any]
    ) -> None:
        details = {"decision": decision.effect.value, "rule": decision.rule, **decision.details}
        if decision.effect is Effect.ALLOW:
            return
        if decision.effect is Effect.DENY:
            raise PermissionDenied(decision.reason, details=details)
        cid = call.meta.conversation_id
        if cid is None:
            raise PermissionDenied(
                f"needs approval, but the call has no conversation to ask: {decision.reason}", details=details
            )
        approval_key = _approval_key(call.name, call.args, decision)
        if approval_key in self._session_approvals.get((project_id, cid), set()):
            return
        answer = await self._ask(project_id, cid, call, decision, project.tools.approval_timeout_s, ext)
        if answer == "cancelled":
            raise JidoError("the call was cancelled while waiting for approval", error_type="cancelled")
        if answer == "approve_session":
            self._remember(project_id, cid, approval_key)
        elif answer != "approve_once":
            raise PermissionDenied(
                "the user denied the call"
                if answer == "deny"
                else f"no approval within {project.tools.approval_timeout_s:g} s",
                details={**details, "approval": answer},
            )

    def _remember(self, project_id: str, cid: str, approval_key: str) -> None:
        """Keep an ``approve_session`` (bounded: oldest conversations and entries are forgotten)."""
        keys = self._session_approvals.setdefault((project_id, cid), set())
        self._session_approvals.move_to_end((project_id, cid))
        if len(keys) < MAX_SESSION_APPROVALS:
            keys.add(approval_key)
        while len(self._session_approvals) > MAX_APPROVAL_CONVERSATIONS:
            self._session_approvals.popitem(last=False)

    async def _ask(
        self,
        project_id: str,
        cid: str,
        call: RunTool,
        decision: Decision,
        timeout_s: float,
        ext: dict[str, Any],
    ) -> str:
        request_id = call.meta.request_id
        pending_key = (project_id, cid, request_id)
        fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._pending[pending_key] = fut
        await self._watch_conversation(project_id, cid)
        try:
            await self.bus.publish(
                subjects.conversation_out(project_id, cid, "conversation.approval.requested"),
                ApprovalRequested(
                    request_id=request_id, tool=call.name, args=call.args, reason=decision.reason
                ),
                **ext,
            )
            try:
                return await asyncio.wait_for(fut, timeout_s)
            except TimeoutError:
                return "timeout"
        finally:
            self._pending.pop(pending_key, None)
            await self._unwatch_conversation(project_id, cid)

    async def _watch_conversation(self, project_id: str, cid: str) -> None:
        key = (project_id, cid)
        current = self._conv_subs.get(key)
        if current is not None:
            self._conv_subs[key] = (current[0], current[1] + 1)
            return

        async def on_input(env: Envelope) -> None:
            if env.type != "conversation.approval.response":
                return
            try:
                answer = ApprovalResponse.model_validate({**(env.data or {}), "type": env.type})
            except ValueError:
                log.warning("malformed approval response on %s", env.nats_subject)
                return
            fut = self._pending.get((project_id, cid, answer.request_id))
            if fut is not None and not fut.done():
                fut.set_result(answer.decision)

        sub = await self.bus.subscribe(subjects.conversation_in(project_id, cid), on_input)
        await self.bus.nc.flush()
        self._conv_subs[key] = (sub, 1)

    async def _unwatch_conversation(self, project_id: str, cid: str) -> None:
        key = (project_id, cid)
        current = self._conv_subs.get(key)
        if current is None:
            return
        sub, count = current
        if count > 1:
            self._conv_subs[key] = (sub, count - 1)
            return
        del self._conv_subs[key]
        with contextlib.suppress(nats.errors.Error):
            await sub.unsubscribe()

    # -- asset tools ----------------------------------------------------------------------------

    async def _asset_tool_spec(self, project_id: str, name: str) -> dict[str, Any]:
        try:
            catalog = await AssetsClient(self.bus, project_id).tools()
        except JidoError as exc:
            raise NotFound(
                f"unknown tool {name!r} (the asset loader could not list its tools: {exc.message})",
                details={"tool": name},
            ) from None
        for spec in catalog.tools:
            if spec.name == name:
                return spec.model_dump()
        raise NotFound(f"unknown tool {name!r}", details={"tool": name})

    async def _forward(
        self, project_id: str, call: RunTool, limits: Limits, ext: dict[str, Any]
    ) -> ToolResult:
        # A workflow or a skill route runs its own steps through this runner, each
        # under the per-call timeout: give the composite call room for its steps.
        timeout = limits.timeout_s * (COMPOSITE_STEPS if call.name in COMPOSITE_ASSET_TOOLS else 1)
        return await AssetsClient(self.bus, project_id).call_tool(call, timeout=timeout, **ext)

    # -- cancel ----------------------------------------------------------------------------------

    async def handle_cancel(self, cancel: CancelTool, env: Envelope) -> ToolCancelAccepted:
        project_id = scoped_project_id(env)
        key = _call_key(project_id, cancel.request_id)
        assert self.calls is not None
        # a call that has not started yet must never start
        with contextlib.suppress(nats.js.errors.KeyWrongLastSequenceError):
            await self.calls.create(key, json.dumps({"state": "cancelled", "at": time.time()}).encode())
        await self.bus.publish(
            subjects.signal("tool.cancel_requested"),
            ToolCancelRequested(project_id=project_id, request_id=cancel.request_id),
            project_id=project_id,
            causation_id=env.id,
        )
        return ToolCancelAccepted(request_id=cancel.request_id, cancel_requested=True)

    async def _on_cancel_signal(self, env: Envelope) -> None:
        if env.type != "tool.cancel_requested":
            return
        try:
            sig = ToolCancelRequested.model_validate({**(env.data or {}), "type": env.type})
        except ValueError:
            return
        key = (sig.project_id, sig.request_id)
        if key not in self._active:
            return  # another replica's call (or not started: the KV record stops it)
        self._cancelled.add(key)
        task = self._running.get(key)
        if task is not None:
            task.cancel()
        self._quotas.interrupt(key, JidoError("the call was cancelled", error_type="cancelled"))
        # a call waiting for approval stops waiting
        for (p, _c, r), fut in list(self._pending.items()):
            if (p, r) == key and not fut.done():
                fut.set_result("cancelled")


def _approval_key(name: str, args: dict[str, Any], decision: Decision) -> str:
    """What ``approve_session`` remembers: the exact command, the resolved path, or the tool."""
    if name == "bash":
        return f"bash\0{args.get('command')}"
    if decision.path is not None:
        return f"{name}\0{decision.path}"
    return f"{name}\0{json.dumps(args, sort_keys=True, default=str)}"


async def serve(config: Config, stop: asyncio.Event) -> None:
    """Run one tool-runner replica until ``stop`` is set."""
    bus = await Bus.connect(config, "tool_runner")
    try:
        wait = float(os.environ.get("JIDO_TOOL_QUOTA_WAIT_S", DEFAULT_QUOTA_WAIT_S))
        runner = ToolRunner(bus, config, quota_wait_s=wait)
        await runner.start()
        log.info("tool runner ready")
        await stop.wait()
        await runner.stop()
    finally:
        await bus.close()
