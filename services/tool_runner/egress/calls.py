"""The egress proxy in the tool runner: one per replica, a pass per call, its events on the bus.

:func:`start_proxy` starts the replica's proxy: the runtime's own endpoints (the NATS servers
of ``config.nats_url`` and the gateway's ``JIDO_GATEWAY_PORT`` on those addresses) always
refused, ``JIDO_EGRESS_HOSTS`` in front of the system resolver, each decision published as a
``tool.network`` signal. :func:`call_scope` is what a call's pass stands for: its project,
conversation and policy, and an ``ask`` put to its conversation through the approval gate
(``approve_session`` remembers the host for the rest of the conversation, per replica).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from jidocode.services.tool_runner.approvals import ApprovalGate
from jidocode.services.tool_runner.call import Call
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.egress import (
    HOSTS_ENV,
    CallScope,
    EgressProxy,
    parse_hosts,
    runtime_endpoints,
    system_resolver,
    table_resolver,
)
from jidocode.shared.events.tools import ToolNetwork
from jidocode.shared.policy import Decision, Effect, Policy
from jidocode.shared.policy.domains import normalize_host
from jidocode.shared.policy.network import url_host
from jidocode.shared.tools.specs import BUILTIN_BY_NAME

__all__ = [
    "approved_hosts",
    "call_scope",
    "needs_egress",
    "runtime_endpoints",
    "session_key",
    "start_proxy",
]

log = logging.getLogger("jidocode.tool_runner.egress")


def session_key(host: str) -> str:
    """What ``approve_session`` remembers of a connection: its host."""
    return f"network\0{host}"


def call_scope(
    call: Call,
    policy: Policy,
    gate: ApprovalGate,
    *,
    timeout_s: float,
    approved_hosts: frozenset[str] = frozenset(),
) -> CallScope:
    """The scope of ``call``'s pass; its questions go to the call's conversation."""

    async def ask(host: str, port: int, decision: Decision) -> bool:
        cid = call.conversation_id
        if cid is not None and gate.session.grants(call.project_id, cid, session_key(host)):
            return True
        answer = await gate.ask(
            call,
            f"net/{host}:{port}",
            {"host": host, "port": port},
            f"connect to {host}:{port}: {decision.reason}",
            timeout_s=timeout_s,
        )
        if answer == "approve_session" and cid is not None:
            gate.session.remember(call.project_id, cid, session_key(host))
        return answer in ("approve_once", "approve_session")

    return CallScope(
        project_id=call.project_id,
        request_id=call.request_id,
        policy=policy,
        conversation_id=call.conversation_id,
        ask=ask if call.conversation_id is not None else None,
        approved_hosts=approved_hosts,
        ext=dict(call.ext),
    )


async def start_proxy(bus: Bus, config: Config) -> EgressProxy:
    """The replica's proxy, publishing its decisions on ``bus``."""
    table = parse_hosts(os.environ.get(HOSTS_ENV, ""))
    resolver = table_resolver(table) if table else system_resolver

    async def publish(event: ToolNetwork, scope: CallScope) -> None:
        await bus.emit(event, **scope.ext)

    proxy = await EgressProxy.start(
        resolver=resolver, runtime=await runtime_endpoints(config, resolver), on_event=publish
    )
    log.info("egress proxy on %s and 127.0.0.1:%d", proxy.unix_path, proxy.tcp_port)
    return proxy


def needs_egress(name: str) -> bool:
    """Whether a built-in's call gets a pass: it fetches (``web_fetch``) or runs programs (``bash``)."""
    spec = BUILTIN_BY_NAME.get(name)
    return spec is not None and (spec.network or spec.access == "run")


def approved_hosts(args: Mapping[str, object], decision: Decision) -> frozenset[str]:
    """The host a human approved with the call (a ``web_fetch`` asked about): none otherwise."""
    url = args.get("url")
    if decision.effect is not Effect.ASK or not isinstance(url, str):
        return frozenset()
    where = url_host(url)
    host = None if isinstance(where, str) else normalize_host(where[0])
    return frozenset() if host is None else frozenset({host})
