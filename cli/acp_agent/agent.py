"""The ACP agent: the editor's requests on the running system's projects and conversations.

``initialize`` offers ``session/load`` and text prompts with embedded and linked files;
``session/new`` opens the project at its ``cwd`` (started if it is not, trust-checked: an
untrusted folder is said so, on stderr and as the first words of the first answer, as
``jidocode chat`` without a terminal says it, and the assistant may only read there) and starts
a conversation whose id is the session id; ``session/load`` reopens a conversation of that
project by its id and replays its messages; ``session/prompt`` and ``session/cancel`` go to
the session (:mod:`.session`). Every session shares the command's one NATS connection.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from acp import PROTOCOL_VERSION, RequestError
from acp.interfaces import Client
from acp.schema import (
    AgentCapabilities,
    ClientCapabilities,
    Implementation,
    InitializeResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PromptCapabilities,
    PromptResponse,
)

from jidocode.client import JidoClient
from jidocode.shared.bus import Bus
from jidocode.shared.config import Config
from jidocode.shared.errors import JidoError

from .session import AcpSession, PromptBlock, error_of, invalid

__all__ = ["JidoAcpAgent"]

log = logging.getLogger("jidocode.cli.acp")


class JidoAcpAgent:
    """The ``acp.Agent`` of ``jidocode acp`` (the SDK routes each method here by name)."""

    def __init__(self, bus: Bus, config: Config) -> None:
        self.bus = bus
        self.config = config
        self.sessions: dict[str, AcpSession] = {}
        self.read_buffers = False
        self._conn: Client | None = None

    def on_connect(self, conn: Client) -> None:
        self._conn = conn

    @property
    def conn(self) -> Client:
        assert self._conn is not None, "the SDK connects the agent before any request"
        return self._conn

    async def close(self) -> None:
        """Stop following every session's conversation (the conversations go on)."""
        for session in list(self.sessions.values()):
            await session.close()
        self.sessions.clear()

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: ClientCapabilities | None = None,
        client_info: Implementation | None = None,
        **kwargs: Any,
    ) -> InitializeResponse:
        fs = client_capabilities.fs if client_capabilities is not None else None
        self.read_buffers = bool(fs is not None and fs.read_text_file)
        log.info("editor %s (protocol %s)", client_info.name if client_info else "?", protocol_version)
        return InitializeResponse(
            protocol_version=min(protocol_version, PROTOCOL_VERSION),
            agent_capabilities=AgentCapabilities(
                load_session=True,
                prompt_capabilities=PromptCapabilities(embedded_context=True),
            ),
            agent_info=Implementation(name="jidocode", title="JidoCode", version=_version()),
        )

    async def authenticate(self, method_id: str, **kwargs: Any) -> None:
        """No login: the system's own users and keys apply (none is offered in ``initialize``)."""
        return None

    async def new_session(
        self, cwd: str, mcp_servers: list[Any] | None = None, **kwargs: Any
    ) -> NewSessionResponse:
        session = await self._open(cwd, None)
        session.announce_commands()
        return NewSessionResponse(session_id=session.session_id)

    async def load_session(
        self, cwd: str, session_id: str, mcp_servers: list[Any] | None = None, **kwargs: Any
    ) -> LoadSessionResponse:
        session = await self._open(cwd, session_id)
        await session.replay_history()
        session.announce_commands()
        return LoadSessionResponse()

    async def prompt(self, session_id: str, prompt: list[PromptBlock], **kwargs: Any) -> PromptResponse:
        return await self._session(session_id).prompt(prompt)

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        session = self.sessions.get(session_id)
        if session is None:
            log.warning("cancel of unknown session %s ignored", session_id)
            return
        try:
            await session.cancel()
        except JidoError as exc:
            log.warning("cancel of session %s failed: %s", session_id, exc.message)

    def _session(self, session_id: str) -> AcpSession:
        session = self.sessions.get(session_id)
        if session is None:
            raise invalid(f"no session {session_id!r} here: create one with session/new or session/load")
        return session

    async def _open(self, cwd: str, conversation_id: str | None) -> AcpSession:
        """The session on the project at ``cwd``: a new conversation, or the one named (it must exist)."""
        if not os.path.isabs(cwd):
            raise invalid(f"cwd must be an absolute path, not {cwd!r}")
        if not os.path.isdir(cwd):
            raise invalid(f"cwd {cwd!r} is not a directory")
        try:
            client = await JidoClient.connect(project_dir=cwd, bus=self.bus, config=self.config)
        except JidoError as exc:
            raise error_of(exc) from None
        try:
            if conversation_id is not None:
                await _check_conversation(client, conversation_id)
            old = self.sessions.get(conversation_id or "")
            if old is not None:
                await old.close()
            session = await AcpSession.open(
                self.conn, client, conversation_id, read_buffers=self.read_buffers
            )
        except JidoError as exc:
            await client.close()
            raise error_of(exc) from None
        except BaseException:
            await client.close()
            raise
        self.sessions[session.session_id] = session
        log.info("session %s on project %s (%s)", session.session_id, client.project_id, client.root_path)
        return session


async def _check_conversation(client: JidoClient, conversation_id: str) -> None:
    """Raise unless the project has the conversation ``conversation_id`` (load never creates one)."""
    try:
        listed = await client.conversations.list(conversation_id=conversation_id)
    except ValueError as exc:  # not a subject token
        raise invalid(str(exc)) from None
    if not listed.conversations:
        raise RequestError(
            -32002,
            f"not_found: the project at {client.root_path} has no conversation {conversation_id!r}",
            {"session_id": conversation_id},
        )


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("jidocode")
    except PackageNotFoundError:
        return "0"
