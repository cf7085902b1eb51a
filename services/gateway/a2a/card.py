"""The agent card of one project (A2A v1.0 ``AgentCard``).

Name and description from the project (its folder and root), one skill per
project skill, slash command and workflow (asset loader) after a general
``conversation`` skill, the tool set as a capability (the extension
:data:`TOOLS_EXTENSION`), one interface per binding under ``<base>/projects/<project_id>/a2a/`` (for
protocol v1.0, and again for v0.3 clients), and
the gateway's bearer token as the one security scheme.
"""

from __future__ import annotations

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

__all__ = ["JSONRPC_PATH", "REST_PATH", "SECURITY_SCHEME", "TOOLS_EXTENSION", "build_card", "project_base"]

#: Below ``/projects/<project_id>``: where each binding answers.
JSONRPC_PATH: Final = "/a2a/jsonrpc"
REST_PATH: Final = "/a2a/rest"
#: The name of the bearer scheme in the card.
SECURITY_SCHEME: Final = "bearer"
#: The card extension listing the project's tool set (``params.tools``: name, description).
TOOLS_EXTENSION: Final = "urn:jidocode:a2a:tools:v1"
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


def _skills(items: Iterable[Mapping[str, Any]]) -> list[AgentSkill]:
    skills = [
        AgentSkill(
            id="conversation",
            name="Coding conversation",
            description="Ask about the project or have work done in it: the agent reads, searches, edits "
            "and runs commands under the project's policy; tool calls the policy marks 'ask' wait "
            "for your answer (input-required).",
            tags=["coding", "conversation"],
        )
    ]
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


def build_card(
    project: ProjectInfo,
    base_url: str,
    assets: Iterable[Mapping[str, Any]],
    tools: Iterable[ToolSpec] = (),
) -> AgentCard:
    """The card of ``project`` as served from ``base_url`` (the gateway's external URL):
    ``assets`` the asset loader's list (skills, commands, workflows), ``tools`` the tool set."""
    base = project_base(base_url, project.project_id)
    folder = PurePath(project.root_path).name or project.root_path
    return AgentCard(
        name=f"JidoCode: {folder}",
        description=f"A coding assistant working in the project {folder} ({project.root_path}), "
        "through JidoCode's tools and policy. Every task is one conversation.",
        version=_version(),
        # v1.0 first (what clients pick), then the same endpoints for v0.3 clients (the SDK's
        # compatibility layer answers both; the card's v0.3 fields name the first of these)
        supported_interfaces=[
            AgentInterface(url=base + path, protocol_binding=binding.value, protocol_version=version)
            for version in (PROTOCOL_VERSION_CURRENT, PROTOCOL_VERSION_0_3)
            for path, binding in (
                (JSONRPC_PATH, TransportProtocol.JSONRPC),
                (REST_PATH, TransportProtocol.HTTP_JSON),
            )
        ],
        capabilities=AgentCapabilities(
            streaming=True,
            push_notifications=False,
            extended_agent_card=False,
            extensions=[_tools_extension(tools)],
        ),
        security_schemes={
            SECURITY_SCHEME: SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(
                    scheme="Bearer",
                    description="The gateway's token (printed by `jidocode up`, kept in "
                    "<data home>/gateway/token); the card itself needs it too.",
                )
            )
        },
        security_requirements=[SecurityRequirement(schemes={SECURITY_SCHEME: StringList()})],
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain", "application/json"],
        skills=_skills(assets),
    )
