"""The provider contract (seed 004 "Provider adapter"): what the loop asks of whoever does the work.

``run_iteration(request) -> IterationRun``: the run streams :class:`ProviderEvent` items (the
seed's seven normalized kinds; provider-specific detail only in ``metadata``) and then gives its
:class:`IterationResult`. Failures a provider knows about are typed: :class:`ProviderError` with a
``kind`` the loop's retry policy reads (``transient`` is retried; ``config`` and ``fatal`` are not).

The loop imports this module only; it never imports a provider's own module (the registry does).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from jidocode.shared.events.prd import NormalizedKind

if TYPE_CHECKING:
    from jidocode.services.prd.config import ProviderSettings
    from jidocode.services.prd.providers.login import EgressOpener
    from jidocode.shared.bus import Bus

__all__ = [
    "Abandons",
    "FailureKind",
    "IterationRequest",
    "IterationResult",
    "IterationRun",
    "Provider",
    "ProviderCapabilities",
    "ProviderContext",
    "ProviderError",
    "ProviderEvent",
    "ProviderFactory",
    "full_prompt",
]

#: ``transient``: worth another attempt (a dropped connection, a rate limit, a crash);
#: ``config``: the provider cannot run as configured (missing CLI, bad model); ``fatal``: the
#: provider refused the work; ``cancelled``: the loop cancelled it (pause, stop).
FailureKind = Literal["transient", "config", "fatal", "cancelled"]


class IterationRequest(BaseModel):
    """The seed's ``IterationRequest``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    work_dir: str
    prompt: str
    context_files: list[str] = Field(default_factory=list)
    #: ``never`` (nothing asks: the loop runs unattended), ``on-request``, ``untrusted``.
    approval_policy: str = "never"
    #: ``workspace-write`` (the work dir only), ``read-only``.
    sandbox_policy: str = "workspace-write"
    model: str = ""
    metadata: dict[str, str] = Field(default_factory=dict)


class ProviderCapabilities(BaseModel):
    """The seed's ``ProviderCapabilities``."""

    model_config = ConfigDict(frozen=True)

    streaming: bool
    tool_calls: bool
    sandbox_control: bool
    approval_modes: list[str] = Field(default_factory=list)
    #: Advisory context size in tokens (None: unknown).
    max_context_hint: int | None = None


class ProviderEvent(BaseModel):
    """One normalized event of an iteration."""

    model_config = ConfigDict(frozen=True)

    kind: NormalizedKind
    text: str = ""
    tool: str = ""
    call_id: str = ""
    input: dict[str, object] = Field(default_factory=dict)
    ok: bool | None = None
    command: str = ""
    exit_code: int | None = None
    metadata: dict[str, str] = Field(default_factory=dict)


class IterationResult(BaseModel):
    """How an iteration ended."""

    model_config = ConfigDict(frozen=True)

    ok: bool
    summary: str = ""
    #: Set when not ``ok``.
    failure: FailureKind | None = None
    error: str = ""
    usage: dict[str, int] = Field(default_factory=dict)
    metadata: dict[str, str] = Field(default_factory=dict)
    #: Whether the provider reported the story done: the ``jidocode`` provider when the model's
    #: final message ends with the completion marker (:data:`..prompt.DONE_MARKER`); ``None``: the
    #: provider has no such signal and its own final status (``ok``) says it (the CLI providers).
    done: bool | None = None


class ProviderError(Exception):
    """A typed provider failure (raised by ``run_iteration`` before any event, e.g. ``config``)."""

    def __init__(self, kind: FailureKind, message: str) -> None:
        super().__init__(message)
        self.kind: FailureKind = kind
        self.message = message


@runtime_checkable
class IterationRun(Protocol):
    """One running iteration."""

    def events(self) -> AsyncIterator[ProviderEvent]:
        """The normalized events, ending after ``iteration_finished`` (or ``error``)."""
        ...

    async def result(self) -> IterationResult:
        """The result, once :meth:`events` is exhausted (waits for it otherwise)."""
        ...

    async def cancel(self) -> None:
        """Stop the work now (idempotent); :meth:`result` then has ``failure="cancelled"``."""
        ...


@runtime_checkable
class Provider(Protocol):
    """A provider, as the registry returns it."""

    def name(self) -> str: ...

    def capabilities(self) -> ProviderCapabilities: ...

    async def run_iteration(self, request: IterationRequest) -> IterationRun: ...


@runtime_checkable
class Abandons(Protocol):
    """A provider that can stop an iteration a dead owner left running (an addition to the seed's
    contract; the loop calls it when it takes a loop over, before it runs the attempt again).

    The loop names each iteration (``request.metadata["iteration_id"]``, a lowercase token) and
    keeps the name in its record before :meth:`Provider.run_iteration`, so the replica that takes
    the loop over knows what to stop. A provider whose iterations die with their owner (a CLI
    process in the owner's sandbox) needs none of this.
    """

    async def abandon(self, iteration_id: str, work_dir: str) -> None:
        """Stop iteration ``iteration_id`` (run in ``work_dir``) if it still runs; best effort,
        idempotent, and quiet when there is nothing to stop."""
        ...


@dataclass(frozen=True)
class ProviderContext:
    """What a provider may need besides its own settings, given by whoever resolves it (the loop).

    ``bus``: the connection the ``jidocode`` provider talks through (CLI providers ignore it);
    ``project_id``: the project the loop serves; ``jido_home``, ``additional_directories`` and
    ``data_dir``: the sandbox settings a CLI provider's process is launched with (the same as a
    bash call of that project gets); ``default_model``: the model when neither the request nor the
    provider's settings name one (empty: the provider's own default).
    """

    bus: Bus | None = None
    project_id: str = ""
    jido_home: str | None = None
    additional_directories: tuple[str, ...] = ()
    data_dir: str = ".jido"
    default_model: str = ""
    #: Opens a pass of the egress proxy for one run of a CLI whose ``use_login`` is on (its
    #: login domains); ``None``: no proxy here (see ``providers/login.py``).
    egress: EgressOpener | None = None


#: ``(settings, context) -> Provider``: how the registry builds a provider. Raises
#: :class:`~jidocode.shared.errors.InvalidInput` (or ``ValueError``) on a bad configuration.
ProviderFactory = Callable[["ProviderSettings", ProviderContext], Provider]


def full_prompt(request: IterationRequest) -> str:
    """The prompt a provider sends: the request's, then the context files named (paths only: the
    provider reads them itself, through its own tools and policy)."""
    if not request.context_files:
        return request.prompt
    listed = "\n".join(f"- {path}" for path in request.context_files)
    return f"{request.prompt}\n\nRead these files first:\n{listed}"
