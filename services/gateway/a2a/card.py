"""The agent cards of one project (A2A v1.0 ``AgentCard``): public and extended.

The **public card** (:func:`build_public_card`, served without the token at the
well-known paths, decision 0342) says only what any A2A agent must: a generic
name and description, one interface per binding under
``<base>/projects/<project_id>/a2a/`` (for protocol v1.0, and again for v0.3
clients), the general ``conversation`` skill, the bearer scheme, and that an
authenticated extended card exists. It names no project, path, skill, command,
workflow or tool.

The **extended card** (:func:`build_card`, ``GetExtendedAgentCard``, only with the
token) adds the project: name and description from its folder and root, one
skill per project skill, slash command and workflow (asset loader) and the tool
set as a capability (the extension :data:`TOOLS_EXTENSION`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import PurePath
from typing import Any, Final

from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentExtension,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from a2a.utils.constants import PROTOCOL_VERSION_0_3, PROTOCOL_VERSION_CURRENT, TransportProtocol
from google.protobuf.struct_pb2 import Struct

from jidocode.shared.events.engine import ProjectInfo
from jidocode.shared.events.tools import ToolSpec

__all__ = [
    "JSONRPC_PATH",
    "REST_PATH",
    "SECURITY_SCHEME",
    "TOOLS_EXTENSION",
    "build_card",
    "build_public_card",
    "is_card_path",
    "project_base",
]

#: Below ``/projects/<project_id>``: where each binding answers.
JSONRPC_PATH: Final = "/a2a/jsonrpc"
REST_PATH: Final = "/a2a/rest"
#: The name of the bearer scheme in the card.
SECURITY_SCHEME: Final = "bearer"
#: The card extension listing the project's tool set (``params.tools``: name, description).
TOOLS_EXTENSION: Final = "urn:jidocode:a2a:tools:v1"
#: Every path a card (or the 404 saying where cards are) is served at: the gateway's root, and
#: under a project's base URL ``/projects/<p>/`` or ``/projects/<p>/a2a/`` with or without the
#: slash (a client joining ``<base>/`` and ``/.well-known/…`` asks for ``//.well-known/…``).
_CARD_PATH: Final = re.compile(r"(?:/projects(?:/[^/]+(?:/a2a)?/?)?)?/\.well-known/agent-card\.json")
#: The public card's one skill, and the extended card's first (what every project's agent does).
_CONVERSATION_SKILL: Final = AgentSkill(
    id="conversation",
    name="Coding conversation",
    description="Ask about the project or have work done in it: the agent reads, searches, edits "
    "and runs commands under the project's policy; tool calls the policy marks 'ask' wait "
    "for your answer (input-required).",
    tags=["coding", "conversation"],
)
#: Asset kinds shown as skills, each with its own id prefix (``skill:``, ``command:``, ``workflow:``).
_ASSET_KINDS: Final = frozenset({"skill", "command", "workflow"})


def _version() -> str:
    try:
        return version("jidocode")
    except PackageNotFoundError:
        return "0"


def project_base(base_url: str, project_id: str) -> str:
    """``<base>/projects/<project_id>`` (``base_url`` with or without its trailing slash)."""
    return f"{base_url.rstrip('/')}/projects/{project_id}"


def is_card_path(path: str) -> bool:
    """Whether ``path`` is one of the paths an agent card is asked at (served without the token)."""
    return _CARD_PATH.fullmatch(path) is not None


def _skills(items: Iterable[Mapping[str, Any]]) -> list[AgentSkill]:
    skills = [_CONVERSATION_SKILL]
    for item in items:
        name = str(item.get("name") or "")
        kind = str(item.get("type") or "skill")
        if not name or kind not in _ASSET_KINDS:
            continue
        skills.append(
            AgentSkill(
                id=f"{kind}:{name}",
                name=f"/{name}" if kind == "command" else name,
                description=str(item.get("description") or name),
                tags=[kind, str(item.get("layer") or "project")],
                examples=[f"/{name}"] if kind == "command" else [],
            )
        )
    return skills


def _tools_extension(tools: Iterable[ToolSpec]) -> AgentExtension:
    """The tool set the policy shows the model, as a (non-required) card extension."""
    params = Struct()
    params.update({"tools": [{"name": t.name, "description": t.description} for t in tools]})
    return AgentExtension(
        uri=TOOLS_EXTENSION,
        description="The tools the agent works with in this project (those the project's policy "
        "shows the model); informational, nothing to negotiate.",
        required=False,
        params=params,
    )


def _interfaces(base: str) -> list[AgentInterface]:
    """One interface per binding under ``base`` for v1.0 (what clients pick), then the same
    endpoints for v0.3 clients (the SDK's compatibility layer answers both; the card's v0.3
    fields name the first of these)."""
    return [
        AgentInterface(url=base + path, protocol_binding=binding.value, protocol_version=version)
        for version in (PROTOCOL_VERSION_CURRENT, PROTOCOL_VERSION_0_3)
        for path, binding in (
            (JSONRPC_PATH, TransportProtocol.JSONRPC),
            (REST_PATH, TransportProtocol.HTTP_JSON),
        )
    ]


def _bearer(description: str) -> dict[str, Any]:
    """The card fields declaring the gateway's bearer scheme, required for every call."""
    scheme = SecurityScheme(
        http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="Bearer", description=description)
    )
    return {
        "security_schemes": {SECURITY_SCHEME: scheme},
        "security_requirements": [SecurityRequirement(schemes={SECURITY_SCHEME: StringList()})],
    }


def build_public_card(base_url: str, project_id: str) -> AgentCard:
    """The card anyone may read (decision 0342): what the agent is, where and how to call it,
    and nothing of the project or the machine; :func:`build_card` is the extended one."""
    return AgentCard(
        name="JidoCode",
        description="A coding assistant (JidoCode) working in one project through its tools and "
        "policy; every task is one conversation. Calls need the bearer scheme below; with it, "
        "GetExtendedAgentCard returns the full card (the project's skills, commands, workflows "
        "and tools).",
        version=_version(),
        supported_interfaces=_interfaces(project_base(base_url, project_id)),
        capabilities=AgentCapabilities(streaming=True, push_notifications=False, extended_agent_card=True),
        **_bearer("The gateway's access key, as `jidocode up` prints it."),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain", "application/json"],
        skills=[_CONVERSATION_SKILL],
    )


def build_card(
    project: ProjectInfo,
    base_url: str,
    assets: Iterable[Mapping[str, Any]],
    tools: Iterable[ToolSpec] = (),
) -> AgentCard:
    """The extended card of ``project`` as served from ``base_url`` (the gateway's external URL):
    ``assets`` the asset loader's list (skills, commands, workflows), ``tools`` the tool set."""
    folder = PurePath(project.root_path).name or project.root_path
    return AgentCard(
        name=f"JidoCode: {folder}",
        description=f"A coding assistant working in the project {folder} ({project.root_path}), "
        "through JidoCode's tools and policy. Every task is one conversation.",
        version=_version(),
        supported_interfaces=_interfaces(project_base(base_url, project.project_id)),
        capabilities=AgentCapabilities(
            streaming=True,
            push_notifications=False,
            extended_agent_card=True,
            extensions=[_tools_extension(tools)],
        ),
        **_bearer("The gateway's token (printed by `jidocode up`, kept in <data home>/gateway/token)."),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain", "application/json"],
        skills=_skills(assets),
    )
