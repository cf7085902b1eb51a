"""The client SDK over NATS (seed 003 ``JaatoClient`` verbs).

::

    client = await JidoClient.connect("nats://127.0.0.1:4222", "/path/to/project", model="openai/gpt-4.1")
    await client.configure_tools(unexpose=["bash"], approve=lambda req: "approve_once")
    answer = await client.send_message("What is in README.md?", on_delta=print_piece)
    usage = await client.get_context_usage()      # tokens used vs the model's context window
    history = await client.get_history()          # OpenAI-style messages
    await client.reset_session()                  # a fresh conversation in the same project
    answer = await client.run_command("review", "src/app.py")   # .jido/commands/review.md, rendered and sent
    report = await client.reload_assets()         # reload skills, commands, workflows now
    await client.close()

What it talks to, through the typed clients of ``shared.clients``: the
engine (``EngineClient.start_project``: same root, same project id), the
conversation service directly (``ConversationsClient``: ``start``,
``send_event``, ``get_projection``, ``stop`` on ``jido.conversations.<p>.<verb>``,
one hop) and the conversation's output (``jido.evt.<p>.<c>.>``) for deltas,
timeline entries and approval requests. Approval requests reach the
``approve`` callback; its answer goes back as an
:class:`~jidocode.shared.events.conversation.ApprovalResponse` on the
conversation's input.

Slash commands (seed 000 ``Loaders.Command``, "command descriptors usable by
dispatch"): :meth:`JidoClient.run_command` renders the project's command with
its arguments (the asset loader's ``run_command`` tool via
``AssetsClient.render_command``) and sends the prompt as the user's message, so
the turn is an ordinary one; :func:`~jidocode.client.parse_slash_command`
reads ``/name arguments`` from a line the user typed.

Trust: :attr:`JidoClient.trust_state` says whether the user trusts the
project's root (its own settings, hooks and MCP servers count only then), read
from the same store the services read (``<global home>/trusted_projects.json``,
``shared/trust.py``); :meth:`JidoClient.trust` records the user's yes. A client
on another machine than the services sees its own store, not theirs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import nats.errors
from nats.aio.subscription import Subscription

from jidocode.shared import clients as service_clients  # each client's events on first use
from jidocode.shared import subjects
from jidocode.shared.bus import Bus
from jidocode.shared.clients import ConversationsClient, EngineClient
from jidocode.shared.config import Config, default_jido_home
from jidocode.shared.envelope import Envelope, new_id
from jidocode.shared.errors import ErrorInfo, InvalidInput, JidoError, NotFound, RequestTimeout, from_info
from jidocode.shared.events import EventModel
from jidocode.shared.events.conversation import (
    ApprovalRequested,
    AssistantDelta,
    Cancel,
    Compact,
    Resume,
    UserMessage,
)
from jidocode.shared.events.engine import ProjectInfo
from jidocode.shared.events.llm import UsageTotals
from jidocode.shared.ledger import LedgerReader
from jidocode.shared.trust import TrustState, trust_project, trust_state

from ._callbacks import (
    ApprovalAnswer,
    ApprovalRequest,
    ApproveCallback,
    Decision,
    DeltaCallback,
    EventCallback,
    approval_request_of,
    approval_response,
    call_back,
    response_of,
)
from ._commands import RenderedCommand, is_command_name
from ._compaction import CompactionResult, wait_for_compaction
from ._rewind import Confirm, RewindOutcome, RewindWhat, rewind
from ._send import send_again_while_unanswered
from ._turn import TurnOutcome, TurnTracker
from ._usage import ContextUsage, context_usage_of

if TYPE_CHECKING:
    from jidocode.shared.events.assets import AssetReport

    from ._plugins import PluginRegistry

__all__ = [
    "ApprovalRequest",
    "ApproveCallback",
    "ContextUsage",
    "Decision",
    "JidoClient",
    "TurnFailed",
    "connect",
]

log = logging.getLogger("jidocode.client")

#: Seconds a request to the engine or the conversation service may take.
REQUEST_TIMEOUT = 15.0
#: Seconds a reload of the project's assets may take (it reads every asset file).
RELOAD_TIMEOUT = 30.0


class TurnFailed(JidoError):  # type: ignore[misc]
    """A turn ended without an answer: ``type`` is the cause (``llm_auth``, ``max_turns``, ``cancelled`` …)."""

    error_type = "turn_failed"


class JidoClient:
    """One project, one conversation at a time. Make one with :meth:`connect`."""

    def __init__(
        self,
        bus: Bus,
        project: ProjectInfo,
        *,
        owns_bus: bool,
        settings: dict[str, Any],
        jido_home: Path | None = None,
    ) -> None:
        self.bus = bus
        self.jido_home = jido_home or default_jido_home()
        self.project = project
        self.project_id: str = project.project_id
        self.root_path: str = project.root_path
        self.conversations = ConversationsClient(bus, project.project_id, timeout=REQUEST_TIMEOUT)
        self.conversation_id: str | None = None
        self._owns_bus = owns_bus
        self._settings = dict(settings)
        self._expose: list[str] = []
        self._unexpose: list[str] = []
        self._approve: ApproveCallback | None = None
        self._sub: Subscription | None = None
        self._listeners: list[Callable[[Envelope], Awaitable[None]]] = []
        self._event_hooks: list[EventCallback] = []
        self._tasks: set[asyncio.Task[None]] = set()

    # -- connecting -----------------------------------------------------------

    @classmethod
    async def connect(
        cls,
        nats_url: str | None = None,
        project_dir: str | os.PathLike[str] = ".",
        *,
        model: str | None = None,
        api_base: str | None = None,
        api_key_env: str | None = None,
        settings: dict[str, Any] | None = None,
        conversation_id: str | None = None,
        bus: Bus | None = None,
        config: Config | None = None,
        wait: bool = True,
    ) -> JidoClient:
        """Connect to NATS, open the project at ``project_dir`` (same root, same id).

        ``model`` (and any ``settings``, e.g. ``{"max_turns": 5}``) override the
        project's ``llm`` settings for this client's conversations.
        ``api_base`` points them at another OpenAI-compatible endpoint and
        ``api_key_env`` names the variable (in the conversation service's
        environment) holding its key; setting either replaces both, so a key from
        the settings files is never sent to a base the client chose.
        ``conversation_id`` reopens an existing conversation (resume after a restart).
        ``wait=False`` fails at once (``ServiceUnavailable``, saying how to start
        JidoCode) when no NATS server answers, instead of retrying.
        """
        owns = bus is None
        jido_home = config.jido_home if config is not None else None
        if bus is None:
            cfg = config or Config.from_env(**({"nats_url": nats_url} if nats_url else {}))
            jido_home = cfg.jido_home
            bus = await Bus.connect(cfg, name="client", wait=wait)
        try:
            root = str(Path(project_dir).expanduser().resolve())
            info = await EngineClient(bus, timeout=REQUEST_TIMEOUT).start_project(root)
            merged = dict(settings or {})
            if model:
                merged["model"] = model
            if api_base:
                merged["api_base"] = api_base
            if api_key_env:
                merged["api_key_env"] = api_key_env
            client = cls(bus, info, owns_bus=owns, settings=merged, jido_home=jido_home)
            if conversation_id is not None:
                await client.start_conversation(conversation_id)
            return client
        except BaseException:
            if owns:
                await bus.close()
            raise

    async def close(self) -> None:
        """Stop following the conversation (it keeps running) and disconnect if the bus is ours."""
        if self._sub is not None:
            with contextlib.suppress(JidoError, OSError):
                await self._sub.unsubscribe()
            self._sub = None
        for task in list(self._tasks):
            task.cancel()
        if self._owns_bus:
            await self.bus.close()

    async def __aenter__(self) -> JidoClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- configuration ----------------------------------------------------------

    async def configure_tools(
        self,
        expose: Sequence[str] | None = None,
        unexpose: Sequence[str] | None = None,
        approve: ApproveCallback | None = None,
    ) -> None:
        """Choose the tools the model sees (within the policy) and who answers approvals.

        ``expose`` (only these) and ``unexpose`` (all but these) travel as the
        conversation's ``tools`` settings: sent at once to a running conversation
        (``start`` merges settings) and with every later one.
        ``approve`` applies at once.
        """
        changed = expose is not None or unexpose is not None
        if expose is not None:
            self._expose = list(expose)
        if unexpose is not None:
            self._unexpose = list(unexpose)
        if approve is not None:
            self._approve = approve
        if changed and self.conversation_id is not None:
            await self.conversations.start(self.conversation_id, settings=self._conversation_settings())

    @property
    def tool_exposure(self) -> tuple[list[str], list[str]]:
        """The conversation's ``expose`` and ``unexpose`` lists (tool or plugin names)."""
        return list(self._expose), list(self._unexpose)

    @property
    def plugins(self) -> PluginRegistry:
        """Seed 003's plugin registry of this project and conversation (``discover``,
        ``expose_tool``, ``unexpose_tool``)."""
        from ._plugins import PluginRegistry  # the plugins' models: only when asked for

        return PluginRegistry(self)

    def on_event(self, callback: EventCallback) -> None:
        """Call ``callback`` with every output event of the conversation (the CLI's ``--json``)."""
        self._event_hooks.append(callback)

    # -- trust ----------------------------------------------------------------------

    @property
    def trust_state(self) -> TrustState:
        """Whether the user trusts this project's root; untrusted, its settings can only restrict."""
        return trust_state(self.root_path, home=self.jido_home)

    async def trust(self) -> TrustState:
        """Trust this project's root (what ``jidocode projects trust <root>`` does).

        Conversations started after this use the project's own settings and the
        tool runner's policy follows at once; the project's assets are reloaded
        so its hooks count too (best effort: a reload that fails is logged).
        """
        state = trust_project(self.root_path, home=self.jido_home)
        try:
            await service_clients.AssetsClient(self.bus, self.project_id, timeout=REQUEST_TIMEOUT).reload()
        except JidoError as exc:
            log.warning("assets of %s not reloaded after trusting it: %s", self.project_id, exc)
        return state

    # -- conversation ------------------------------------------------------------

    def _conversation_settings(self) -> dict[str, Any]:
        settings = dict(self._settings)
        settings["tools"] = {"expose": list(self._expose), "unexpose": list(self._unexpose)}
        return settings

    async def start_conversation(self, conversation_id: str | None = None) -> str:
        """Start (or reopen) a conversation and follow its output. Returns its id."""
        if conversation_id is None:
            conversation_id = new_id().lower()
        subjects.validate_token(conversation_id, "conversation id")
        await self._follow(conversation_id)
        try:
            info = await self.conversations.start(conversation_id, settings=self._conversation_settings())
        except BaseException:
            await self._unfollow()
            raise
        if info.conversation_id and info.conversation_id != conversation_id:
            await self._follow(info.conversation_id)
            conversation_id = info.conversation_id
        self.conversation_id = conversation_id
        return conversation_id

    async def _ensure_conversation(self) -> str:
        if self.conversation_id is None:
            return await self.start_conversation()
        return self.conversation_id

    async def _unfollow(self) -> None:
        if self._sub is not None:
            with contextlib.suppress(JidoError, OSError):
                await self._sub.unsubscribe()
            self._sub = None

    async def _follow(self, conversation_id: str) -> None:
        await self._unfollow()
        self._sub = await self.bus.subscribe(
            subjects.conversation_out_filter(self.project_id, conversation_id), self._dispatch
        )
        # make sure the server has the interest before anything is sent
        await self.bus.nc.flush()

    async def _dispatch(self, env: Envelope) -> None:
        for hook in list(self._event_hooks):
            try:
                await call_back(hook, env)
            except Exception:
                log.exception("event callback failed on %s", env.type)
        if env.type == ApprovalRequested.TYPE:
            self._spawn(self._answer_approval(env))
        for listener in list(self._listeners):
            await listener(env)

    def _spawn(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer_approval(self, env: Envelope) -> None:
        if self._approve is None:
            return  # another client may answer; no answer in time is a denial
        request = approval_request_of(env, self.conversation_id or "")
        if request is None:
            log.warning("malformed approval request %s: not answered", env.id)
            return
        response = await response_of(self._approve, request)
        await self.send_event(response, correlation_id=env.correlation_id)

    async def answer_approval(self, request: ApprovalRequest, answer: ApprovalAnswer) -> None:
        """Answer ``request`` outside the ``approve`` callback (e.g. from an ``on_event`` hook);
        :class:`InvalidInput` naming the field when ``answer``'s content does not fit its form."""
        await self.send_event(approval_response(request, answer))

    async def send_event(
        self, event: EventModel, *, id: str | None = None, correlation_id: str | None = None
    ) -> str:
        """Send one external event (user message, cancel, resume, approval answer); returns its id."""
        conversation_id = await self._ensure_conversation()
        event_id = id or new_id()
        return await send_again_while_unanswered(
            self.conversations, conversation_id, event, event_id, correlation_id or event_id
        )

    async def send_message(
        self,
        text: str,
        on_delta: DeltaCallback | None = None,
        *,
        timeout: float | None = None,
    ) -> str:
        """Send ``text``; stream the answer's pieces to ``on_delta``; return the final answer.

        Raises :class:`TurnFailed` (``type`` = the cause: ``llm_auth``,
        ``llm_rate_limited``, ``max_turns``, ``cancelled`` …) when the turn
        ends without an answer, ``RequestTimeout`` after ``timeout`` seconds.
        """
        await self._ensure_conversation()
        message_id = new_id()
        tracker = TurnTracker(message_id=message_id, correlation_id=message_id)
        done: asyncio.Future[TurnOutcome] = asyncio.get_running_loop().create_future()

        async def listen(env: Envelope) -> None:
            data = env.data if isinstance(env.data, dict) else {}
            if tracker.started and env.type == AssistantDelta.TYPE and on_delta is not None:
                try:
                    await call_back(on_delta, str(data.get("text", "")))
                except Exception:
                    log.exception("on_delta failed")
            outcome = tracker.feed(env.type, data, event_id=env.id, correlation_id=env.correlation_id)
            if outcome is not None and not done.done():
                done.set_result(outcome)

        self._listeners.append(listen)
        try:
            # one trace per user message: this span is its root while tracing is on
            with _send_span(self.bus, self.project_id, self.conversation_id, message_id) as sp:
                await self.send_event(UserMessage(text=text), id=message_id, correlation_id=message_id)
                try:
                    outcome = await asyncio.wait_for(done, timeout)
                except TimeoutError:
                    raise RequestTimeout(
                        f"no answer within {timeout:g} s", details={"conversation_id": self.conversation_id}
                    ) from None
                if sp is not None:
                    sp.set_attribute("jido.outcome", outcome.status)
        finally:
            self._listeners.remove(listen)
        if outcome.status == "answered":
            return outcome.text
        raise TurnFailed(
            outcome.message or outcome.status,
            error_type=outcome.error_type or outcome.status,
            retryable=outcome.retryable,
            details={"status": outcome.status, "conversation_id": self.conversation_id},
        )

    # -- slash commands and assets ------------------------------------------------

    async def list_commands(self) -> list[dict[str, Any]]:
        """The project's slash commands: ``{name, description, layer, path, …}`` each."""
        assets = service_clients.AssetsClient(self.bus, self.project_id, timeout=REQUEST_TIMEOUT)
        return list((await assets.list("command")).items)

    async def render_command(self, name: str, arguments: str = "") -> RenderedCommand:
        """The project's command ``name`` rendered with ``arguments`` (nothing is sent).

        Raises :class:`~jidocode.shared.errors.NotFound` for a command the project does
        not have (``details["available"]`` lists those it has, and the message names
        them), :class:`~jidocode.shared.errors.InvalidInput` for a name that cannot be a
        command or a missing required argument.
        """
        if not is_command_name(name):
            raise InvalidInput(
                f"{name!r} is not a command name (a-z, 0-9, single hyphens, at most 64 characters)",
                details={"command": name},
            )
        assets = service_clients.AssetsClient(self.bus, self.project_id, timeout=REQUEST_TIMEOUT)
        result = await assets.render_command(
            name, arguments, conversation_id=self.conversation_id, timeout=REQUEST_TIMEOUT
        )
        if result.ok and isinstance(result.data, dict) and isinstance(result.data.get("prompt"), str):
            model = result.data.get("model")
            return RenderedCommand(
                name=name,
                arguments=arguments,
                prompt=result.data["prompt"],
                model=model if isinstance(model, str) else None,
            )
        error = result.error
        if error is None:
            raise JidoError(f"the asset loader rendered /{name} without a prompt", details={"command": name})
        if error.type == NotFound.error_type:
            available = sorted(str(item.get("name")) for item in await self.list_commands())
            listed = ", ".join(f"/{n}" for n in available) or "none (add .jido/commands/<name>.md)"
            raise NotFound(
                f"this project has no command /{name}; its commands: {listed}",
                details={"command": name, "available": available},
            )
        raise from_info(ErrorInfo(type=error.type, message=error.message, details=dict(error.details)))

    async def run_command(
        self,
        name: str,
        arguments: str = "",
        on_delta: DeltaCallback | None = None,
        *,
        timeout: float | None = None,
    ) -> str:
        """Run the slash command ``/name arguments``: render it, send the prompt as the user's message.

        Returns the final answer like :meth:`send_message` (and raises like it); a
        command that does not render raises before anything is sent (see
        :meth:`render_command`).
        """
        rendered = await self.render_command(name, arguments)
        return await self.send_message(rendered.prompt, on_delta, timeout=timeout)

    async def reload_assets(self) -> AssetReport:
        """Seed 000 ``reload_assets``: reload the project's skills, commands, workflows and settings now.

        Returns the new generation with its counts and diagnostics (settings problems included).
        """
        return await service_clients.ProjectClient(
            self.bus, self.project_id, timeout=RELOAD_TIMEOUT
        ).reload_assets()

    async def cancel(self, reason: str | None = None) -> None:
        """Cancel the running turn (the LLM call and the running tools stop)."""
        await self.send_event(Cancel(reason=reason))

    async def resume(self) -> None:
        """Resume a cancelled conversation."""
        await self.send_event(Resume())

    async def compact(
        self, instructions: str | None = None, *, timeout: float | None = 300.0
    ) -> CompactionResult:
        """Compact the context now: the older part is summarised by the model (``/compact``).

        ``instructions`` say what the summary must keep. Returns when the compaction ended
        (during a turn: before its next model call); nothing leaves the journal or the timeline.
        """
        await self._ensure_conversation()
        return await wait_for_compaction(
            self._listeners, lambda: self.send_event(Compact(instructions=instructions)), timeout=timeout
        )

    async def rewind(
        self, message_id: str, what: RewindWhat = "both", *, confirm: Confirm | bool = False, **options: bool
    ) -> RewindOutcome:
        """Go back before a user message: its files, the conversation, or both (``client/_rewind.py``)."""
        cid = await self._ensure_conversation()
        return await rewind(self.conversations, cid, message_id, what, confirm=confirm, **options)

    async def get_projection(self, name: str) -> Any:
        """The value of the conversation's projection ``name`` (``timeline``, ``llm_context``, ``usage`` …)."""
        conversation_id = await self._ensure_conversation()
        return (await self.conversations.get_projection(conversation_id, name)).value

    async def get_history(self) -> list[dict[str, Any]]:
        """The conversation as OpenAI-style messages (the ``llm_context`` projection)."""
        result = await self.get_projection("llm_context")
        return list(result) if isinstance(result, list) else []

    async def get_timeline(self) -> list[dict[str, Any]]:
        result = await self.get_projection("timeline")
        return list(result) if isinstance(result, list) else []

    async def get_usage(self) -> UsageTotals:
        """The conversation's summed usage (the ``usage`` projection)."""
        result = await self.get_projection("usage")
        data = dict(result) if isinstance(result, dict) else {}
        return UsageTotals.model_validate(
            {**data, "project_id": self.project_id, "conversation_id": self.conversation_id}
        )

    async def get_context_usage(self) -> ContextUsage:
        """Tokens in the model's context now vs its context window, with the conversation's totals.

        Totals come from the conversation's ``usage`` projection; the context
        fill (the last call's prompt + completion) and the window from the token ledger,
        else (a conversation service without a ledger) from the ``usage`` projection too,
        where the conversation service reports the last model's window.
        """
        totals = await self.get_usage()
        assert self.conversation_id is not None
        try:
            ledger = await LedgerReader(self.bus).conversation(self.project_id, self.conversation_id)
        except (JidoError, nats.errors.Error, TimeoutError):  # no ledger, or not ours to read
            ledger = UsageTotals()
        return context_usage_of(totals, ledger)

    async def get_project_usage(self) -> UsageTotals:
        """The token ledger's totals over every conversation of the project."""
        return await LedgerReader(self.bus).project(self.project_id)

    async def reset_session(self) -> str:
        """Stop the current conversation and start a fresh one (history starts empty)."""
        if self.conversation_id is not None:
            old = self.conversation_id
            with contextlib.suppress(JidoError):
                await self.conversations.stop(old, reason="reset")
            await self._unfollow()
            self.conversation_id = None
        return await self.start_conversation()

    async def stop(self) -> None:
        """Stop the conversation (its journal stays; ``connect(conversation_id=…)`` reopens it)."""
        if self.conversation_id is not None:
            await self.conversations.stop(self.conversation_id, reason="client")


async def connect(
    nats_url: str | None = None,
    project_dir: str | os.PathLike[str] = ".",
    *,
    model: str | None = None,
    **kwargs: Any,
) -> JidoClient:
    """``JidoClient.connect`` (seed 003 ``connect(…, model)``)."""
    return await JidoClient.connect(nats_url, project_dir, model=model, **kwargs)


@contextlib.contextmanager
def _send_span(bus: Bus, project_id: str, conversation_id: str | None, message_id: str) -> Iterator[Any]:
    """The client's ``send_message`` span (nothing while tracing is off)."""
    if bus.tracer is None:
        yield None
        return
    from jidocode.shared.telemetry import ATTR_CONVERSATION, ATTR_PROJECT
    from jidocode.shared.telemetry.spans import span

    attrs = {ATTR_PROJECT: project_id, ATTR_CONVERSATION: conversation_id, "jido.correlation_id": message_id}
    with span(bus.tracer, "send_message", attributes=attrs) as sp:
        yield sp
