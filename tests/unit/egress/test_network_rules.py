"""The network rules, pure: entries (names, ``*.`` suffixes, IPs, CIDRs), deny wins, the addresses
always refused, ``WebFetch(domain:…)`` rules and the ``sandbox.allowed_domains`` settings."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jidocode.shared.policy import Effect, InvalidRule, Policy, authorize, parse_rule
from jidocode.shared.policy.domains import (
    NetworkRules,
    address_refusal,
    judge_host,
    normalize_host,
    parse_domain_pattern,
)
from jidocode.shared.policy.network import host_decision
from jidocode.shared.settings import merge_layers

_LABEL = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True)
_NAME = st.lists(_LABEL, min_size=2, max_size=4).map(".".join)


@pytest.mark.parametrize(
    ("entry", "host", "matches"),
    [
        ("pypi.org", "pypi.org", True),
        ("pypi.org", "PyPI.org.", True),
        ("pypi.org", "files.pypi.org", False),
        ("*.npmjs.org", "registry.npmjs.org", True),
        ("*.npmjs.org", "a.b.npmjs.org", True),
        ("*.npmjs.org", "npmjs.org", False),
        ("*.npmjs.org", "evilnpmjs.org", False),
        ("203.0.113.7", "203.0.113.7", True),
        ("10.1.0.0/16", "10.1.200.3", True),
        ("10.1.0.0/16", "10.2.0.1", False),
        ("2001:db8::/32", "2001:db8::1", True),
        ("2001:db8::/32", "[2001:db8::1]", True),
        ("10.0.0.0/8", "ten.example", False),
    ],
)
def test_an_entry_matches_what_it_names(entry: str, host: str, matches: bool) -> None:
    name = normalize_host(host)
    assert name is not None
    assert parse_domain_pattern(entry).matches_host(name) is matches


@pytest.mark.parametrize(
    "entry", ["*", "*.com", "a*b.org", "*.*.org", "bad host", "10.0.0.0/33", "", "-x.org"]
)
def test_a_bad_entry_is_refused_naming_it(entry: str) -> None:
    with pytest.raises(ValueError, match="'"):
        parse_domain_pattern(entry)


@given(_NAME, _NAME)
def test_a_suffix_matches_exactly_the_names_below_it(sub: str, domain: str) -> None:
    entry = parse_domain_pattern(f"*.{domain}")
    assert entry.matches_host(f"{sub}.{domain}")
    assert not entry.matches_host(domain)
    assert not entry.matches_host(f"{sub}{domain}")


@given(_NAME, st.sampled_from(["allow", "ask"]))
def test_deny_wins_over_any_allow_or_ask(name: str, other: str) -> None:
    rules = NetworkRules.parse(allowed=[name], denied=[f"*.{name}", name])
    got = judge_host(name, rules, ask=[parse_domain_pattern(name)], allow=[parse_domain_pattern(name)])
    assert got.effect == "deny"
    policy = Policy.build("/tmp", **{other: [f"WebFetch(domain:{name})"]}, deny=[f"WebFetch(domain:{name})"])
    assert host_decision(policy, name).effect is Effect.DENY


def test_no_entry_refuses_for_the_proxy_and_asks_for_web_fetch() -> None:
    policy = Policy.build("/tmp", allowed_domains=["pypi.org"])
    assert host_decision(policy, "pypi.org").effect is Effect.ALLOW
    refused = host_decision(policy, "example.org")
    assert refused.effect is Effect.DENY and refused.details["allow_rule"] == "WebFetch(domain:example.org)"
    assert authorize(policy, "web_fetch", {"url": "https://example.org/x"}).effect is Effect.ASK
    assert authorize(policy, "web_fetch", {"url": "https://pypi.org/simple/"}).effect is Effect.ALLOW
    for url in ("file:///etc/passwd", "ftp://pypi.org/", "https://u:p@pypi.org/", "not a url"):
        assert authorize(policy, "web_fetch", {"url": url}).effect is Effect.DENY, url


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "127.9.9.9",
        "::1",
        "169.254.169.254",
        "fe80::1",
        "0.0.0.0",
        "::",
        "224.0.0.1",
        "::ffff:127.0.0.1",
    ],
)
def test_loopback_link_local_and_unspecified_are_refused_whatever_the_entries(address: str) -> None:
    everything = [
        parse_domain_pattern("0.0.0.0/0"),
        parse_domain_pattern("::/0"),
        parse_domain_pattern(address),
    ]
    assert address_refusal(ipaddress.ip_address(address), 443, allowed=everything) is not None


@given(st.ip_addresses(v=4) | st.ip_addresses(v=6))
def test_only_global_or_named_addresses_pass(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> None:
    refused = address_refusal(ip, 443)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # ::ffff:a.b.c.d is judged as a.b.c.d, where it goes
    if ip.is_global and not (ip.is_multicast or ip.is_reserved):
        assert refused is None
    else:
        assert refused is not None


def test_a_private_address_needs_an_ip_or_cidr_entry() -> None:
    mirror = ipaddress.ip_address("10.20.0.5")
    assert address_refusal(mirror, 443) is not None
    assert address_refusal(mirror, 443, allowed=[parse_domain_pattern("mirror.corp")]) is not None
    assert address_refusal(mirror, 443, allowed=[parse_domain_pattern("10.20.0.0/16")]) is None
    denied = [parse_domain_pattern("10.20.0.5")]
    assert address_refusal(mirror, 443, allowed=[parse_domain_pattern("10.20.0.0/16")], denied=denied)


def test_the_runtimes_own_endpoints_are_refused() -> None:
    nats = ipaddress.ip_address("10.0.0.9")
    allowed = [parse_domain_pattern("10.0.0.0/8")]
    assert address_refusal(nats, 4222, allowed=allowed, runtime=[("10.0.0.9", 4222)]) is not None
    assert address_refusal(nats, 443, allowed=allowed, runtime=[("10.0.0.9", 4222)]) is None
    # the same port on another private address of the host (NATS listening on every interface)
    other = ipaddress.ip_address("10.0.0.10")
    assert address_refusal(other, 4222, allowed=allowed, runtime=[("127.0.0.1", 4222)]) is not None


@pytest.mark.parametrize(
    ("raw", "ok"),
    [
        ("WebFetch(domain:pypi.org)", True),
        ("WebFetch(domain:*.npmjs.org)", True),
        ("WebFetch(domain:10.0.0.0/8)", True),
        ("WebFetch", True),
        ("web_fetch(domain:pypi.org)", True),
        ("WebFetch(pypi.org)", False),
        ("WebFetch(domain:*)", False),
        ("WebFetch(domain:a*b)", False),
    ],
)
def test_webfetch_rules_parse_a_domain_entry(raw: str, ok: bool) -> None:
    if ok:
        assert parse_rule(raw).kind == "domain"
    else:
        with pytest.raises(InvalidRule):
            parse_rule(raw)


def test_a_bare_webfetch_rule_allows_any_name_but_opens_no_private_address() -> None:
    policy = Policy.build("/tmp", allow=["WebFetch"])
    assert host_decision(policy, "anything.example").effect is Effect.ALLOW
    from jidocode.shared.policy.network import allowed_entries

    assert address_refusal(ipaddress.ip_address("192.168.1.1"), 80, allowed=allowed_entries(policy))


def test_old_settings_stay_valid_and_the_lists_are_read() -> None:
    old, diags = merge_layers([("g.json", {"sandbox": {"network": True, "mode": "auto"}})])
    assert old.sandbox.network is True and old.sandbox.allowed_domains == [] and not diags
    new, diags = merge_layers(
        [
            (
                "g.json",
                {"sandbox": {"allowed_domains": ["pypi.org", "*.npmjs.org"], "denied_domains": ["x.org"]}},
            )
        ]
    )
    assert new.sandbox.network is False and new.sandbox.allowed_domains == ["pypi.org", "*.npmjs.org"]
    assert not diags
    _, bad = merge_layers([("g.json", {"sandbox": {"allowed_domains": ["*.com"]}})])
    assert [d.key for d in bad] == ["sandbox.allowed_domains"] and "*.com" in bad[0].problem


def test_an_untrusted_project_cannot_add_allowed_domains() -> None:
    settings, diags = merge_layers(
        [("g.json", {})],
        project=[("p.json", {"sandbox": {"allowed_domains": ["exfil.example"]}})],
        trusted=False,
    )
    assert settings.sandbox.allowed_domains == []
    assert any(d.key == "sandbox.allowed_domains" for d in diags)
