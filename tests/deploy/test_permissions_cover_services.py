"""Every subject a service's code reaches lies inside what its NATS user may publish or subscribe to.
A static guard over the sources (the compose-shaped run proves the paths it drives). A service reaches
subjects three ways, and the guard reads all three:

- ``subjects.<builder>(…)``: arguments that are not literals are replaced by a sample id (``X1``) or a
  sample event type (``x.y``), so ``subjects.conversation_out(p, c, entry.type)`` checks the general case;
- ``endpoint("<service>", "<verb>")`` of the endpoint table: its own endpoints must be subscribable
  (``host.serve``), another service's requestable;
- the typed clients (``AssetsClient(bus, p).tools()``, or a client bound to a name and called later):
  each method called is mapped to the endpoint verbs it requests, read from the client's source; a client
  whose calls the guard cannot see counts as requesting every endpoint of its service.
"""

from __future__ import annotations

import ast
import functools
import inspect
import re
from pathlib import Path

import pytest

from jidocode.shared import clients, subjects
from jidocode.shared import nats_permissions as perms
from jidocode.shared.endpoints import endpoint, endpoints_of

from .natsutil import may_publish, may_subscribe

ROOT = Path(__file__).resolve().parents[2]
_BUILDERS = (
    "engine|project|conversations|tools|assets|conversation_in|conversation_out|journal|signal|hook|srv|"
    "project_pattern|conversations_pattern|tools_pattern|assets_pattern|conversation_in_filter|"
    "conversation_out_filter|journal_filter|signal_filter|hook_filter"
)
_CALL = re.compile(rf"subjects\.({_BUILDERS})\(([^()]*)\)")
_LITERAL = re.compile(r"""(?:\w+=)?\s*(['"])([^'"]*)\1""")


def _evaluate(builder: str, args: str) -> str | None:
    values = []
    for raw in (a.strip() for a in args.split(",") if a.strip()):
        literal = _LITERAL.fullmatch(raw)
        values.append(literal.group(2) if literal else None)
    fn = getattr(subjects, builder)
    for filler in ("X1", "x.y"):
        try:
            return str(fn(*[filler if v is None else v for v in values]))
        except ValueError:
            continue
    return None


#: Which service each typed client talks to.
_CLIENTS: dict[str, str] = {name: getattr(clients, name).service for name in clients.__all__}
_ENDPOINT = re.compile(r"""\bendpoint\(\s*(['"])(\w+)\1\s*,\s*(['"])(\w+)\3\s*\)""")
_CLIENT_NAMES = "|".join(_CLIENTS)
_CHAINED = re.compile(rf"\b({_CLIENT_NAMES})\((?:[^()]|\([^()]*\))*\)\s*\.(\w+)\(")
_BOUND = re.compile(rf"([\w.]+)\s*(?::[^=\n]*)?=\s*({_CLIENT_NAMES})\(")
_CONSTRUCTED = re.compile(rf"\b({_CLIENT_NAMES})\(")


@functools.cache
def _client_methods(client: str) -> dict[str, tuple[frozenset[str], frozenset[str]]]:
    """Each async method of ``client``: the verbs it requests itself and the ``self.<m>(…)`` it calls."""
    source = Path(inspect.getfile(getattr(clients, client))).read_text()
    [cls] = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef) and n.name == client]
    methods = {}
    for fn in cls.body:
        if not isinstance(fn, ast.AsyncFunctionDef):
            continue
        verbs, calls = set(), set()
        for node in ast.walk(fn):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            target = node.func
            if not (isinstance(target.value, ast.Name) and target.value.id == "self"):
                continue
            if target.attr in ("_scoped", "_call") and node.args and isinstance(node.args[0], ast.Constant):
                verbs.add(str(node.args[0].value))
            else:
                calls.add(target.attr)
        methods[fn.name] = (frozenset(verbs), frozenset(calls))
    return methods


def _verbs(client: str, method: str, _seen: frozenset[str] = frozenset()) -> frozenset[str]:
    """The endpoint verbs ``client.method`` requests, read from its source (following ``self.<m>(…)``)."""
    methods = _client_methods(client)
    if method not in methods or method in _seen:
        return frozenset()
    verbs, calls = methods[method]
    for other in calls:
        verbs |= _verbs(client, other, _seen | {method})
    return verbs


def _subject(service: str, verb: str) -> str:
    ep = endpoint(service, verb)
    return ep.subject("X1") if ep.scoped else ep.subject()


def _client_requests(text: str) -> list[tuple[str, str]]:
    """``(call, subject)`` for every endpoint the typed clients in ``text`` request."""
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for match in _CHAINED.finditer(text):
        client, method = match.group(1), match.group(2)
        seen.add(client)
        out += [(f"{client}(…).{method}(", _subject(_CLIENTS[client], v)) for v in _verbs(client, method)]
    for match in _BOUND.finditer(text):
        name, client = match.group(1), match.group(2)
        methods = re.findall(rf"(?<![\w.]){re.escape(name)}\.(\w+)\(", text)
        verbs = {v for m in methods for v in _verbs(client, m)}
        if verbs:
            seen.add(client)
        out += [(f"{name} = {client}(…); {name}.…(", _subject(_CLIENTS[client], v)) for v in sorted(verbs)]
    for client in {m.group(1) for m in _CONSTRUCTED.finditer(text)} - seen:
        # constructed, but the guard cannot see which methods are called: assume every endpoint
        out += [(f"{client}(…)", _subject(_CLIENTS[client], e.verb)) for e in endpoints_of(_CLIENTS[client])]
    return out


def _table_endpoints(service: str, text: str) -> list[tuple[str, str, str]]:
    """``(call, subject, "serve"|"request")`` for every ``endpoint("svc", "verb")`` in ``text``."""
    out = []
    for match in _ENDPOINT.finditer(text):
        ep = endpoint(match.group(2), match.group(4))
        if ep.service == service:
            out.append((match.group(0), ep.pattern(), "serve"))
        else:
            out.append((match.group(0), _subject(ep.service, ep.verb), "request"))
    return out


def _reached(service: str, text: str) -> list[tuple[str, str, str]]:
    """``(call, subject, how)`` for every subject ``text`` (a source of ``service``) reaches."""
    out = []
    for match in _CALL.finditer(text):
        subject = _evaluate(match.group(1), match.group(2))
        if subject is not None:
            out.append((match.group(0), subject, "any"))
    out += _table_endpoints(service, text)
    out += [(call, subject, "request") for call, subject in _client_requests(text)]
    return out


def _calls(service: str) -> list[tuple[str, str, str, str]]:
    out = []
    for path in sorted((ROOT / "services" / service).rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        out += [(rel, call, subject, how) for call, subject, how in _reached(service, path.read_text())]
    return out


def _permitted(service: str, subject: str, how: str) -> bool:
    if how == "serve":
        return may_subscribe(service, subject)
    if how == "request":
        return may_publish(service, subject)
    return may_publish(service, subject) or may_subscribe(service, subject)


@pytest.mark.parametrize("service", perms.SERVICES)
def test_every_subject_a_service_reaches_is_within_its_permissions(service: str) -> None:
    calls = _calls(service)
    assert calls, (
        f"the guard sees no subject in services/{service}: has the way services reach the bus changed?"
    )
    outside = [
        f"{path}: {call} -> {how} {subject}"
        for path, call, subject, how in calls
        if not _permitted(service, subject, how)
    ]
    assert not outside, "\n".join(outside)


def test_the_guard_sees_a_violation() -> None:
    subject = _evaluate("conversation_in", '"p1", "c1"')
    assert subject == subjects.conversation_in("p1", "c1")
    assert subject is not None
    assert not (may_publish("asset_loader", subject) or may_subscribe("asset_loader", subject))
    assert _evaluate("conversation_out", "p, c, entry.type") == subjects.conversation_out("X1", "X1", "X1")


def test_the_guard_reads_typed_clients_and_the_endpoint_table() -> None:
    assert _verbs("ConversationsClient", "send_message") == {"send_event"}
    assert _verbs("ToolsClient", "run") == {"run"}
    assert _verbs("AssetsClient", "tools") == {"tools"}
    source = """
        info = await ProjectClient(self._bus, pid, timeout=t).info()
        client = AssetsClient(self.bus, call.project_id)
        await client.call_tool(call.request, timeout=forward_timeout(call.name, limits))
        ConversationsClient(bus, pid).send_message(cid, "hi")
        handed_over = ToolsClient(bus, pid)
        host.serve(endpoint("asset_loader", "get"), self.get)
        await bus.call(endpoint("conversation", "start").subject(pid), cmd)
    """
    reached = {(subject, how) for _, subject, how in _reached("asset_loader", source)}
    assert reached == {
        (subjects.project("X1", "info"), "request"),
        (subjects.assets("X1", "call_tool"), "request"),
        (subjects.conversations("X1", "send_event"), "request"),
        (subjects.tools("X1", "run"), "request"),
        (subjects.tools("X1", "cancel"), "request"),
        (subjects.tools("X1", "mcp_tools"), "request"),
        (subjects.tools("X1", "mcp_servers"), "request"),
        (subjects.tools("X1", "checkpoints_list"), "request"),
        (subjects.tools("X1", "checkpoints_diff"), "request"),
        (subjects.tools("X1", "checkpoints_restore"), "request"),
        (subjects.assets_pattern("get"), "serve"),
        (subjects.conversations("X1", "start"), "request"),
    }
    # ... and flags what the asset loader's user may not do
    outside = {subject for subject, how in reached if not _permitted("asset_loader", subject, how)}
    assert outside == {
        subjects.project("X1", "info"),
        subjects.assets("X1", "call_tool"),
        subjects.conversations("X1", "send_event"),
        subjects.conversations("X1", "start"),
        subjects.tools("X1", "cancel"),
        subjects.tools("X1", "mcp_tools"),
        subjects.tools("X1", "mcp_servers"),
        subjects.tools("X1", "checkpoints_list"),
        subjects.tools("X1", "checkpoints_diff"),
        subjects.tools("X1", "checkpoints_restore"),
    }
