"""The typed contract: every command names a catalogue reply, every endpoint is one row of one table."""

from __future__ import annotations

import pytest

from jidocode.shared import subjects
from jidocode.shared.endpoints import ENDPOINTS, Endpoint, endpoint, endpoints_of
from jidocode.shared.events import ALL_EVENTS, COMMANDS, Command, EventModel, event_class
from jidocode.shared.events.assets import AssetDocument, GetAsset
from jidocode.shared.events.conversation import SendEvent
from jidocode.shared.events.engine import GetProject, ListProjects, ProjectInfo, ProjectList, StartProject

P = "01PROJ"

#: Which scope (the subject's second token) each service answers on.
SCOPE_OF = {
    "engine": "engine",
    "project": "project",
    "conversation": "conversations",
    "tool_runner": "tools",
    "asset_loader": "assets",
    "prd": "prds",
}


def _name(cls: type[EventModel]) -> str:
    return cls.__name__


@pytest.mark.parametrize("command", COMMANDS, ids=_name)
def test_every_command_names_a_catalogue_reply(command: type[Command[EventModel]]) -> None:
    reply = command.reply
    assert reply in ALL_EVENTS and reply.channel == "reply"
    reply_type = reply.model_fields["type"].default
    assert event_class(reply_type) is reply
    assert reply_type != command.model_fields["type"].default
    assert not issubclass(reply, Command)


def test_commands_are_exactly_the_command_channel_of_the_catalogue() -> None:
    assert set(COMMANDS) == {c for c in ALL_EVENTS if c.channel == "command"}
    assert {c.channel for c in ALL_EVENTS} <= {
        "signal",
        "conversation",
        "command",
        "reply",
        "hook",
        "trace",
        "prd",
    }


def test_the_reply_is_the_generic_argument() -> None:
    assert StartProject.reply is ProjectInfo and ListProjects.reply is ProjectList
    assert GetAsset.reply is AssetDocument


@pytest.mark.parametrize("command", COMMANDS, ids=_name)
def test_every_command_is_served_by_some_endpoint(command: type[Command[EventModel]]) -> None:
    assert any(e.command is command for e in ENDPOINTS), f"nobody serves {command.__name__}"


@pytest.mark.parametrize("ep", ENDPOINTS, ids=lambda e: f"{e.service}.{e.verb}")
def test_every_endpoint_is_served_by_the_service_it_names(ep: Endpoint) -> None:
    assert ep.service in subjects.SERVICE_NAMES
    assert ep.scope == SCOPE_OF[ep.service]
    assert endpoint(ep.service, ep.verb) is ep
    assert ep in endpoints_of(ep.service)
    assert [e.service for e in ENDPOINTS if e.pattern() == ep.pattern()] == [ep.service]
    assert ep.request_type == ep.command.model_fields["type"].default
    assert ep.reply_type == ep.command.reply.model_fields["type"].default


def test_endpoints_of_partitions_the_table() -> None:
    by_service = [e for name in subjects.SERVICE_NAMES for e in endpoints_of(name)]
    assert sorted(by_service, key=ENDPOINTS.index) == list(ENDPOINTS)
    assert len(set(by_service)) == len(ENDPOINTS)
    assert endpoints_of("nope") == ()


def _matches(pattern: str, subject: str) -> bool:
    """NATS matching of a pattern with ``*`` tokens (the endpoints use no ``>``)."""
    ptoks, stoks = pattern.split("."), subject.split(".")
    return len(ptoks) == len(stoks) and all(p in ("*", s) for p, s in zip(ptoks, stoks, strict=True))


@pytest.mark.parametrize("ep", ENDPOINTS, ids=lambda e: f"{e.service}.{e.verb}")
def test_each_subject_matches_its_own_pattern_and_no_other(ep: Endpoint) -> None:
    subject = ep.subject(P) if ep.scoped else ep.subject()
    assert [e for e in ENDPOINTS if _matches(e.pattern(), subject)] == [ep]


SUBJECT_TABLE = [
    (("engine", "start_project"), None, "jido.engine.start_project", "jido.engine.start_project"),
    (("engine", "whereis_project"), None, "jido.engine.whereis_project", "jido.engine.whereis_project"),
    (("project", "info"), P, "jido.project.01PROJ.info", "jido.project.*.info"),
    (("project", "list_tools"), P, "jido.project.01PROJ.list_tools", "jido.project.*.list_tools"),
    (("conversation", "start"), P, "jido.conversations.01PROJ.start", "jido.conversations.*.start"),
    (
        ("conversation", "send_event"),
        P,
        "jido.conversations.01PROJ.send_event",
        "jido.conversations.*.send_event",
    ),
    (("conversation", "replay"), P, "jido.conversations.01PROJ.replay", "jido.conversations.*.replay"),
    (("tool_runner", "run"), P, "jido.tools.01PROJ.run", "jido.tools.*.run"),
    (("tool_runner", "cancel"), P, "jido.tools.01PROJ.cancel", "jido.tools.*.cancel"),
    (("asset_loader", "get"), P, "jido.assets.01PROJ.get", "jido.assets.*.get"),
    (("asset_loader", "call_tool"), P, "jido.assets.01PROJ.call_tool", "jido.assets.*.call_tool"),
]


@pytest.mark.parametrize(("key", "project_id", "subject", "pattern"), SUBJECT_TABLE)
def test_subject_and_pattern_table(
    key: tuple[str, str], project_id: str | None, subject: str, pattern: str
) -> None:
    ep = endpoint(*key)
    assert ep.subject(project_id) == subject
    assert ep.pattern() == pattern
    assert ep.scoped is (project_id is not None)


def test_request_and_reply_types() -> None:
    ep = endpoint("conversation", "send_event")
    assert ep.command is SendEvent
    assert (ep.request_type, ep.reply_type) == ("conversation.cmd.send_event", "conversation.event_accepted")
    assert (endpoint("project", "info").request_type, endpoint("project", "info").reply_type) == (
        "project.get",
        "project.info",
    )


def test_the_project_service_no_longer_forwards_conversations() -> None:
    # reload_assets is the seed's Project.Server verb, forwarded to the asset loader
    assert {e.verb for e in endpoints_of("project")} == {"info", "list_tools", "policy", "reload_assets"}
    assert {e.verb for e in endpoints_of("conversation")} == {
        "start",
        "stop",
        "list",
        "delete",
        "prune",
        "send_event",
        "get_projection",
        "replay",
        "rewind",
    }


@pytest.mark.parametrize("bad", ["", "a.b", "*", ">", "a b", "a>", "x" * 129])
@pytest.mark.parametrize("key", [("project", "info"), ("conversation", "start"), ("asset_loader", "get")])
def test_a_bad_project_id_is_a_value_error(key: tuple[str, str], bad: str) -> None:
    with pytest.raises(ValueError, match="invalid project id"):
        endpoint(*key).subject(bad)


def test_engine_endpoints_take_no_project_and_scoped_ones_need_one() -> None:
    with pytest.raises(ValueError, match="takes no project id"):
        endpoint("engine", "list_projects").subject(P)
    with pytest.raises(ValueError, match=r"tools\.run needs a project id"):
        endpoint("tool_runner", "run").subject()


def test_unknown_endpoints_and_bad_rows_are_refused() -> None:
    with pytest.raises(KeyError, match="service 'engine' has no endpoint 'nope'"):
        endpoint("engine", "nope")
    with pytest.raises(KeyError, match="service 'nope' has no endpoint 'info'"):
        endpoint("nope", "info")
    with pytest.raises(ValueError, match="unknown service 'nope'"):
        Endpoint("nope", "project", "info", GetProject, "x")
    with pytest.raises(ValueError, match="invalid verb"):
        Endpoint("project", "project", "a.b", GetProject, "x")
