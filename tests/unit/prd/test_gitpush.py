"""The pure parts of a push to a network remote (decision 0343): which remotes, the token's
header, the repository keys that would steer a push, the secret pin read from standard input,
the pass limited to its destinations, and one ``NO_PROXY`` rule for every proxied program."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
from pathlib import Path

import pytest

from jidocode.services.prd.config import PushSettings, load_config_report
from jidocode.services.prd.gitpush import (
    TOKEN_USER,
    NetworkRemote,
    auth_header,
    is_network,
    network_remote,
    push_pins,
    steering_keys,
)
from jidocode.services.prd.gitrun import git_argv
from jidocode.shared.egress import CallScope, Pass, admit, table_resolver
from jidocode.shared.errors import InvalidInput, PermissionDenied
from jidocode.shared.policy import Policy
from jidocode.shared.policy.domains import parse_domain_pattern
from jidocode.shared.sandbox import Egress
from jidocode.shared.sandbox._egress import proxy_env
from jidocode.shared.trust import trust_project

PUSH = PushSettings(tokens={"git.example.org": "GIT_TOKEN"}, plain_http=["intranet.lan"])


@pytest.mark.parametrize(
    ("url", "network"),
    [
        ("https://github.com/o/r.git", True),
        ("ssh://git@host/r.git", True),
        ("git@github.com:o/r.git", True),
        ("ext::sh -c evil", True),
        ("../remote.git", False),
        ("/srv/remote.git", False),
        ("file:///srv/remote.git", False),
    ],
)
def test_a_network_remote_is_told_from_a_local_one(url: str, network: bool) -> None:
    assert is_network(url) is network


@pytest.mark.parametrize(
    ("url", "host", "port", "token_env"),
    [
        ("https://git.example.org/o/r.git", "git.example.org", 443, "GIT_TOKEN"),
        ("https://GIT.Example.org:8443/o/r.git", "git.example.org", 8443, "GIT_TOKEN"),
        ("https://user@other.org/r.git", "other.org", 443, ""),
        ("http://intranet.lan:8080/r.git", "intranet.lan", 8080, ""),
    ],
)
def test_an_http_remote_names_its_host_port_and_token(url: str, host: str, port: int, token_env: str) -> None:
    remote = network_remote(url, PUSH)
    assert (remote.host, remote.port, remote.token_env, remote.url) == (host, port, token_env, url)


@pytest.mark.parametrize(
    ("url", "host", "why"),
    [
        ("ssh://git@host.org/r.git", "host.org", "not reached over HTTP"),
        ("git@github.com:o/r.git", "github.com", "not reached over HTTP"),
        ("git://host.org/r.git", "host.org", "not reached over HTTP"),
        ("ext::sh -c evil", "ext", "not reached over HTTP"),
        ("http://git.example.org/r.git", "git.example.org", "plain http"),
        ("https://me:secret@host.org/r.git", "host.org", "password in its URL"),
    ],
)
def test_other_remotes_are_refused_naming_the_host(url: str, host: str, why: str) -> None:
    with pytest.raises(PermissionDenied, match=why) as refused:
        network_remote(url, PUSH)
    assert refused.value.details["host"] == host and host in refused.value.message


def test_the_token_is_sent_as_basic_and_a_missing_variable_is_named() -> None:
    remote = network_remote("https://git.example.org/r.git", PUSH)
    header = auth_header(remote, {"GIT_TOKEN": "t0k"})
    assert header == "Authorization: Basic " + base64.b64encode(f"{TOKEN_USER}:t0k".encode()).decode()
    with pytest.raises(InvalidInput, match=r"\$GIT_TOKEN for git.example.org"):
        auth_header(remote, {})
    assert auth_header(network_remote("https://other.org/r.git", PUSH), {"GIT_TOKEN": "t0k"}) == ""


def test_keys_that_steer_a_push_are_listed() -> None:
    listing = b"\0".join(
        [
            b"core.bare",
            b"http.proxy",
            b"http.https://host/.extraheader",
            b"url.https://evil/.pushinsteadof",
            b"credential.helper",
            b"credential.https://host/.helper",
            b"remote.origin.url",
        ]
    )
    assert steering_keys(listing) == [
        "credential.https://host/.helper",
        "http.https://host/.extraheader",
        "http.proxy",
        "url.https://evil/.pushinsteadof",
    ]


def test_the_push_pins_allow_one_transport_and_no_redirect() -> None:
    pins = dict(
        push_pins(NetworkRemote(url="u", scheme="https", host="h", port=443), "http://jido:t@127.0.0.1:9")
    )
    assert pins["protocol.https.allow"] == "always" and "protocol.http.allow" not in pins
    assert pins["http.proxy"] == "http://jido:t@127.0.0.1:9" and pins["http.followRedirects"] == "false"


def test_a_secret_pin_reaches_git_from_stdin_and_never_the_command_line() -> None:
    secret = "Authorization: Basic c2VjcmV0LXZhbHVl"
    key = "http.https://h:443/.extraHeader"
    argv = git_argv(
        ("config", "--get-urlmatch", "http.extraHeader", "https://h/r.git"),
        pins=[("a.b", "c")],
        secret_key=key,
    )
    assert not any("c2VjcmV0" in arg for arg in argv)
    done = subprocess.run(argv, input=(secret + "\n").encode(), capture_output=True, cwd="/", timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().strip() == secret
    without = subprocess.run(argv, input=b"", capture_output=True, cwd="/", timeout=30)
    assert without.returncode == 125  # no value: git never runs


def test_a_pass_with_destinations_reaches_only_them() -> None:
    scope = CallScope(
        project_id="p",
        request_id="prd/push/x",
        policy=Policy.build("/nonexistent", allowed_domains=["192.0.2.0/24", "other.test"]),
        extra_allowed=(parse_domain_pattern("git.test"),),
        destinations=frozenset({("git.test", 443)}),
    )
    resolver = table_resolver({"git.test": "192.0.2.7", "other.test": "192.0.2.8"})

    def decide(host: str, port: int) -> tuple[bool, str]:
        verdict = asyncio.run(admit(scope, host, port, resolver=resolver))
        return verdict.allowed, verdict.reason

    assert decide("git.test", 443) == (True, "allowed")
    for host, port in (("other.test", 443), ("git.test", 22), ("192.0.2.7", 443)):
        allowed, reason = decide(host, port)
        assert not allowed and reason == "this call may reach only git.test:443"


def test_no_proxy_is_one_rule_in_and_out_of_the_sandbox() -> None:
    issued = Pass(token="t", tcp_port=9, unix_path="/run/p.sock")
    inside = proxy_env(Egress(socket="/run/p.sock", port=9, proxy_url=issued.proxy_url()))
    assert issued.env() == inside
    assert inside["NO_PROXY"] == inside["no_proxy"] == "localhost,127.0.0.1,::1"


def test_a_projects_push_settings_are_ignored_even_when_trusted(tmp_path: Path) -> None:
    home, root = tmp_path / "home", tmp_path / "proj"
    (root / ".jido").mkdir(parents=True)
    home.mkdir()
    user = {"prd": {"push": {"tokens": {"github.com": "GITHUB_TOKEN"}}}}
    (home / "settings.json").write_text(json.dumps(user))
    project = {"prd": {"push": {"tokens": {"evil.example": "NATS_TOKEN"}, "plain_http": ["evil.example"]}}}
    (root / ".jido/settings.json").write_text(json.dumps(project))
    trust_project(root, home=home)

    report = load_config_report(str(root), env={"HOME": str(tmp_path)}, jido_home=str(home))
    assert report.config.push == PushSettings(tokens={"github.com": "GITHUB_TOKEN"})
    assert any("prd.push: ignored" in line for line in report.ignored)
