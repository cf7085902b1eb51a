"""Network destinations under policy: domain patterns, the allowlist and the refused addresses (pure).

An **entry** (``sandbox.network.allowed_domains`` / ``denied_domains``, or the pattern of a
``WebFetch(domain:…)`` rule) is one of:

==================  ======================================================================
``pypi.org``        exactly that host name (lower-cased, IDNA, a trailing dot dropped)
``*.npmjs.org``     any name *below* ``npmjs.org`` (``registry.npmjs.org``), not the name itself
``203.0.113.7``     that address, named as a literal host or reached by resolving a name
``10.1.0.0/16``     any address of that network (IPv4 or IPv6 CIDR)
==================  ======================================================================

How one destination is judged (:func:`judge_host`, then :func:`address_refusal` on every
address the name resolved to, before connecting to that same address):

1. A host that is not a valid name or address is refused.
2. Deny wins: a denied entry (or deny rule) matching the name, or the literal address, refuses.
3. Then an ask rule asks, then an allowed entry or allow rule allows; else the default
   (refused for the proxy; asked for ``web_fetch``).
4. After resolution, every address is checked: loopback, link-local (``169.254.169.254``),
   unspecified, multicast and reserved addresses are **always** refused, whatever the entries
   say; so are the runtime's own endpoints (NATS, the gateway: their addresses, and their
   ports on any non-global address, where another interface of their host may answer). Any
   other non-global address (RFC 1918, unique-local, CGNAT, documentation ranges) is refused
   unless an *allowed IP or CIDR entry* covers it: a name alone never opens a private address, since whoever controls
   the name's DNS could point it anywhere (DNS rebinding).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict

__all__ = [
    "DomainPattern",
    "HostVerdict",
    "IpAddress",
    "NetworkRules",
    "address_refusal",
    "judge_host",
    "normalize_host",
    "parse_domain_pattern",
]

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_Network = ipaddress.IPv4Network | ipaddress.IPv6Network

_LABEL: Final = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")
_MAX_NAME: Final = 253


def _as_ip(text: str) -> IpAddress | None:
    try:
        ip = ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1
    return ip


def normalize_host(host: str) -> str | None:
    """``host`` as entries are compared with it (lower-case ASCII name, or an address); ``None``
    when it is neither a valid host name nor an IP address."""
    ip = _as_ip(host)
    if ip is not None:
        return str(ip)
    name = host.strip().rstrip(".").lower()
    if not name or len(name) > _MAX_NAME or any(ord(c) < 33 for c in name):
        return None
    if not name.isascii():
        try:
            name = name.encode("idna").decode("ascii")
        except UnicodeError:
            return None
    labels = name.split(".")
    if not all(_LABEL.match(label) for label in labels):
        return None
    return name


class DomainPattern(BaseModel):
    """One parsed entry: a name, a ``*.`` suffix, or an IP network (a literal is a /32 or /128);
    ``any`` (every host, never a private address) stands for a bare ``WebFetch`` rule."""

    model_config = ConfigDict(frozen=True)

    raw: str
    kind: Literal["name", "suffix", "network", "any"]
    #: ``name``: the host; ``suffix``: the domain below which names match; ``network``: the CIDR.
    value: str

    def network(self) -> _Network | None:
        return ipaddress.ip_network(self.value, strict=False) if self.kind == "network" else None

    def matches_host(self, host: str) -> bool:
        """Whether the normalized ``host`` (name or address literal) is this entry."""
        if self.kind == "any":
            return True
        if self.kind == "name":
            return host == self.value
        if self.kind == "suffix":
            return host.endswith("." + self.value)
        ip = _as_ip(host)
        return ip is not None and self.covers_address(ip)

    def covers_address(self, ip: IpAddress) -> bool:
        """Whether ``ip`` lies in this entry's network (never for a name entry)."""
        net = self.network()
        return net is not None and ip.version == net.version and ip in net


@lru_cache(maxsize=4096)
def parse_domain_pattern(raw: str) -> DomainPattern:
    """Parse one entry; :class:`ValueError` naming what is wrong."""
    text = raw.strip()
    if "/" in text:
        try:
            net = ipaddress.ip_network(text, strict=False)
        except ValueError:
            raise ValueError(f"{raw!r} is not a CIDR network (e.g. 10.1.0.0/16)") from None
        return DomainPattern(raw=raw, kind="network", value=str(net))
    ip = _as_ip(text)
    if ip is not None:
        return DomainPattern(raw=raw, kind="network", value=str(ipaddress.ip_network(ip)))
    suffix = text.startswith("*.")
    body = text[2:] if suffix else text
    if "*" in body:
        raise ValueError(f"{raw!r}: '*' may only start an entry, as in *.npmjs.org")
    name = normalize_host(body)
    if name is None:
        raise ValueError(f"{raw!r} is not a host name, an IP address or a CIDR network")
    if suffix and "." not in name:
        raise ValueError(f"{raw!r} would match a whole top-level domain; name the domain (*.example.org)")
    return DomainPattern(raw=raw, kind="suffix" if suffix else "name", value=name)


def _parse_all(raws: Iterable[str], what: str) -> tuple[DomainPattern, ...]:
    out: list[DomainPattern] = []
    problems: list[str] = []
    for raw in raws:
        try:
            out.append(parse_domain_pattern(raw))
        except ValueError as exc:
            problems.append(str(exc))
    if problems:
        raise ValueError(f"{what}: " + "; ".join(problems))
    return tuple(out)


class NetworkRules(BaseModel):
    """The allowed and denied entries of ``sandbox.network`` (parsed; deny wins)."""

    model_config = ConfigDict(frozen=True)

    allowed: tuple[DomainPattern, ...] = ()
    denied: tuple[DomainPattern, ...] = ()

    @classmethod
    def parse(cls, allowed: Iterable[str] = (), denied: Iterable[str] = ()) -> NetworkRules:
        """Both lists parsed; :class:`ValueError` naming every bad entry."""
        return cls(
            allowed=_parse_all(allowed, "sandbox.network.allowed_domains"),
            denied=_parse_all(denied, "sandbox.network.denied_domains"),
        )

    def merged(self, allowed: Iterable[DomainPattern]) -> NetworkRules:
        """These rules with more allowed entries (a provider's own API hosts)."""
        return self.model_copy(update={"allowed": (*self.allowed, *allowed)})

    def summary(self) -> dict[str, list[str]]:
        return {
            "allowed_domains": [p.raw for p in self.allowed],
            "denied_domains": [p.raw for p in self.denied],
        }


Verdict = Literal["allow", "ask", "deny"]


class HostVerdict(BaseModel):
    """What the entries say of one host: the effect, why, and the entry or rule that decided."""

    model_config = ConfigDict(frozen=True)

    effect: Verdict
    reason: str
    #: The entry that decided, and whether it was a ``WebFetch(domain:…)`` rule (else a settings entry).
    entry: str | None = None
    from_rule: bool = False


def judge_host(
    host: str,
    rules: NetworkRules,
    *,
    deny: Iterable[DomainPattern] = (),
    ask: Iterable[DomainPattern] = (),
    allow: Iterable[DomainPattern] = (),
    default: Verdict = "deny",
) -> HostVerdict:
    """Decide ``host`` by the entries (``rules``) and the ``WebFetch(domain:…)`` rules given as
    ``deny``/``ask``/``allow`` patterns. Deny beats ask beats allow; no match is ``default``."""
    name = normalize_host(host)
    if name is None:
        return HostVerdict(effect="deny", reason=f"{host!r} is not a valid host name or address")
    steps: tuple[tuple[Verdict, tuple[DomainPattern, ...], Iterable[DomainPattern]], ...] = (
        ("deny", rules.denied, deny),
        ("ask", (), ask),
        ("allow", rules.allowed, allow),
    )
    for effect, entries, by_rule in steps:
        for p in entries:
            if p.matches_host(name):
                where = f"sandbox.{'denied' if effect == 'deny' else 'allowed'}_domains entry {p.raw!r}"
                return HostVerdict(effect=effect, reason=f"{name}: {effect} by {where}", entry=p.raw)
        for p in by_rule:
            if p.matches_host(name):
                rule = "WebFetch" if p.kind == "any" else f"WebFetch(domain:{p.raw})"
                return HostVerdict(
                    effect=effect, reason=f"{name}: {effect} by rule {rule}", entry=rule, from_rule=True
                )
    return HostVerdict(
        effect=default,
        reason=f"{name} is in no allowed entry (add it to sandbox.allowed_domains, "
        f'or "WebFetch(domain:{name})" to permissions.allow)',
    )


def _always_refused(ip: IpAddress) -> str | None:
    if ip.is_loopback:
        return "a loopback address"
    if ip.is_link_local:
        return "a link-local address (cloud metadata lives there)"
    if ip.is_unspecified:
        return "the unspecified address"
    if ip.is_multicast:
        return "a multicast address"
    if ip.is_reserved:
        return "a reserved address"
    return None


def address_refusal(
    ip: IpAddress,
    port: int,
    *,
    allowed: Iterable[DomainPattern] = (),
    denied: Iterable[DomainPattern] = (),
    runtime: Iterable[tuple[str, int]] = (),
) -> str | None:
    """Why a connection to ``ip``:``port`` is refused (``None``: it may be made).

    ``allowed``/``denied`` are every allowed and denied entry (only IP and CIDR entries count
    here); ``runtime`` the runtime's own ``(address, port)`` endpoints.
    """
    ip = _as_ip(str(ip)) or ip
    always = _always_refused(ip)
    if always is not None:
        return f"{ip} is {always}, always refused"
    for address, runtime_port in runtime:
        same = str(_as_ip(address) or address) == str(ip)
        if port == runtime_port and (same or not ip.is_global):  # its port on any address of the LAN
            return f"{ip}:{port} is the runtime's own endpoint (NATS, the gateway), always refused"
    for p in denied:
        if p.covers_address(ip):
            return f"{ip} is denied by {p.raw!r}"
    if not ip.is_global and not any(p.covers_address(ip) for p in allowed):
        return (
            f"{ip} is a private address, reached only when an allowed IP or CIDR entry names it "
            "(a host name alone never opens one)"
        )
    return None
