"""Settings of the conversation service, validated at construction (environment: ``JIDO_CONV_*``)."""

from __future__ import annotations

import os

from pydantic import BaseModel, ConfigDict, Field

from jidocode.shared.envelope import MAX_PAYLOAD_BYTES

from .core import Limits
from .subagents.core import SubagentSettings

__all__ = ["RuntimeSettings"]


class RuntimeSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    #: A replica must renew its heartbeat within this many seconds, or another replica takes
    #: over the conversations it runs (a conversation's own key is never renewed).
    lease_ttl_s: float = Field(default=10.0, ge=0.5, le=600.0)
    #: Conversations left by a dead replica taken over (each until its actor is rebuilt), or
    #: checked for pending work, at once.
    takeover_concurrency: int = Field(default=16, ge=1, le=1024)
    #: An actor that fails (to load, or later) is loaded again after a backoff starting at
    #: ``load_retry_base_s``, doubling up to ``load_retry_max_s`` (jittered); after
    #: ``load_attempts`` failures in a row its conversation gets a ``conversation.error`` and
    #: waits for its next input.
    load_retry_base_s: float = Field(default=1.0, gt=0.0, le=600.0)
    load_retry_max_s: float = Field(default=60.0, gt=0.0, le=3600.0)
    load_attempts: int = Field(default=5, ge=1, le=100)
    #: A conversation with nothing to do (no input, no LLM call, tool call or approval
    #: outstanding) for this many seconds is released: its key in the loaded set and its
    #: actor go, and it is loaded again from its journal on its next input.
    idle_timeout_s: float = Field(default=300.0, ge=0.05, le=7 * 24 * 3600.0)
    #: Largest ``data`` of one external event (bytes of JSON); the whole message is bounded by
    #: the bus's one payload limit (``MAX_PAYLOAD_BYTES``), with room kept for the envelope.
    max_message_bytes: int = Field(default=256 * 1024, ge=64, le=MAX_PAYLOAD_BYTES - 64 * 1024)
    #: Queue, drain and turn limits of each conversation (``max_turns`` may come from its settings).
    limits: Limits = Field(default_factory=Limits)
    tool_timeout_s: float = Field(default=600.0, gt=0.0)
    list_tools_timeout_s: float = Field(default=3.0, gt=0.0)
    #: How long a project's tool list is reused before asking the project service
    #: again (an asset reload or a project stop drops it at once).
    tool_specs_ttl_s: float = Field(default=5.0, ge=0.0)
    #: How long ``STREAM_EVENTS`` keeps output for late subscribers; ``None``: the stream limits
    #: of the environment (``JIDO_EVENTS_MAX_AGE_S``, 7 days: ``retention.py``).
    events_max_age_s: float | None = Field(default=None, gt=0.0)
    #: How long a model call waits for a first tool list of its project (a restart of the
    #: project service or of NATS) before going without tools (a ``tools_unavailable`` entry
    #: says so); with a list from before, that one is used at once.
    list_tools_patience_s: float = Field(default=20.0, ge=0.0, le=600.0)
    #: How long a stop waits for the conversation's owner to apply its cancel (the LLM call and
    #: tool calls it ends) before the owner is let go anyway (the cancel stays in its input).
    stop_cancel_wait_s: float = Field(default=2.0, gt=0.0, le=600.0)
    #: Sub-agents (the ``task`` tool): limits per conversation and project, depth, timeout.
    subagents: SubagentSettings = Field(default_factory=SubagentSettings)

    @classmethod
    def from_env(cls) -> RuntimeSettings:
        values: dict[str, object] = {}
        env = os.environ
        if env.get("JIDO_CONV_LEASE_TTL"):
            values["lease_ttl_s"] = float(env["JIDO_CONV_LEASE_TTL"])
        if env.get("JIDO_CONV_IDLE_TIMEOUT"):
            values["idle_timeout_s"] = float(env["JIDO_CONV_IDLE_TIMEOUT"])
        for key, name in (
            ("JIDO_CONV_TAKEOVER_CONCURRENCY", "takeover_concurrency"),
            ("JIDO_CONV_LOAD_RETRY_BASE", "load_retry_base_s"),
            ("JIDO_CONV_LOAD_RETRY_MAX", "load_retry_max_s"),
            ("JIDO_CONV_LOAD_ATTEMPTS", "load_attempts"),
        ):
            if env.get(key):
                values[name] = env[key]  # validated (and converted) by the model
        if env.get("JIDO_CONV_MAX_MESSAGE_BYTES"):
            values["max_message_bytes"] = int(env["JIDO_CONV_MAX_MESSAGE_BYTES"])
        limits: dict[str, int] = {}
        for key, name in (
            ("JIDO_CONV_MAX_QUEUE", "max_queue"),
            ("JIDO_CONV_MAX_DRAIN_STEPS", "max_drain_steps"),
        ):
            if env.get(key):
                limits[name] = int(env[key])
        if limits:
            values["limits"] = Limits(**limits)
        subagents: dict[str, str] = {}
        for key, name in (
            ("JIDO_CONV_SUBAGENTS_ENABLED", "enabled"),
            ("JIDO_CONV_SUBAGENTS_MAX_PER_CONVERSATION", "max_per_conversation"),
            ("JIDO_CONV_SUBAGENTS_MAX_PER_PROJECT", "max_per_project"),
            ("JIDO_CONV_SUBAGENTS_MAX_DEPTH", "max_depth"),
            ("JIDO_CONV_SUBAGENTS_TIMEOUT", "timeout_s"),
        ):
            if env.get(key):
                subagents[name] = env[key]
        if subagents:
            values["subagents"] = SubagentSettings.model_validate(subagents)
        return cls.model_validate(values)
