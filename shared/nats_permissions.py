"""Per-service NATS users, their permissions, and the nats-server config that carries them.

Pure: no I/O. Every ``jido.…`` subject comes from :mod:`jidocode.shared.subjects`;
the only other subjects named here are the NATS protocol's own: the JetStream API
(``$JS.API.…``, ``$JS.ACK.…``, ``$JS.FC.…``), KV buckets (``$KV.<bucket>.>``),
nats.micro discovery (``$SRV.>``) and reply inboxes (``_INBOX_<user>.>``).

Model::

    account JIDO (JetStream enabled)
      ├─ engine        ─┐
      ├─ project        │ one user per service, password (or env reference),
      ├─ conversation   │ publish/subscribe allow lists of its own subjects,
      ├─ tool_runner    │ explicit deny lists for what must never happen,
      ├─ asset_loader   │ a private inbox prefix ``_INBOX_<user>``
      ├─ prd           ─┘
      └─ client           the CLI / SDK user: requests, conversation input, observation

A service answers requests through ``allow_responses`` (one reply to the reply
subject of a message it received), so no service may publish into another's
inbox unprompted, and each may subscribe only to its own inbox prefix.

Who talks to whom (a request is a publish on the request subject):

=============  =============================================================
user           may
=============  =============================================================
engine         serve ``jido.engine.*``; KV projects read/write; publish signals;
               request the project service (and ping it)
project        serve ``jido.project.*.*``; request tools, assets (the asset tools
               of its catalogue); KV projects read; publish signals. Never requests
               conversations: clients reach the conversation service directly
conversation   serve ``jido.conversations.*.*``; own the streams JIDO_CONV_IN,
               JIDO_JOURNAL, JIDO_EVENTS; publish conversation input (re-ingest),
               output, journal, signals; KV conversations, owners and the LLM
               ledger read/write;
               request tools, the project's ``list_tools`` and ``info``, assets;
               request its own ``jido.conversations.*.*`` and write KV
               ``jido_subagent_slots`` (sub-agents: a parent starts its children);
               follow signals (to drop cached tool specs)
tool_runner    serve ``jido.tools.*.*``; KV tool_calls and tool_quotas read/write, projects read;
               publish signals and ``…conversation.approval.requested`` output;
               request asset tools; read conversation input (approval answers)
               and ``tool.cancel_requested`` signals. Never publishes
               conversation input, never deletes or purges a stream.
asset_loader   serve ``jido.assets.*.*``; KV projects read; request tool runs;
               publish signals and hooks; follow project.started/stopped and
               ``tool.cancel_requested`` (a cancelled call's workflow stops)
prd            serve ``jido.prds.*.*``; own the stream JIDO_PRD (publish ``jido.prd.>``)
               and KV ``jido_prd_loops``; KV projects read; its ``jidocode``
               provider is a client of the others: request the engine (a
               worktree is a project of its own), conversations (start, send,
               stop, replay) and read their output stream JIDO_EVENTS. Never
               publishes conversation input (answers go through ``send_event``)
client         request engine, project, conversations (directly: no service
               forwards them), tools, assets; publish conversation input;
               observe ``jido.>``; read the journal and event streams, the
               projects and the LLM ledger; request the PRD service and read the
               JIDO_PRD stream; discover services (``$SRV.>``)
gateway        the client's rights (HTTP users act through it) but publishing
               conversation input: it sends input through the conversation
               service's ``send_event``, which checks it (decision 0221)
=============  =============================================================

The tool runner's idempotency bucket (``jido_tool_calls``: stored results of
tool calls) is readable by the tool runner alone: every other user has its
JetStream and KV subjects on the deny list too, so no later widening of an
allow list can expose it. Approval answers travel on conversation input, which
only ``client`` and ``conversation`` may publish (decision 0140).
"""

from __future__ import annotations

import functools
import json
import re
import secrets
from collections.abc import Iterable, Mapping

from pydantic import BaseModel, ConfigDict, field_validator

from jidocode.shared import subjects
from jidocode.shared.nats_grants import (
    BUCKET_LEDGER,
    BUCKET_TOOL_QUOTAS,
    JS_COMMON,
    JS_DESTRUCTIVE_ANY,
    SRV,
    TOOL_CALLS_PRIVATE,
    kv_read,
    kv_write,
    stream_admin,
    stream_create,
    stream_read,
)

__all__ = [
    "ACCOUNT",
    "CLIENT",
    "GATEWAY",
    "INBOX_ENV_VAR",
    "SERVICES",
    "USERS",
    "NatsUser",
    "NodeConfig",
    "Permissions",
    "all_users",
    "generate_password",
    "inbox_prefix",
    "micro_subjects",
    "password_env_var",
    "render_accounts",
    "render_node",
    "user_for",
]

ACCOUNT = "JIDO"
SERVICES: tuple[str, ...] = ("engine", "project", "conversation", "tool_runner", "asset_loader", "prd")
CLIENT = "client"
#: The HTTP gateway's user (``services/gateway``): a client of the services, not one of them.
GATEWAY = "gateway"
USERS: tuple[str, ...] = (*SERVICES, CLIENT, GATEWAY)

#: The environment variable naming a process's inbox prefix (``nats.connect(inbox_prefix=...)``).
INBOX_ENV_VAR = "NATS_INBOX_PREFIX"

# A valid subject token swapped for ``*`` after a builder made the subject, so wildcard
# request filters come out of the very builders the services use.
_ANY = "ANY0WILDCARD0TOKEN"
_USER_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
_PASSWORD = re.compile(r"^[A-Za-z0-9_\-.~+/=]{16,256}$")


def _wild(subject: str) -> str:
    """Replace every placeholder token of a built subject with ``*``."""
    return ".".join("*" if token == _ANY else token for token in subject.split("."))


def _approval_requested_filter() -> str:
    """``jido.evt.*.*.conversation.approval.requested``: the one output type the tool runner emits."""
    return _wild(subjects.conversation_out(_ANY, _ANY, "conversation.approval.requested"))


def engine_requests() -> str:
    return _wild(subjects.engine(_ANY))


def project_requests(verb: str | None = None) -> str:
    return subjects.project_pattern(verb) if verb else _wild(subjects.project(_ANY, _ANY))


def conversations_requests() -> str:
    return _wild(subjects.conversations(_ANY, _ANY))


def tools_requests(verb: str | None = None) -> str:
    return subjects.tools_pattern(verb) if verb else _wild(subjects.tools(_ANY, _ANY))


def assets_requests(verb: str | None = None) -> str:
    return subjects.assets_pattern(verb) if verb else _wild(subjects.assets(_ANY, _ANY))


def prds_requests() -> str:
    return _wild(subjects.prds(_ANY, _ANY))


def inbox_prefix(user: str) -> str:
    """The private inbox prefix of ``user``: ``_INBOX_<user>`` (subscribe ``_INBOX_<user>.>``)."""
    return f"_INBOX_{_check_user(user)}"


def password_env_var(user: str) -> str:
    """The variable holding ``user``'s password where the config uses env references."""
    return f"JIDO_NATS_PASSWORD_{_check_user(user).upper()}"


def micro_subjects(service: str) -> tuple[str, ...]:
    """What a prober of ``service`` publishes: ``$SRV.<verb>.<micro name>`` and per-instance forms."""
    if service not in subjects.SERVICE_NAMES:
        raise ValueError(f"unknown service {service!r}")
    return tuple(
        subjects.srv(verb, service) + tail for verb in ("PING", "INFO", "STATS") for tail in ("", ".*")
    )


def _check_user(user: str) -> str:
    if not _USER_NAME.match(user):
        raise ValueError(f"invalid NATS user name {user!r}: expected [a-z][a-z0-9_]{{0,31}}")
    return user


# --- models -----------------------------------------------------------------------------------


class Permissions(BaseModel):
    """Allow/deny lists of one user; deny wins over allow (nats-server semantics)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    publish_allow: tuple[str, ...] = ()
    publish_deny: tuple[str, ...] = ()
    subscribe_allow: tuple[str, ...] = ()
    subscribe_deny: tuple[str, ...] = ()
    allow_responses: bool = True

    @field_validator("publish_allow", "publish_deny", "subscribe_allow", "subscribe_deny")
    @classmethod
    def _subjects_ok(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for subject in value:
            tokens = subject.split(".")
            if not subject or any(not t or any(c.isspace() for c in t) for t in tokens):
                raise ValueError(f"invalid subject {subject!r}")
            if ">" in tokens[:-1]:
                raise ValueError(f"'>' must be the last token: {subject!r}")
        return tuple(dict.fromkeys(value))  # dedupe, keep order


class NatsUser(BaseModel):
    """One NATS user: its name, private inbox prefix and permissions."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    inbox_prefix: str
    permissions: Permissions

    @field_validator("name")
    @classmethod
    def _name_ok(cls, value: str) -> str:
        return _check_user(value)


def _base(user: str, *, serves: Iterable[str], micro: str | None) -> tuple[list[str], list[str]]:
    """Grants every service has: its inbox, its endpoints, micro discovery, signals."""
    pub = [*JS_COMMON, subjects.signal_filter()]
    pub.append(subjects.trace_filter())  # its finished spans, while tracing is on
    sub = [f"{inbox_prefix(user)}.>", *serves]
    if micro is not None:
        sub.append(f"{SRV}.>")  # nats.micro's discovery endpoints (answered via allow_responses)
        pub.extend(micro_subjects(micro))
    return pub, sub


def _engine() -> Permissions:
    pub, sub = _base("engine", serves=[engine_requests()], micro="engine")
    # It asks whether a project service runs before starting a project.
    pub += [*kv_write(subjects.BUCKET_PROJECTS), project_requests(), subjects.srv("PING", "project")]
    return Permissions(publish_allow=tuple(pub), subscribe_allow=tuple(sub), publish_deny=TOOL_CALLS_PRIVATE)


def _project() -> Permissions:
    pub, sub = _base("project", serves=[project_requests()], micro="project")
    pub += [
        tools_requests(),
        assets_requests(),
        *kv_read(subjects.BUCKET_PROJECTS),
    ]
    return Permissions(
        publish_allow=tuple(pub),
        subscribe_allow=tuple(sub),
        publish_deny=(*JS_DESTRUCTIVE_ANY, *TOOL_CALLS_PRIVATE),
    )


def _conversation() -> Permissions:
    pub, sub = _base("conversation", serves=[conversations_requests()], micro="conversation")
    streams = (subjects.STREAM_CONV_IN, subjects.STREAM_JOURNAL, subjects.STREAM_EVENTS)
    for stream in streams:
        pub += [*stream_read(stream), *stream_create(stream), *stream_admin(stream)]
    pub += [
        subjects.conversation_in_filter(),
        subjects.conversation_out_filter(),
        subjects.journal_filter(),
        *kv_write(subjects.BUCKET_CONVERSATIONS),
        *kv_write(subjects.BUCKET_OWNERS),
        *kv_write(BUCKET_LEDGER),
        *kv_read(subjects.BUCKET_PROJECTS),
        tools_requests(),
        project_requests("list_tools"),
        project_requests("info"),
        assets_requests(),
        # sub-agents: a parent's actor starts, feeds, reads and cancels its child conversations
        # through the conversation endpoints, and holds the project's sub-agent slots
        conversations_requests(),
        *kv_write(subjects.BUCKET_SUBAGENT_SLOTS),
        *kv_write(subjects.BUCKET_RETENTION),  # the retention sweep's lease
    ]
    # Signals (assets reloaded, project stopped, skill registry updated) invalidate its cached
    # tool specs; it listens on the whole signal space. It reads its conversations' output: a
    # stop waits for its cancel to be journaled, an owner journals the tool runner's approval
    # requests.
    sub += [subjects.conversation_in_filter(), subjects.signal_filter(), subjects.conversation_out_filter()]
    # It creates the spans stream (`jidocode trace` reads it) when tracing is on.
    pub += [*stream_read(subjects.STREAM_TRACES), *stream_create(subjects.STREAM_TRACES)]
    return Permissions(publish_allow=tuple(pub), subscribe_allow=tuple(sub), publish_deny=TOOL_CALLS_PRIVATE)


def _tool_runner() -> Permissions:
    pub, sub = _base("tool_runner", serves=[tools_requests()], micro="tool_runner")
    pub += [
        _approval_requested_filter(),
        assets_requests(),  # asset-derived tools: the loader's ``tools`` and ``call_tool``
        *kv_write(subjects.BUCKET_TOOL_CALLS),
        *kv_write(BUCKET_TOOL_QUOTAS),
        *kv_read(subjects.BUCKET_PROJECTS),
        *stream_read(subjects.STREAM_CONV_IN),
    ]
    # Approval answers arrive on conversation input; cancels are broadcast to every replica.
    sub += [subjects.conversation_in_filter(), subjects.signal("tool.cancel_requested")]
    sub += [subjects.signal("project.stopped")]  # a stopped project's MCP servers stop
    deny = (subjects.conversation_in_filter(), *JS_DESTRUCTIVE_ANY)
    return Permissions(publish_allow=tuple(pub), subscribe_allow=tuple(sub), publish_deny=deny)


def _asset_loader() -> Permissions:
    pub, sub = _base("asset_loader", serves=[assets_requests()], micro="asset_loader")
    pub += [subjects.hook_filter(), tools_requests("run"), *kv_read(subjects.BUCKET_PROJECTS)]
    # It loads and drops a project's assets as projects start and stop, and stops the
    # workflows of a cancelled tool call.
    sub += [
        subjects.signal("project.started"),
        subjects.signal("project.stopped"),
        subjects.signal("tool.cancel_requested"),
    ]
    return Permissions(
        publish_allow=tuple(pub),
        subscribe_allow=tuple(sub),
        publish_deny=(*JS_DESTRUCTIVE_ANY, *TOOL_CALLS_PRIVATE),
    )


def _prd() -> Permissions:
    pub, sub = _base("prd", serves=[prds_requests()], micro="prd")
    pub += [
        subjects.prd_event_filter(),
        *stream_read(subjects.STREAM_PRD),
        *stream_create(subjects.STREAM_PRD),
        *stream_admin(subjects.STREAM_PRD),
        *kv_write(subjects.BUCKET_PRD_LOOPS),
        *kv_read(subjects.BUCKET_PROJECTS),
        # the jidocode provider: a PRD iteration is a conversation of this system
        engine_requests(),
        project_requests("info"),
        conversations_requests(),
        *stream_read(subjects.STREAM_EVENTS),
    ]
    sub += [subjects.conversation_out_filter()]
    deny = (subjects.conversation_in_filter(), *TOOL_CALLS_PRIVATE)
    return Permissions(publish_allow=tuple(pub), subscribe_allow=tuple(sub), publish_deny=deny)


def _client() -> Permissions:
    pub = [
        *JS_COMMON,
        engine_requests(),
        project_requests(),
        conversations_requests(),
        tools_requests(),
        assets_requests(),
        prds_requests(),
        subjects.conversation_in_filter(),
        f"{SRV}.>",
        *stream_read(subjects.STREAM_JOURNAL),
        *stream_read(subjects.STREAM_EVENTS),
        *kv_read(subjects.BUCKET_PROJECTS),
        *kv_read(BUCKET_LEDGER),  # get_context_usage reads the token ledger
        subjects.trace_filter(),  # the SDK's own spans, while tracing is on
        *stream_read(subjects.STREAM_TRACES),  # jidocode trace
        *stream_read(subjects.STREAM_PRD),  # jidocode prd run / tui, the console's PRD page
    ]
    sub = [f"{inbox_prefix(CLIENT)}.>", subjects.all_subjects()]
    return Permissions(
        publish_allow=tuple(pub),
        subscribe_allow=tuple(sub),
        publish_deny=(*JS_DESTRUCTIVE_ANY, *TOOL_CALLS_PRIVATE),
        allow_responses=False,
    )


def _gateway() -> Permissions:
    client = _client()
    conversation_input = subjects.conversation_in_filter()
    return Permissions(
        publish_allow=tuple(s for s in client.publish_allow if s != conversation_input),
        subscribe_allow=(f"{inbox_prefix(GATEWAY)}.>", subjects.all_subjects()),
        publish_deny=client.publish_deny,
        allow_responses=False,
    )


_BUILDERS = {
    "engine": _engine,
    "project": _project,
    "conversation": _conversation,
    "tool_runner": _tool_runner,
    "asset_loader": _asset_loader,
    "prd": _prd,
    CLIENT: _client,
    GATEWAY: _gateway,
}


@functools.cache
def user_for(name: str) -> NatsUser:
    """The user of service ``name`` (or of ``client``); ``ValueError`` for an unknown name."""
    if name not in _BUILDERS:
        raise ValueError(f"unknown NATS user {name!r}; known: {', '.join(USERS)}")
    return NatsUser(name=name, inbox_prefix=inbox_prefix(name), permissions=_BUILDERS[name]())


def all_users() -> tuple[NatsUser, ...]:
    return tuple(user_for(name) for name in USERS)


def generate_password(nbytes: int = 24) -> str:
    """A random password that nats-server's config parser reads back as a plain string."""
    if nbytes < 16:
        raise ValueError("a NATS password needs at least 16 random bytes")
    return "p" + secrets.token_hex(nbytes)


# --- rendering --------------------------------------------------------------------------------


def _q(value: str) -> str:
    return json.dumps(value)


def _list(values: tuple[str, ...], indent: str) -> str:
    if not values:
        return "[]"
    inner = "".join(f"{indent}  {_q(v)}\n" for v in values)
    return f"[\n{inner}{indent}]"


def _render_user(user: NatsUser, password: str | None, indent: str) -> str:
    p = user.permissions
    pw = f"${password_env_var(user.name)}" if password is None else _q(password)
    i2, i3, i4 = indent + "  ", indent + "    ", indent + "      "
    lines = [
        f"{indent}{{",
        f"{i2}user: {_q(user.name)}",
        f"{i2}password: {pw}",
        f"{i2}permissions: {{",
        f"{i3}publish: {{",
        f"{i4}allow: {_list(p.publish_allow, i4)}",
        f"{i4}deny: {_list(p.publish_deny, i4)}",
        f"{i3}}}",
        f"{i3}subscribe: {{",
        f"{i4}allow: {_list(p.subscribe_allow, i4)}",
        f"{i4}deny: {_list(p.subscribe_deny, i4)}",
        f"{i3}}}",
    ]
    if p.allow_responses:
        lines.append(f"{i3}allow_responses: true")
    lines += [f"{i2}}}", f"{indent}}}"]
    return "\n".join(lines)


def render_accounts(
    users: Iterable[NatsUser] | None = None,
    passwords: Mapping[str, str] | None = None,
) -> str:
    """The ``accounts {…}`` block (an ``include``-able file) for ``users``.

    ``passwords`` maps user name to password; without it each password is an
    environment reference (``$JIDO_NATS_PASSWORD_<USER>``) resolved by nats-server at
    start, so the file itself holds no secret.
    """
    chosen = tuple(users) if users is not None else all_users()
    if passwords is not None:
        missing = [u.name for u in chosen if u.name not in passwords]
        if missing:
            raise ValueError(f"no password for {', '.join(missing)}")
        for name, pw in passwords.items():
            if len(pw) < 16:
                raise ValueError(f"password of {name!r} is shorter than 16 characters")
            if not _PASSWORD.match(pw):
                raise ValueError(
                    f"password of {name!r} has characters a NATS config string may mangle; "
                    "use letters, digits and - _ . ~ + / = (at most 256)"
                )
    body = "\n".join(
        _render_user(u, None if passwords is None else passwords[u.name], "      ") for u in chosen
    )
    return (
        "# Generated by `jidocode deploy nats-config`; do not edit by hand.\n"
        "# One user per JidoCode service; see docs/deploy.md (NATS permissions).\n"
        "accounts {\n"
        f"  {ACCOUNT} {{\n"
        "    jetstream: enabled\n"
        "    users: [\n"
        f"{body}\n"
        "    ]\n"
        "  }\n"
        "}\n"
    )


class NodeConfig(BaseModel):
    """One nats-server node: client port, JetStream store, optional cluster routes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    server_name: str
    host: str = "0.0.0.0"
    port: int = 4222
    http_port: int | None = 8222
    store_dir: str = "/data/jetstream"
    cluster_name: str | None = None
    cluster_port: int = 6222
    routes: tuple[str, ...] = ()
    include: str | None = "auth.conf"
    max_payload: int = 8 * 1024 * 1024
    lame_duck_duration: str = "30s"

    @field_validator("server_name")
    @classmethod
    def _name_ok(cls, value: str) -> str:
        if not re.match(r"^[A-Za-z0-9_\-]{1,64}$", value):
            raise ValueError(f"invalid server name {value!r}")
        return value

    @field_validator("port", "cluster_port", "http_port")
    @classmethod
    def _port_ok(cls, value: int | None) -> int | None:
        if value is not None and not 0 < value < 65536:
            raise ValueError(f"port {value} out of range")
        return value


def render_node(node: NodeConfig, accounts: str | None = None) -> str:
    """A nats-server config for ``node``; ``accounts`` inlines an accounts block instead of ``include``."""
    lines = [
        "# Generated by `jidocode deploy nats-config`; do not edit by hand.",
        f"server_name: {_q(node.server_name)}",
        f"listen: {_q(f'{node.host}:{node.port}')}",
    ]
    if node.http_port is not None:
        lines.append(f"http: {_q(f'{node.host}:{node.http_port}')}")
    lines += [
        f"max_payload: {node.max_payload}",
        f"lame_duck_duration: {_q(node.lame_duck_duration)}",
        "jetstream {",
        f"  store_dir: {_q(node.store_dir)}",
        "}",
    ]
    if node.cluster_name is not None:
        lines += [
            "cluster {",
            f"  name: {_q(node.cluster_name)}",
            f"  listen: {_q(f'{node.host}:{node.cluster_port}')}",
            f"  routes: {_list(node.routes, '  ')}",
            "}",
        ]
    if accounts is not None:
        lines.append(accounts)
    elif node.include is not None:
        lines.append(f"include {_q(node.include)}")
    return "\n".join(lines) + "\n"
