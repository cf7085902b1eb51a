"""Network decisions of a project's policy (pure): one host, and a ``web_fetch`` call.

Both read the same two sources (:mod:`.domains`): the ``sandbox.allowed_domains`` /
``denied_domains`` entries of the settings (:attr:`Policy.network`) and the
``WebFetch(domain:…)`` permission rules. Deny beats ask beats allow. With nothing matching,
a connection through the egress proxy is refused and a ``web_fetch`` call asks (like an MCP
tool, decision 0207): the user approves that one fetch, not the host for later calls.

The checks on the resolved addresses (:func:`~.domains.address_refusal`) are made where the
name is resolved (the egress proxy, ``web_fetch``), on the address then connected to.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import urlsplit

from .domains import DomainPattern, HostVerdict, Verdict, judge_host, parse_domain_pattern
from .model import Decision, Effect, Policy
from .rules import PermissionRule

__all__ = ["NETWORK_PERMISSION", "allowed_entries", "fetch_decision", "host_decision", "url_host"]

#: The permission name of network rules, and of the ``web_fetch`` tool.
NETWORK_PERMISSION: Final = "WebFetch"


def _patterns(rules: tuple[PermissionRule, ...], *, any_host: bool) -> list[DomainPattern]:
    out: list[DomainPattern] = []
    for r in rules:
        if r.kind == "domain":
            if r.pattern is not None:
                out.append(parse_domain_pattern(r.pattern))
            elif any_host:
                out.append(_ANY)
    return out


#: What a bare ``WebFetch`` rule stands for: every host (a wildcard no entry can spell).
_ANY: Final = DomainPattern(raw="WebFetch", kind="any", value="*")


def allowed_entries(policy: Policy) -> list[DomainPattern]:
    """Every allowed entry: ``sandbox.allowed_domains`` and the ``WebFetch(domain:…)`` allow rules
    (the IP and CIDR ones are what open a private address)."""
    return [*policy.network.allowed, *_patterns(policy.allow, any_host=False)]


def denied_entries(policy: Policy) -> list[DomainPattern]:
    """Every denied entry: ``sandbox.denied_domains`` and the ``WebFetch(domain:…)`` deny rules."""
    return [*policy.network.denied, *_patterns(policy.deny, any_host=False)]


def _verdict(policy: Policy, host: str, default: Verdict) -> HostVerdict:
    return judge_host(
        host,
        policy.network,
        deny=_patterns(policy.deny, any_host=True),
        ask=_patterns(policy.ask, any_host=True),
        allow=_patterns(policy.allow, any_host=True),
        default=default,
    )


def host_decision(policy: Policy, host: str, *, default: Effect = Effect.DENY) -> Decision:
    """Whether a program may reach ``host`` (a name or an address literal), before resolution."""
    verdict = _verdict(policy, host, "ask" if default is Effect.ASK else "deny")
    effect = Effect(verdict.effect)
    rule = verdict.entry if verdict.from_rule else None
    details: dict[str, Any] = {"host": host}
    if verdict.entry is None and effect is not Effect.ALLOW:
        details["allow_rule"] = f"WebFetch(domain:{host.lower()})"
    return Decision(effect=effect, reason=verdict.reason, rule=rule, details=details)


def url_host(url: str) -> tuple[str, int] | str:
    """The host and port of an ``http``/``https`` URL, or why it cannot be fetched."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return f"not a valid URL: {exc}"
    if parts.scheme not in ("http", "https"):
        return f"only http and https URLs are fetched, not {parts.scheme or 'a relative URL'!r}"
    if not parts.hostname:
        return "the URL names no host"
    if parts.username or parts.password:
        return "a URL with credentials (user:password@) is not fetched"
    return parts.hostname, port or (443 if parts.scheme == "https" else 80)


def fetch_decision(policy: Policy, args: Mapping[str, Any]) -> Decision:
    """``web_fetch``: the URL's host by the network rules; with no rule matching, ask."""
    url = args.get("url")
    if not isinstance(url, str):
        return Decision(effect=Effect.DENY, reason="web_fetch: argument 'url' must be a string")
    target = url_host(url)
    if isinstance(target, str):
        return Decision(effect=Effect.DENY, reason=f"web_fetch {url!r}: {target}")
    decision = host_decision(policy, target[0], default=Effect.ASK)
    return decision.model_copy(update={"reason": f"web_fetch {url!r}: {decision.reason}"})
