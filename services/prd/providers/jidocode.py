"""The default provider: one iteration is one conversation of this system in the request's work dir.

Only through the typed clients: :class:`EngineClient` opens the work dir as a project (a PRD
worktree is a project of its own: same root, same id), :class:`ConversationsClient` starts a
conversation there (``settings.model`` when a model is chosen) and sends the prompt; the
conversation's output (``jido.evt.<p>.<c>.>``) is followed from before the message is sent, and
:class:`~.turn.Turn` says when the turn is over (the client SDK's rules). So the project's policy, its
sandbox and its tool runner apply to everything the model does: that is the point of this provider.

Output → normalized events (:func:`normalize`, pure): the final assistant message of each model
call → ``assistant_text``; a tool call requested → ``tool_started``; completed / failed →
``tool_finished`` (a ``bash`` call's output also as ``command_output``); the turn's outcome →
``iteration_finished``, or ``error`` with a failure kind (:func:`failure_of`). The story is done
(``IterationResult.done``) only when the final answer ends with :data:`~..prompt.DONE_MARKER`, as
the story prompt asks; what the model calls cost is summed in ``metadata.cost_usd``.

Approvals (docs/decisions/0275): with ``approval_policy="never"`` (the loop's default: nobody
watches) an approval request is answered ``deny`` at once and the result notes it
(``metadata.approvals_denied``, the tools in ``metadata.denied_tools``); with ``"on-request"`` it
is left to a human (console, CLI) and a ``tool_started`` with ``metadata.approval = "pending"``
says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any, Final

from nats.aio.subscription import Subscription

from jidocode.services.prd.config import ProviderSettings
from jidocode.services.prd.prompt import reports_done
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.clients import ConversationsClient, EngineClient
from jidocode.shared.envelope import Envelope, new_id
from jidocode.shared.errors import InvalidInput, JidoError, NotFound
from jidocode.shared.events.conversation import (
    ApprovalRequested,
    ApprovalResponse,
    AssistantMessage,
    Cancel,
    LlmCompleted,
    ToolCallCompleted,
    ToolCallFailed,
    ToolCallRequested,
    UserMessage,
)

from .base import (
    FailureKind,
    IterationRequest,
    ProviderCapabilities,
    ProviderContext,
    ProviderError,
    ProviderEvent,
    full_prompt,
)
from .channel import ChannelRun
from .sequence import Sequencer, clip, clip_input
from .turn import Outcome, Turn

__all__ = ["APPROVAL_MODES", "JidocodeProvider", "create", "failure_of", "normalize"]

log = logging.getLogger(__name__)

APPROVAL_MODES: Final = ("never", "on-request")
#: Seconds a request to a service is waited for.
_REQUEST_S: Final = 30.0
#: Seconds a cancel waits for the conversation to confirm it.
_CANCEL_S: Final = 10.0
_CONFIG_ERRORS: Final = frozenset(
    {"llm_auth", "llm_unknown_model", "llm_not_configured", "llm_invalid_settings"}
)
_FATAL_ERRORS: Final = frozenset({"llm_budget_exceeded", "llm_bad_request", "llm_context_overflow"})
_USAGE_KEYS: Final = ("prompt_tokens", "completion_tokens", "cached_tokens", "total_tokens")


def failure_of(outcome: Outcome) -> FailureKind:
    """The failure kind of a turn that did not answer."""
    if outcome.status == "cancelled":
        return "cancelled"
    if outcome.status == "stopped":
        return "transient"  # the turn limit: another attempt starts afresh
    kind = outcome.error_type or ""
    if kind in _CONFIG_ERRORS:
        return "config"
    if kind in _FATAL_ERRORS and not outcome.retryable:
        return "fatal"
    return "transient"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _rendered(data: Any) -> str:
    if isinstance(data, str):
        return data
    if isinstance(data, dict) and isinstance(data.get("output"), str):
        return str(data["output"])
    if data is None:
        return ""
    return clip(_json(data) if isinstance(data, dict | list) else repr(data))


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(value)


def normalize(event_type: str, data: dict[str, Any]) -> list[ProviderEvent]:
    """One conversation output event (after the turn began) to normalized events (pure)."""
    match event_type:
        case AssistantMessage.TYPE:
            text = _text(data.get("text"))
            return [ProviderEvent(kind="assistant_text", text=text)] if text else []
        case ToolCallRequested.TYPE:
            raw = data.get("args")
            args: dict[str, Any] = raw if isinstance(raw, dict) else {}
            name = _text(data.get("name"))
            command = _text(args.get("command")) if name == "bash" else ""
            return [
                ProviderEvent(
                    kind="tool_started",
                    tool=name,
                    call_id=_text(data.get("call_id")),
                    input=clip_input(args),
                    command=command,
                )
            ]
        case ToolCallCompleted.TYPE:
            result = data.get("data")
            code = result.get("exit_code") if isinstance(result, dict) else None
            return [
                ProviderEvent(
                    kind="tool_finished",
                    tool=_text(data.get("name")),
                    call_id=_text(data.get("call_id")),
                    ok=True,
                    text=_rendered(result),
                    exit_code=code if isinstance(code, int) and not isinstance(code, bool) else None,
                )
            ]
        case ToolCallFailed.TYPE:
            error_type = _text(data.get("error_type"))
            return [
                ProviderEvent(
                    kind="tool_finished",
                    tool=_text(data.get("name")),
                    call_id=_text(data.get("call_id")),
                    ok=False,
                    text=f"{error_type}: {_text(data.get('message'))}",
                    metadata={"error_type": error_type},
                )
            ]
    return []


class JidocodeProvider:
    """Iterations as conversations of this system (see the module doc)."""

    def __init__(self, settings: ProviderSettings, context: ProviderContext) -> None:
        if context.bus is None:
            raise InvalidInput("the jidocode provider needs the bus (ProviderContext.bus)")
        self._bus: Bus = context.bus
        self._settings = settings
        self._context = context

    def name(self) -> str:
        return "jidocode"

    def capabilities(self) -> ProviderCapabilities:
        return ProviderCapabilities(
            streaming=True, tool_calls=True, sandbox_control=True, approval_modes=list(APPROVAL_MODES)
        )

    async def run_iteration(self, request: IterationRequest) -> ConversationRun:
        if request.approval_policy not in APPROVAL_MODES:
            raise ProviderError(
                "config",
                f"approval_policy {request.approval_policy!r} is not supported by jidocode "
                f"(supported: {', '.join(APPROVAL_MODES)})",
            )
        try:
            info = await EngineClient(self._bus, timeout=_REQUEST_S).start_project(request.work_dir)
        except JidoError as exc:
            raise ProviderError(
                "transient" if exc.retryable else "config",
                f"the work dir {request.work_dir!r} cannot be opened as a project: {exc.message}",
            ) from None
        model = request.model or self._settings.model or self._context.default_model
        run = ConversationRun(
            self._bus,
            info.project_id,
            request,
            settings={"model": model} if model else {},
            timeout_s=self._settings.timeout_s,
        )
        await run.start()
        return run

    async def abandon(self, iteration_id: str, work_dir: str) -> None:
        """Stop the conversation of an iteration a dead owner left running (``Abandons``): the
        stop cancels its model call and tool calls; one that is gone or stopped needs nothing."""
        try:
            subjects.validate_token(iteration_id, "iteration id")
        except ValueError as exc:
            raise InvalidInput(str(exc), details={"iteration_id": iteration_id}) from None
        info = await EngineClient(self._bus, timeout=_REQUEST_S).start_project(work_dir)
        client = ConversationsClient(self._bus, info.project_id, timeout=_REQUEST_S)
        try:
            await client.stop(iteration_id, reason="PRD loop taken over by another replica")
        except NotFound:
            return


def _conversation_id(request: IterationRequest) -> str:
    """The iteration's name as the loop gave it (so a replica taking the loop over can stop this
    conversation: :meth:`JidocodeProvider.abandon`), else a fresh one."""
    named = request.metadata.get("iteration_id", "")
    try:
        return subjects.validate_token(named, "iteration id") if named else new_id().lower()
    except ValueError:
        return new_id().lower()


class ConversationRun(ChannelRun):
    """One conversation's turn, followed (an :class:`~.base.IterationRun`; events, result and cancel
    from :class:`ChannelRun`)."""

    def __init__(
        self,
        bus: Bus,
        project_id: str,
        request: IterationRequest,
        *,
        settings: dict[str, Any],
        timeout_s: float,
    ) -> None:
        super().__init__()
        self._bus = bus
        self.project_id = project_id
        self.conversation_id = _conversation_id(request)
        self._request = request
        self._settings = settings
        self._timeout_s = timeout_s
        self._client = ConversationsClient(bus, project_id, timeout=_REQUEST_S)
        self._message_id = new_id()
        self._tracker = Turn(message_id=self._message_id)
        self._seq = Sequencer("jidocode", {"project_id": project_id, "conversation_id": self.conversation_id})
        self._outcome: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self._sub: Subscription | None = None
        self._usage: dict[str, int] = {}
        self._cost_usd = 0.0
        self._denied: list[str] = []
        self._pending = 0
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Follow the output, start the conversation, send the prompt; then watch for the end."""
        await self._channel.put(self._seq.open(), bounded=False)
        self._sub = await self._bus.subscribe(
            subjects.conversation_out_filter(self.project_id, self.conversation_id), self._on_event
        )
        await self._bus.nc.flush()
        try:
            await self._client.start(self.conversation_id, settings=self._settings)
            message = UserMessage(text=full_prompt(self._request))
            await self._client.send_event(
                self.conversation_id,
                message.type,
                message.to_data(),
                event_id=self._message_id,
                correlation_id=self._message_id,
            )
        except JidoError as exc:
            await self._unfollow()
            kind: FailureKind = "transient" if exc.retryable else "config"
            raise ProviderError(kind, f"the conversation did not start: {exc.message}") from None
        except BaseException:
            await self._unfollow()
            raise
        self._task = asyncio.create_task(self._watch(), name=f"prd-jidocode-{self.conversation_id}")

    # -- following the conversation ---------------------------------------------------------

    async def _on_event(self, env: Envelope) -> None:
        data = env.data if isinstance(env.data, dict) else {}
        was_started = self._tracker.started
        outcome = self._tracker.feed(env.type, data, event_id=env.id, correlation_id=env.correlation_id)
        if not was_started or self._outcome.done():
            return
        if env.type == LlmCompleted.TYPE:
            self._count_usage(data.get("usage"))
        elif env.type == ApprovalRequested.TYPE:
            await self._on_approval(data)
        await self._channel.put(self._seq.feed(normalize(env.type, data)), bounded=False)
        if outcome is not None and not self._outcome.done():
            self._outcome.set_result(outcome)

    def _count_usage(self, usage: Any) -> None:
        """Add one model call's token counts and cost to the iteration's."""
        if not isinstance(usage, dict):
            return
        for key in _USAGE_KEYS:
            value = usage.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                self._usage[key] = self._usage.get(key, 0) + value
        cost = usage.get("cost_usd")
        if isinstance(cost, int | float) and not isinstance(cost, bool) and 0 <= cost < float("inf"):
            self._cost_usd += float(cost)

    async def _on_approval(self, data: dict[str, Any]) -> None:
        tool = _text(data.get("tool"))
        request_id = _text(data.get("request_id"))
        if self._request.approval_policy == "never":
            self._denied.append(tool)
            self._spawn(self._deny(request_id))
            return
        self._pending += 1
        await self._channel.put(
            self._seq.feed(
                [
                    ProviderEvent(
                        kind="tool_started",
                        tool=tool,
                        input=clip_input(data.get("args")),
                        text=_text(data.get("reason")),
                        metadata={"approval": "pending", "request_id": request_id},
                    )
                ]
            ),
            bounded=False,
        )

    async def _deny(self, request_id: str) -> None:
        answer = ApprovalResponse(request_id=request_id, decision="deny")
        try:
            await self._client.send_event(self.conversation_id, answer.type, answer.to_data())
        except JidoError as exc:  # unanswered, the request times out as a denial anyway
            log.warning("approval %s of %s not denied: %s", request_id, self.conversation_id, exc)

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _watch(self) -> None:
        stopped: tuple[FailureKind, str] | None = None
        outcome: Outcome | None = None
        try:
            outcome = await asyncio.wait_for(asyncio.shield(self._outcome), self._timeout_s)
        except TimeoutError:
            stopped = (
                "transient",
                f"the conversation did not finish within {self._timeout_s:g} s; it was cancelled",
            )
            await asyncio.shield(self._stop_conversation("timeout"))
        except asyncio.CancelledError:
            stopped = ("cancelled", "the iteration was cancelled")
            await asyncio.shield(self._stop_conversation("cancelled by the PRD loop"))
        finally:
            await asyncio.shield(self._unfollow())
            await asyncio.shield(self._let_go())
        if outcome is not None and stopped is None:
            if outcome.status == "answered":
                usage = {f"usage.{k}": str(v) for k, v in self._usage.items()}
                self._seq.feed([ProviderEvent(kind="iteration_finished", text=outcome.text, metadata=usage)])
            else:
                kind = failure_of(outcome)
                message = outcome.message or outcome.status
                if outcome.error_type:
                    message = f"{outcome.error_type}: {message}"
                self._seq.feed([ProviderEvent(kind="error", text=message, metadata={"failure": kind})])
        if self._denied:
            self._seq.metadata["approvals_denied"] = str(len(self._denied))
            self._seq.metadata["denied_tools"] = ",".join(sorted(set(self._denied)))
        if self._pending:
            self._seq.metadata["approvals_pending"] = str(self._pending)
        if self._cost_usd:
            self._seq.metadata["cost_usd"] = f"{self._cost_usd:.6f}"
        tail, result = self._seq.finish(exit_code=None, stopped=stopped)
        if not result.usage and self._usage:
            result = result.model_copy(update={"usage": dict(self._usage)})
        answered = outcome is not None and stopped is None and outcome.status == "answered"
        result = result.model_copy(
            update={"done": answered and reports_done(outcome.text if outcome else "")}
        )
        self._result = result
        await self._channel.put(tail, bounded=False)
        await self._channel.close()

    async def _stop_conversation(self, reason: str) -> None:
        """Cancel the turn (its model call and tool calls) and wait a moment for it to say so."""
        cancel = Cancel(reason=reason)
        try:
            await self._client.send_event(self.conversation_id, cancel.type, cancel.to_data())
        except JidoError as exc:
            log.warning("cancel of %s not sent: %s", self.conversation_id, exc)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._outcome), _CANCEL_S)

    async def _let_go(self) -> None:
        """Stop the conversation's actor (its journal stays: the iteration's full record)."""
        try:
            await self._client.stop(self.conversation_id, reason="PRD iteration over")
        except JidoError as exc:
            log.warning("conversation %s not stopped: %s", self.conversation_id, exc)

    async def _unfollow(self) -> None:
        if self._sub is not None:
            sub, self._sub = self._sub, None
            with contextlib.suppress(JidoError, OSError):
                await sub.unsubscribe()
        for task in list(self._tasks):
            task.cancel()


def create(settings: ProviderSettings, context: ProviderContext) -> JidocodeProvider:
    """The registry's factory."""
    return JidocodeProvider(settings, context)
