"""The one litellm adapter: every model call of JidoCode goes through here.

:class:`LitellmPort` implements ``LlmPort.complete``: it resolves the model
settings (:mod:`.options`), calls ``litellm.acompletion(stream=True)``, sends
the text to ``on_delta`` as it arrives (in batches, :mod:`.live`: the first piece
at once, then at most one batch per ``live_interval_s``), assembles *every*
streamed tool call (:mod:`.stream`), and returns usage with the cost where
litellm knows the price. Rate limits, timeouts and transient 5xx are retried with bounded
exponential backoff (:mod:`.retry`), each retry reported (``llm.retrying``
signal and the optional ``on_retry`` callback) so the conversation can show
it. Errors leave as ``JidoError`` with a clear type:

=========================  =============================================  =========
error_type                 cause                                          retried
=========================  =============================================  =========
``llm_not_configured``     no model configured and none could be picked   no
``llm_invalid_settings``   a bad value in the ``llm`` settings            no
``llm_auth``               401/403 from the provider                      no
``llm_unknown_model``      litellm or the provider does not know it       no
``llm_context_overflow``   the messages exceed the context window         no
``llm_bad_request``        any other 4xx                                  no
``llm_rate_limited``       429                                            yes
``llm_timeout``            no answer within ``timeout_s``                 yes
``llm_unavailable``        5xx, connection refused or reset               yes
``llm_budget_exceeded``    the conversation's budget is used up           no
``llm_error``              anything else litellm raised                   no
=========================  =============================================  =========

A failure after text was already streamed is not retried (the deltas cannot
be taken back); it is raised with ``retryable=True`` for the caller to decide.

Telemetry (seed 000 §6, on ``jido.sig.llm.<…>`` through the sink): each call
is ``llm.started``, any ``llm.retrying``, its text as coalesced ``llm.delta``
(:mod:`.deltas`: at most one per ``delta_interval_s`` plus one per
``delta_max_chars`` characters), then ``llm.completed`` (also the ledger's input), or
``llm.failed`` (also when the call is cancelled: ``error_type``
``llm_cancelled``), all with the call's ``call_id``.

litellm is imported lazily (it takes seconds) and with
``LITELLM_LOCAL_MODEL_COST_MAP=True``, so importing it never fetches anything.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from jidocode.services.conversation.ports import LlmRequest, LlmResult, LlmTokenUsage
from jidocode.shared.errors import JidoError
from jidocode.shared.events import llm as llm_events
from jidocode.shared.events._base import EventModel
from jidocode.shared.events.llm import UsageTotals

from .deltas import DEFAULT_DELTA_INTERVAL_S, DEFAULT_DELTA_MAX_CHARS, check_delta_limits
from .errors import litellm_error
from .ledger import EventSink, MemoryLedger, UsageStore, check_budget
from .live import DEFAULT_LIVE_INTERVAL_S, LiveText
from .options import (
    DEFAULT_CONTEXT_WINDOW,
    GLOBAL_SETTINGS_FILE,
    LlmOptions,
    resolve_api_key,
    resolve_options,
)
from .pick import ModelPicker
from .prompt import SystemPrompts
from .request import completion_kwargs, tools_param, usage_of
from .retry import backoff_delay
from .stream import StreamAssembler
from .telemetry import CallSignals

__all__ = [
    "EventSink",
    "LitellmPort",
    "RetryCallback",
    "context_window",
    "load_litellm",
    "load_litellm_async",
    "map_error",
    "preload_litellm",
]

log = logging.getLogger("jidocode.conversation.llm")

RetryCallback = Callable[[llm_events.LlmRetrying], Awaitable[None]]

_litellm: Any = None
_import_lock = threading.Lock()


def load_litellm() -> Any:
    """Import litellm once, without any network fetch and without its chatter.

    The import takes seconds of CPU: call it off the event loop
    (:func:`load_litellm_async`, :func:`preload_litellm`) in services.
    """
    global _litellm
    if _litellm is not None:
        return _litellm
    with _import_lock:
        if _litellm is not None:
            return _litellm
        os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
        os.environ.setdefault("LITELLM_LOG", "ERROR")
        import litellm

        litellm.telemetry = False
        litellm.suppress_debug_info = True
        litellm.drop_params = True
        _litellm = litellm
    return _litellm


async def load_litellm_async() -> Any:
    """:func:`load_litellm` in a worker thread, so the event loop keeps serving meanwhile."""
    if _litellm is not None:
        return _litellm
    return await asyncio.to_thread(load_litellm)


def preload_litellm() -> None:
    """Start importing litellm in a background thread (the port's first call then finds it loaded)."""
    if _litellm is None:
        threading.Thread(target=load_litellm, name="litellm-import", daemon=True).start()


def context_window(model: str, override: int | None = None) -> int:
    """The model's input window from litellm's local model map, else :data:`DEFAULT_CONTEXT_WINDOW`."""
    if override:
        return override
    return _model_window(model)


@functools.lru_cache(maxsize=256)
def _model_window(model: str) -> int:
    lib = load_litellm()
    try:
        info = lib.get_model_info(model)
    except Exception:  # litellm raises bare Exception subclasses for unmapped models
        return DEFAULT_CONTEXT_WINDOW
    window = info.get("max_input_tokens") or info.get("max_tokens")
    return int(window) if isinstance(window, int) and window > 0 else DEFAULT_CONTEXT_WINDOW


#: Models litellm has no price for (asking again costs milliseconds per call).
_UNPRICED: set[str] = set()


def _cost(model: str, usage: LlmTokenUsage) -> float | None:
    if model in _UNPRICED:
        return None
    lib = load_litellm()
    try:
        prompt_cost, completion_cost = lib.cost_per_token(
            model=model,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            cache_read_input_tokens=usage.cached_tokens,
        )
    except Exception:  # unknown price: litellm raises; the ledger counts the call as unpriced
        if len(_UNPRICED) < 1024:
            _UNPRICED.add(model)
        return None
    return float(prompt_cost) + float(completion_cost)


def map_error(exc: BaseException, model: str) -> JidoError:
    """Turn what litellm raised into a typed ``JidoError`` (see the module table; :mod:`.errors`)."""
    if isinstance(exc, JidoError):
        return exc
    return litellm_error(exc, model, load_litellm())


def _check_provider_key(model: str) -> None:
    """Without ``api_key_env``/``api_base`` litellm reads the provider's own key variable;
    when that is unset, say so as ``llm_auth`` naming it, before any call (the provider
    SDK's "missing credentials" surfaces as a 500 that would be retried as transient)."""
    try:
        missing = load_litellm().validate_environment(model=model).get("missing_keys") or []
    except Exception:  # an unknown model: let the call itself say what is wrong
        return
    keys = [str(k) for k in missing if str(k).endswith("_KEY")]
    if keys:
        raise JidoError(
            f"no API key for {model}: the environment variable {' or '.join(keys)} is not set "
            "(set it, or name another with llm.api_key_env)",
            error_type="llm_auth",
            details={"api_key_env": keys[0]},
        )


class LitellmPort:
    """``LlmPort`` over litellm. ``sink`` publishes llm.* signals (calls, text, usage, retries, failures).

    ``delta_interval_s``/``delta_max_chars`` bound the ``llm.delta`` signals of a call
    (:mod:`.deltas`); ``live_interval_s`` batches the text handed to ``on_delta``
    (:mod:`.live`); a bad value is a ``ValueError`` naming it. ``picker`` gives the
    model of a call that configures none (:mod:`.pick`); ``settings_file`` is the
    global settings file the ``llm_not_configured`` message names.
    """

    def __init__(
        self,
        *,
        sink: EventSink | None = None,
        store: UsageStore | None = None,
        system_prompts: SystemPrompts | None = None,
        env: Mapping[str, str] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        delta_interval_s: float = DEFAULT_DELTA_INTERVAL_S,
        delta_max_chars: int = DEFAULT_DELTA_MAX_CHARS,
        picker: ModelPicker | None = None,
        settings_file: str = GLOBAL_SETTINGS_FILE,
        live_interval_s: float = DEFAULT_LIVE_INTERVAL_S,
    ) -> None:
        check_delta_limits(delta_interval_s, delta_max_chars)
        check_delta_limits(live_interval_s, delta_max_chars, interval_name="live_interval_s")
        #: The batching period of the text handed to ``on_delta`` (:mod:`.live`).
        self.live_interval_s = live_interval_s
        self.picker = picker
        self._settings_file = settings_file
        self.delta_interval_s = delta_interval_s
        self.delta_max_chars = delta_max_chars
        self._clock = clock
        self._sink = sink
        self.store: UsageStore = store if store is not None else MemoryLedger()
        self._system_prompts = system_prompts
        self._recording: dict[tuple[str, str], asyncio.Task[None]] = {}
        #: Totals the store returned last, per conversation (the budget's fallback).
        self._known: dict[tuple[str, str], UsageTotals] = {}
        self._env = env
        self._sleep = sleep

    @property
    def env(self) -> Mapping[str, str]:
        return os.environ if self._env is None else self._env

    def options(self, request: LlmRequest) -> LlmOptions:
        """The call's options, with the model picked so far when it configures none."""
        picked = self.picker.choice if self.picker is not None else None
        return resolve_options(request.settings, self.env, picked=picked, settings_file=self._settings_file)

    async def _pick_if_unconfigured(self, request: LlmRequest) -> None:
        """With nothing picked yet and no model or endpoint configured, choose again (Ollama may be up now)."""
        if self.picker is None or self.picker.choice is not None:
            return
        given = (
            request.settings.get(k) or self.env.get(f"JIDO_LLM_{k.upper()}") for k in ("model", "api_base")
        )
        if not any(given):
            await self.picker.pick()

    def context_window(self, model: str) -> int:
        """``ContextWindows``: the model's window from litellm's local model map (blocking)."""
        return context_window(model)

    async def _emit(self, event: EventModel) -> None:
        if self._sink is None:
            return
        try:
            await self._sink(event)
        except Exception:  # a lost signal must not fail the call; it is logged
            log.exception("could not publish %s", event.type)

    async def complete(
        self,
        request: LlmRequest,
        on_delta: Callable[[str], Awaitable[None]],
        *,
        on_retry: RetryCallback | None = None,
    ) -> LlmResult:
        await load_litellm_async()
        signals = CallSignals(
            request,
            emit=self._emit,
            clock=self._clock,
            interval_s=self.delta_interval_s,
            max_chars=self.delta_max_chars,
        )
        await self._pick_if_unconfigured(request)
        try:
            options = self.options(request)
            api_key = resolve_api_key(options, self.env)
            if api_key is None:
                _check_provider_key(options.model)
        except JidoError as exc:
            await signals.failed(exc.type, exc.message, model=None, attempts=1)
            raise
        await self._check_budget(request, options)
        request = await self._with_system_prompt(request)
        signals.request = request
        await signals.started(options.model, len(tools_param(request, options)))
        try:
            return await self._attempts(request, options, api_key, on_delta, on_retry, signals)
        except asyncio.CancelledError:
            # The conversation stopped the call: its observers still see it end.
            await signals.failed(
                "llm_cancelled", "the call was cancelled", model=options.model, attempts=signals.attempts
            )
            raise

    async def _attempts(
        self,
        request: LlmRequest,
        options: LlmOptions,
        api_key: str | None,
        on_delta: Callable[[str], Awaitable[None]],
        on_retry: RetryCallback | None,
        signals: CallSignals,
    ) -> LlmResult:
        """The call and its retries (see the module docstring)."""
        retries = 0
        started = time.perf_counter()
        while True:
            streamed = False
            signals.attempts = retries + 1

            async def delta(piece: str) -> None:
                nonlocal streamed
                streamed = True
                await on_delta(piece)
                await signals.text(piece)

            try:
                result = await self._once(options, api_key, request, delta)
            except Exception as exc:  # mapped to a typed JidoError below, never swallowed
                error = map_error(exc, options.model)
                if not error.retryable or streamed or retries >= options.max_retries:
                    await signals.failed(error.type, error.message, model=options.model, attempts=retries + 1)
                    if error is exc:
                        raise
                    raise error from exc
                retries += 1
                delay = backoff_delay(
                    retries,
                    base_s=options.retry_backoff_s,
                    cap_s=options.retry_backoff_max_s,
                    retry_after_s=error.details.get("retry_after_s"),
                )
                notice = llm_events.LlmRetrying(
                    project_id=request.project_id,
                    conversation_id=request.conversation_id,
                    correlation_id=request.correlation_id,
                    call_id=signals.call_id,
                    model=options.model,
                    attempt=retries,
                    max_retries=options.max_retries,
                    delay_s=delay,
                    error_type=error.type,
                    message=error.message,
                )
                await self._emit(notice)
                if on_retry is not None:
                    await on_retry(notice)
                await self._sleep(delay)
                continue
            await signals.flush()
            usage = result.usage.model_copy(update={"cost_usd": _cost(options.model, result.usage)})
            result = result.model_copy(update={"usage": usage})
            completed = signals.completion(
                result,
                model=result.model or options.model,
                duration_ms=(time.perf_counter() - started) * 1000.0,
                retries=retries,
                context_window=context_window(options.model, options.context_window),
            )
            self._record_later(completed)
            await self._emit(completed)
            return result

    def _record_later(self, event: llm_events.LlmCallCompleted) -> None:
        """Write the ledger off the answer's path, in order per conversation.

        The budget check of the conversation's next call waits for it
        (:meth:`_check_budget`), so budgets stay exact; :meth:`flush` waits for all.
        """
        key = (event.project_id, event.conversation_id)
        previous = self._recording.get(key)

        async def record() -> None:
            if previous is not None:
                await asyncio.wait([previous])
            try:
                self._known[key] = await self.store.record(event)
            except Exception:  # the answer matters more than its accounting: keep it, say so
                log.exception("token ledger: could not record usage of %s", event.conversation_id)

        task = asyncio.create_task(record(), name=f"ledger-{event.conversation_id}")
        self._recording[key] = task

        def done(t: asyncio.Task[None]) -> None:
            if self._recording.get(key) is t:
                del self._recording[key]

        task.add_done_callback(done)

    async def flush(self) -> None:
        """Wait until every usage recorded so far is in the ledger."""
        while self._recording:
            await asyncio.wait(list(self._recording.values()))

    async def _with_system_prompt(self, request: LlmRequest) -> LlmRequest:
        """Prepend the project's system prompt unless the request already has one."""
        if self._system_prompts is None or any(m.get("role") == "system" for m in request.messages):
            return request
        prompt = await self._system_prompts.for_project(request.project_id)
        if not prompt:
            return request
        return request.model_copy(
            update={"messages": [{"role": "system", "content": prompt}, *request.messages]}
        )

    async def _check_budget(self, request: LlmRequest, options: LlmOptions) -> None:
        """Refuse the call when the conversation's budget is used up (``llm_budget_exceeded``): its
        own calls and those of its finished sub-agents count (decision 0315)."""
        if options.budget_tokens is None and options.budget_usd is None:
            return
        pending = self._recording.get((request.project_id, request.conversation_id))
        if pending is not None:
            await asyncio.wait([pending])
        key = (request.project_id, request.conversation_id)
        try:
            totals = await self.store.with_subagents(*key)
        except Exception:  # ledger unreachable (e.g. a JetStream election): use what this port saw last
            log.warning("token ledger unreachable; budget of %s checked against local totals", key[1])
            totals = self._known.get(key) or UsageTotals()
        totals = totals.model_copy(
            update={"project_id": request.project_id, "conversation_id": request.conversation_id}
        )
        exceeded = check_budget(totals, budget_tokens=options.budget_tokens, budget_usd=options.budget_usd)
        if exceeded is None:
            return
        await self._emit(exceeded)
        limits = []
        if options.budget_tokens is not None:
            limits.append(f"{totals.total_tokens}/{options.budget_tokens} tokens")
        if options.budget_usd is not None:
            limits.append(f"${totals.cost_usd:.4f}/${options.budget_usd:.4f}")
        raise JidoError(
            f"the conversation's LLM budget is used up ({', '.join(limits)}); raise llm.budget_* to go on",
            error_type="llm_budget_exceeded",
            details=exceeded.to_data(),
        )

    async def _once(
        self,
        options: LlmOptions,
        api_key: str | None,
        request: LlmRequest,
        on_delta: Callable[[str], Awaitable[None]],
    ) -> LlmResult:
        lib = load_litellm()
        response = await lib.acompletion(**completion_kwargs(options, api_key, request))
        acc = StreamAssembler(model=options.model)
        live = LiveText(on_delta, clock=self._clock, interval_s=self.live_interval_s)
        try:
            async for chunk in response:
                await _take_chunk(acc, chunk, live.add)
        finally:
            await live.close()  # the text gathered so far, however the stream ended
        return acc.result()


async def _take_chunk(acc: StreamAssembler, chunk: Any, on_delta: Callable[[str], Awaitable[None]]) -> None:
    """Feed one streamed chunk to ``acc``: its usage, text (also sent to ``on_delta``), tool-call
    fragments and finish reason."""
    usage = usage_of(getattr(chunk, "usage", None))
    if usage is not None and usage.total_tokens:
        acc.usage = usage
    for choice in getattr(chunk, "choices", None) or []:
        d = getattr(choice, "delta", None)
        if d is not None:
            text = getattr(d, "content", None)
            if text:
                acc.add_text(text)
                await on_delta(text)
            for tc in getattr(d, "tool_calls", None) or []:
                fn = getattr(tc, "function", None)
                acc.add_tool_fragment(
                    int(getattr(tc, "index", 0) or 0),
                    getattr(tc, "id", None),
                    getattr(fn, "name", None) if fn is not None else None,
                    getattr(fn, "arguments", None) if fn is not None else None,
                )
        reason = getattr(choice, "finish_reason", None)
        if reason:
            acc.finish_reason = str(reason)
