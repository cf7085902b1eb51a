"""Every NATS subject, stream and KV bucket name of JidoCode, built in one place.

No other module writes a subject string. Each builder validates its tokens
before any I/O, so a bad id is a ``ValueError`` here and never a message on a
surprising subject.

Subject map (``<p>`` a project id, ``<c>`` a conversation id)::

    jido.engine.<verb>                 request/reply, engine (nats.micro)
    jido.project.<p>.<verb>            request/reply, project service
    jido.conversations.<p>.<verb>      request/reply, conversation service
    jido.tools.<p>.<verb>              request/reply, tool runner (run, cancel)
    jido.assets.<p>.<verb>             request/reply, asset loader
    jido.conv.<p>.<c>.in               conversation input (captured by a stream)
    jido.evt.<p>.<c>.<type…>           conversation output, one subject per event type
    jido.journal.<p>.<c>               canonical journal of applied signals
    jido.sig.<type…>                   lifecycle and telemetry signals
    jido.hook.<type…>                  skill pre/post hook signals (types come from settings)
    jido.trace.<p>.<c>.<trace id>      finished spans of a trace (when tracing is on; captured by a stream)
    jido.prds.<p>.<verb>               request/reply, PRD service (seed 004)
    jido.prd.<p>.<prd>.<type…>         a PRD loop's events, in order (captured by a stream)
"""

from __future__ import annotations

import re

__all__ = [
    "BUCKET_CONVERSATIONS",
    "BUCKET_LEDGER",
    "BUCKET_OWNERS",
    "BUCKET_PRD_LOOPS",
    "BUCKET_PROJECTS",
    "BUCKET_RETENTION",
    "BUCKET_SUBAGENT_SLOTS",
    "BUCKET_TOOL_CALLS",
    "BUCKET_TOOL_QUOTAS",
    "PREFIX",
    "SERVICE_NAMES",
    "STREAM_CONV_IN",
    "STREAM_EVENTS",
    "STREAM_JOURNAL",
    "STREAM_PRD",
    "STREAM_TRACES",
    "UNKNOWN_SCOPE",
    "all_subjects",
    "assets",
    "assets_pattern",
    "conversation_id_of",
    "conversation_in",
    "conversation_in_filter",
    "conversation_out",
    "conversation_out_filter",
    "conversations",
    "conversations_pattern",
    "engine",
    "hook",
    "hook_filter",
    "journal",
    "journal_filter",
    "prd_event",
    "prd_event_filter",
    "prds",
    "prds_pattern",
    "project",
    "project_id_of",
    "project_pattern",
    "signal",
    "signal_filter",
    "srv",
    "tools",
    "tools_pattern",
    "trace",
    "trace_filter",
    "type_tokens",
    "validate_token",
]

PREFIX = "jido"

# Streams: one per kind of traffic, never one per entity.
STREAM_CONV_IN = "JIDO_CONV_IN"
STREAM_JOURNAL = "JIDO_JOURNAL"
STREAM_EVENTS = "JIDO_EVENTS"
#: Every PRD loop's events (``jido.prd.>``): what ``jidocode prd run`` and the TUI follow.
STREAM_PRD = "JIDO_PRD"
#: Finished spans published by the services while tracing is on (``jido.trace.>``).
STREAM_TRACES = "JIDO_TRACES"

# KV buckets.
BUCKET_PROJECTS = "jido_projects"
BUCKET_CONVERSATIONS = "jido_conversations"
BUCKET_OWNERS = "jido_conv_owners"
BUCKET_TOOL_CALLS = "jido_tool_calls"
#: Cluster-wide tool quota slots: one key per slot, a lease with a per-message TTL (tool runner only).
BUCKET_TOOL_QUOTAS = "jido_tool_quotas"
BUCKET_LEDGER = "jido_llm_ledger"
#: Sub-agents at once per project: one key per slot (conversation service only).
BUCKET_SUBAGENT_SLOTS = "jido_subagent_slots"
#: The retention sweep's lease: one replica prunes at a time (conversation service only).
BUCKET_RETENTION = "jido_retention"

#: PRD loops: one record per ``<project_id>.<prd name>`` (state, owner, heartbeat; prd service only).
BUCKET_PRD_LOOPS = "jido_prd_loops"

_TOKEN = re.compile(r"^[A-Za-z0-9_\-]{1,128}$")
_TYPE_PART = re.compile(r"^[A-Za-z0-9_\-]{1,64}$")


def validate_token(value: str, what: str = "token") -> str:
    """Return ``value`` if it is one safe subject token, else raise ``ValueError``.

    A token is 1-128 characters of ``[A-Za-z0-9_-]``: no dot, no wildcard,
    no whitespace, so an id can never widen or redirect a subject.
    """
    if not isinstance(value, str) or not _TOKEN.fullmatch(value):
        raise ValueError(f"invalid {what} {value!r}: expected 1-128 characters of A-Z a-z 0-9 _ -")
    return value


def type_tokens(event_type: str) -> str:
    """Map an event type (``conversation.user.message``, ``skill/pre``) to subject tokens.

    Seeds spell types dotted or path-style; subjects always use dots.
    """
    parts = event_type.replace("/", ".").split(".")
    for part in parts:
        if not _TYPE_PART.fullmatch(part):
            raise ValueError(f"invalid event type {event_type!r}: part {part!r} is not a safe subject token")
    return ".".join(parts)


def _verb(verb: str) -> str:
    return validate_token(verb, "verb")


def engine(verb: str) -> str:
    """``jido.engine.<verb>``: engine commands and queries."""
    return f"{PREFIX}.engine.{_verb(verb)}"


def project(project_id: str, verb: str) -> str:
    """``jido.project.<p>.<verb>``: the project service, front door of a project."""
    return f"{PREFIX}.project.{validate_token(project_id, 'project id')}.{_verb(verb)}"


def conversations(project_id: str, verb: str) -> str:
    """``jido.conversations.<p>.<verb>``: the conversation service's endpoints."""
    return f"{PREFIX}.conversations.{validate_token(project_id, 'project id')}.{_verb(verb)}"


def tools(project_id: str, verb: str) -> str:
    """``jido.tools.<p>.<verb>``: the tool runner (``run``, ``cancel``)."""
    return f"{PREFIX}.tools.{validate_token(project_id, 'project id')}.{_verb(verb)}"


def assets(project_id: str, verb: str) -> str:
    """``jido.assets.<p>.<verb>``: the asset loader (``get``, ``list``, ``search``, ``reload`` …)."""
    return f"{PREFIX}.assets.{validate_token(project_id, 'project id')}.{_verb(verb)}"


def prds(project_id: str, verb: str) -> str:
    """``jido.prds.<p>.<verb>``: the PRD service (``create``, ``run``, ``pause`` …)."""
    return f"{PREFIX}.prds.{validate_token(project_id, 'project id')}.{_verb(verb)}"


def prd_event(project_id: str, prd: str, event_type: str) -> str:
    """``jido.prd.<p>.<prd>.<type>``: one event of a PRD's loop."""
    return (
        f"{PREFIX}.prd.{validate_token(project_id, 'project id')}"
        f".{validate_token(prd, 'prd name')}.{type_tokens(event_type)}"
    )


def prd_event_filter(project_id: str | None = None, prd: str | None = None) -> str:
    """Wildcard over PRD loop events; ``None`` matches any id."""
    return f"{PREFIX}.prd.{_opt(project_id, 'project id')}.{_opt(prd, 'prd name')}.>"


def conversation_in(project_id: str, conversation_id: str) -> str:
    """``jido.conv.<p>.<c>.in``: external input of one conversation."""
    return (
        f"{PREFIX}.conv.{validate_token(project_id, 'project id')}"
        f".{validate_token(conversation_id, 'conversation id')}.in"
    )


def conversation_out(project_id: str, conversation_id: str, event_type: str) -> str:
    """``jido.evt.<p>.<c>.<type>``: one output event of a conversation."""
    return (
        f"{PREFIX}.evt.{validate_token(project_id, 'project id')}"
        f".{validate_token(conversation_id, 'conversation id')}.{type_tokens(event_type)}"
    )


def journal(project_id: str, conversation_id: str) -> str:
    """``jido.journal.<p>.<c>``: the canonical journal of one conversation."""
    return (
        f"{PREFIX}.journal.{validate_token(project_id, 'project id')}"
        f".{validate_token(conversation_id, 'conversation id')}"
    )


def signal(event_type: str) -> str:
    """``jido.sig.<type>``: a lifecycle or telemetry signal."""
    return f"{PREFIX}.sig.{type_tokens(event_type)}"


def hook(event_type: str) -> str:
    """``jido.hook.<type>``: a skill pre/post hook signal (its type comes from settings)."""
    return f"{PREFIX}.hook.{type_tokens(event_type)}"


def _opt(value: str | None, what: str) -> str:
    return "*" if value is None else validate_token(value, what)


def conversation_in_filter(project_id: str | None = None, conversation_id: str | None = None) -> str:
    """Wildcard over conversation input; ``None`` matches any id."""
    return f"{PREFIX}.conv.{_opt(project_id, 'project id')}.{_opt(conversation_id, 'conversation id')}.in"


def conversation_out_filter(project_id: str | None = None, conversation_id: str | None = None) -> str:
    """Wildcard over conversation output; ``None`` matches any id."""
    return f"{PREFIX}.evt.{_opt(project_id, 'project id')}.{_opt(conversation_id, 'conversation id')}.>"


def journal_filter(project_id: str | None = None, conversation_id: str | None = None) -> str:
    """Wildcard over journals; ``None`` matches any id."""
    return f"{PREFIX}.journal.{_opt(project_id, 'project id')}.{_opt(conversation_id, 'conversation id')}"


def signal_filter() -> str:
    """Every lifecycle and telemetry signal."""
    return f"{PREFIX}.sig.>"


def hook_filter() -> str:
    """Every skill hook signal."""
    return f"{PREFIX}.hook.>"


#: The project or conversation token of a span whose service did not know it.
UNKNOWN_SCOPE = "_"
_TRACE_ID = re.compile(r"^[0-9a-f]{32}$")


def _trace_id(value: str) -> str:
    if not _TRACE_ID.match(value) or value == "0" * 32:
        raise ValueError(f"invalid trace id {value!r}: expected 32 lowercase hex digits, not all zero")
    return value


def trace(project_id: str | None, conversation_id: str | None, trace_id: str) -> str:
    """``jido.trace.<p>.<c>.<trace id>``: finished spans of one trace (``_`` for an unknown scope)."""
    p = UNKNOWN_SCOPE if project_id is None else validate_token(project_id, "project id")
    c = UNKNOWN_SCOPE if conversation_id is None else validate_token(conversation_id, "conversation id")
    return f"{PREFIX}.trace.{p}.{c}.{_trace_id(trace_id)}"


def trace_filter(
    project_id: str | None = None, conversation_id: str | None = None, trace_id: str | None = None
) -> str:
    """Wildcard over published spans; ``None`` matches any id."""
    t = "*" if trace_id is None else _trace_id(trace_id)
    return f"{PREFIX}.trace.{_opt(project_id, 'project id')}.{_opt(conversation_id, 'conversation id')}.{t}"


def all_subjects() -> str:
    """Everything JidoCode publishes (for ``jidocode watch``)."""
    return f"{PREFIX}.>"


# --- endpoint patterns (one endpoint serves every project) -------------------

_SCOPED = ("project", "conversations", "tools", "assets", "prds")


def _pattern(kind: str, verb: str) -> str:
    return f"{PREFIX}.{kind}.*.{_verb(verb)}"


def project_pattern(verb: str) -> str:
    """``jido.project.*.<verb>``: what a project-service endpoint subscribes to."""
    return _pattern("project", verb)


def conversations_pattern(verb: str) -> str:
    """``jido.conversations.*.<verb>``."""
    return _pattern("conversations", verb)


def tools_pattern(verb: str) -> str:
    """``jido.tools.*.<verb>``."""
    return _pattern("tools", verb)


def assets_pattern(verb: str) -> str:
    """``jido.assets.*.<verb>``."""
    return _pattern("assets", verb)


def prds_pattern(verb: str) -> str:
    """``jido.prds.*.<verb>``."""
    return _pattern("prds", verb)


def project_id_of(subject: str) -> str:
    """The project id in a scoped request subject (``jido.<kind>.<p>.<verb>``) or in
    ``jido.conv.<p>.<c>.in`` / ``jido.evt.<p>.<c>.…`` / ``jido.journal.<p>.<c>``.

    Raises ``ValueError`` for any other subject.
    """
    parts = subject.split(".")
    if len(parts) >= 4 and parts[0] == PREFIX and parts[1] in (*_SCOPED, "conv", "evt", "journal", "prd"):
        return validate_token(parts[2], "project id")
    raise ValueError(f"subject {subject!r} carries no project id")


def conversation_id_of(subject: str) -> str:
    """The conversation id in ``jido.conv.<p>.<c>.in``, ``jido.evt.<p>.<c>.…`` or ``jido.journal.<p>.<c>``."""
    parts = subject.split(".")
    if len(parts) >= 4 and parts[0] == PREFIX and parts[1] in ("conv", "evt", "journal"):
        return validate_token(parts[3], "conversation id")
    raise ValueError(f"subject {subject!r} carries no conversation id")


# --- nats.micro service names and their discovery subjects --------------------

#: The nats.micro name of each service (what ``$SRV.PING.<name>`` finds).
SERVICE_NAMES: dict[str, str] = {
    "engine": "jidocode-engine",
    "project": "jidocode-project",
    "conversation": "jidocode-conversation",
    "tool_runner": "jidocode-tool-runner",
    "asset_loader": "jidocode-asset-loader",
    "prd": "jidocode-prd",
}


def srv(verb: str, service: str | None = None) -> str:
    """``$SRV.<PING|INFO|STATS>[.<micro name>]``: nats.micro discovery."""
    if verb not in ("PING", "INFO", "STATS"):
        raise ValueError(f"invalid discovery verb {verb!r}: expected PING, INFO or STATS")
    if service is None:
        return f"$SRV.{verb}"
    name = SERVICE_NAMES.get(service, service)
    return f"$SRV.{verb}.{validate_token(name, 'service name')}"
