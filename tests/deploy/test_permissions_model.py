"""The permission model itself (pure): who may publish and subscribe to what, and the rendered config."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jidocode.shared import nats_permissions as perms
from jidocode.shared import subjects

from .natsutil import matches, may_publish, may_subscribe

ids = st.from_regex(r"[A-Za-z0-9_\-]{1,40}", fullmatch=True)


@pytest.mark.parametrize(
    ("pattern", "subject", "expected"),
    [
        ("jido.>", "jido.a.b", True),
        ("jido.>", "jido", False),
        ("jido.*.in", "jido.x.in", True),
        ("jido.*.in", "jido.x.y.in", False),
        ("a.b", "a.b", True),
        ("a.b", "a.b.c", False),
    ],
)
def test_matcher_follows_nats_wildcards(pattern: str, subject: str, expected: bool) -> None:
    assert matches(pattern, subject) is expected


def test_every_service_and_the_client_has_a_user() -> None:
    names = [u.name for u in perms.all_users()]
    assert names == [*perms.SERVICES, perms.CLIENT, perms.GATEWAY]
    assert set(perms.SERVICES) == set(subjects.SERVICE_NAMES)


def test_unknown_user_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown NATS user"):
        perms.user_for("intruder")
    with pytest.raises(ValueError, match="invalid NATS user"):
        perms.inbox_prefix("Bad.Name")


@given(project=ids, conversation=ids)
def test_only_the_client_and_the_conversation_service_write_conversation_input(
    project: str, conversation: str
) -> None:
    subject = subjects.conversation_in(project, conversation)
    writers = {u for u in perms.USERS if may_publish(u, subject)}
    assert writers == {"client", "conversation"}
    assert may_subscribe("tool_runner", subject)  # it reads approval answers


@given(project=ids, conversation=ids)
def test_tool_runner_emits_only_approval_requests_among_conversation_outputs(
    project: str, conversation: str
) -> None:
    assert may_publish(
        "tool_runner", subjects.conversation_out(project, conversation, "conversation.approval.requested")
    )
    assert not may_publish(
        "tool_runner", subjects.conversation_out(project, conversation, "conversation.assistant.message")
    )
    assert not may_publish("tool_runner", subjects.journal(project, conversation))


@pytest.mark.parametrize("stream", [subjects.STREAM_CONV_IN, subjects.STREAM_JOURNAL, subjects.STREAM_EVENTS])
def test_only_the_conversation_service_deletes_or_purges_its_streams(stream: str) -> None:
    for verb in ("DELETE", "PURGE"):
        subject = f"$JS.API.STREAM.{verb}.{stream}"
        assert {u for u in perms.USERS if may_publish(u, subject)} == {"conversation"}


def test_tool_runner_deletes_no_stream_at_all() -> None:
    for stream in ("KV_" + subjects.BUCKET_TOOL_CALLS, subjects.STREAM_JOURNAL, "ANY"):
        assert not may_publish("tool_runner", f"$JS.API.STREAM.DELETE.{stream}")


@pytest.mark.parametrize("user", perms.USERS)
def test_each_user_subscribes_only_to_its_own_inbox(user: str) -> None:
    for other in perms.USERS:
        inbox = f"{perms.inbox_prefix(other)}.abc.1"
        assert may_subscribe(user, inbox) is (other == user)
    assert not may_subscribe(user, "_INBOX.abc")


@pytest.mark.parametrize("user", perms.USERS)
def test_nobody_publishes_into_inboxes_except_as_a_reply(user: str) -> None:
    for other in perms.USERS:
        assert not may_publish(user, f"{perms.inbox_prefix(other)}.abc.1")
    assert perms.user_for(user).permissions.allow_responses is (user not in (perms.CLIENT, perms.GATEWAY))


def test_kv_writers() -> None:
    def writers(bucket: str) -> set[str]:
        return {u for u in perms.USERS if may_publish(u, f"$KV.{bucket}.key")}

    assert writers(subjects.BUCKET_PROJECTS) == {"engine"}
    assert writers(subjects.BUCKET_TOOL_CALLS) == {"tool_runner"}
    assert writers(subjects.BUCKET_CONVERSATIONS) == {"conversation"}
    assert writers(subjects.BUCKET_OWNERS) == {"conversation"}
    assert writers(subjects.BUCKET_SUBAGENT_SLOTS) == {"conversation"}


@given(project=ids, verb=ids)
def test_request_routes(project: str, verb: str) -> None:
    def senders(subject: str) -> set[str]:
        return {u for u in perms.USERS if may_publish(u, subject)}

    def servers(subject: str) -> set[str]:
        return {u for u in perms.SERVICES if may_subscribe(u, subject)}

    assert servers(subjects.engine(verb)) == {"engine"}
    assert servers(subjects.project(project, verb)) == {"project"}
    assert servers(subjects.conversations(project, verb)) == {"conversation"}
    assert servers(subjects.tools(project, verb)) == {"tool_runner"}
    assert servers(subjects.assets(project, verb)) == {"asset_loader"}
    assert servers(subjects.prds(project, verb)) == {"prd"}
    # People drive PRD loops; no service does.
    assert senders(subjects.prds(project, verb)) == {"client", "gateway"}
    # Clients reach the conversation service directly: no service forwards to it; the
    # conversation service calls its own endpoints for sub-agents (a parent starts its children).
    # The prd service's jidocode provider runs each story as a conversation.
    assert senders(subjects.conversations(project, verb)) == {"client", "gateway", "conversation", "prd"}
    assert senders(subjects.assets(project, verb)) == {
        "client",
        "gateway",
        "project",
        "conversation",
        "tool_runner",
    }
    assert {"client", "project", "conversation"} <= senders(subjects.tools(project, "run"))
    assert "asset_loader" in senders(subjects.tools(project, "run"))
    assert "asset_loader" not in senders(subjects.tools(project, "cancel"))
    assert senders(subjects.project(project, "list_tools")) >= {"client", "engine", "conversation"}


@pytest.mark.parametrize("service", perms.SERVICES)
def test_every_service_publishes_signals_and_may_probe_itself(service: str) -> None:
    assert may_publish(service, subjects.signal("tool.started"))
    assert may_publish(service, subjects.srv("PING", service))
    assert may_subscribe(service, subjects.srv("PING"))


def test_permissions_reject_malformed_subjects() -> None:
    with pytest.raises(ValueError, match="last token"):
        perms.Permissions(publish_allow=("a.>.b",))
    with pytest.raises(ValueError, match="invalid subject"):
        perms.Permissions(subscribe_allow=("a..b",))


def test_password_rules() -> None:
    assert perms.generate_password().startswith("p")
    assert perms.generate_password() != perms.generate_password()
    with pytest.raises(ValueError, match="16"):
        perms.generate_password(8)
    with pytest.raises(ValueError, match="no password for"):
        perms.render_accounts(passwords={"engine": "x" * 20})
    with pytest.raises(ValueError, match="shorter than 16"):
        perms.render_accounts(passwords={u: "short" for u in perms.USERS})
    for bad in ("p" * 20 + '"', "p" * 20 + "\\", "p" * 20 + " x", "p" * 300):
        with pytest.raises(ValueError, match="mangle"):
            perms.render_accounts(passwords={u: bad for u in perms.USERS})


@given(st.from_regex(r"[A-Za-z0-9_\-.~+/=]{16,64}", fullmatch=True))
def test_any_accepted_password_renders_verbatim(password: str) -> None:
    text = perms.render_accounts(passwords=dict.fromkeys(perms.USERS, password))
    assert text.count(f'password: "{password}"') == len(perms.USERS)


def test_env_reference_rendering_holds_no_secret() -> None:
    text = perms.render_accounts()
    for user in perms.USERS:
        assert f"password: ${perms.password_env_var(user)}" in text


def test_node_config_validation() -> None:
    with pytest.raises(ValueError):
        perms.NodeConfig(server_name="bad name")
    with pytest.raises(ValueError):
        perms.NodeConfig(server_name="n", port=70000)
    text = perms.render_node(
        perms.NodeConfig(server_name="n1", cluster_name="jido", routes=("nats://n2:6222",))
    )
    assert 'include "auth.conf"' in text
    assert '"nats://n2:6222"' in text


_TOOL_CALLS_SUBJECTS = (
    f"$JS.API.STREAM.INFO.KV_{subjects.BUCKET_TOOL_CALLS}",
    f"$JS.API.STREAM.MSG.GET.KV_{subjects.BUCKET_TOOL_CALLS}",
    f"$JS.API.DIRECT.GET.KV_{subjects.BUCKET_TOOL_CALLS}.$KV.{subjects.BUCKET_TOOL_CALLS}.k",
    f"$JS.API.CONSUMER.CREATE.KV_{subjects.BUCKET_TOOL_CALLS}",
    f"$KV.{subjects.BUCKET_TOOL_CALLS}.k",
)


@pytest.mark.parametrize("subject", _TOOL_CALLS_SUBJECTS)
def test_only_the_tool_runner_reaches_the_stored_tool_results(subject: str) -> None:
    assert {u for u in perms.USERS if may_publish(u, subject)} == {"tool_runner"}


def test_only_the_tool_runner_broadcasts_a_cancel_and_the_asset_loader_hears_it() -> None:
    subject = subjects.signal("tool.cancel_requested")
    assert {u for u in perms.USERS if may_publish(u, subject)} == {"tool_runner"}
    assert may_subscribe("asset_loader", subject)  # a cancelled call's workflows stop


def test_the_client_reads_the_token_ledger_but_does_not_write_it() -> None:
    bucket = "jido_llm_ledger"
    assert may_publish("client", f"$JS.API.DIRECT.GET.KV_{bucket}.$KV.{bucket}.x")
    assert not may_publish("client", f"$KV.{bucket}.x")
