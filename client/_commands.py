"""Slash commands typed by a user: ``/name arguments`` (pure).

A project's commands are ``commands/<name>.md`` assets (seed 000
``Loaders.Command``); their names are slugs (``a-z``, ``0-9``, single
hyphens, at most 64 characters). :func:`parse_slash_command` recognises
``/name`` or ``/name arguments`` with such a name and nothing else, so a line
that only starts with a slash (``/etc/hosts is empty?``) stays a message.
"""

from __future__ import annotations

import re
from typing import Final

from pydantic import BaseModel, ConfigDict

__all__ = ["MAX_COMMAND_NAME", "RenderedCommand", "SlashCommand", "is_command_name", "parse_slash_command"]

#: The longest command name (the asset loader's slug limit).
MAX_COMMAND_NAME: Final = 64
_NAME: Final = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
#: ``/`` then the name up to the first whitespace, then the arguments (any lines).
_LINE: Final = re.compile(r"/(\S+)(?:\s+(.*))?", re.DOTALL)


class SlashCommand(BaseModel):
    """``/name arguments``: ``arguments`` is the rest of the line(s), stripped (may be empty)."""

    model_config = ConfigDict(frozen=True)

    name: str
    arguments: str = ""


class RenderedCommand(BaseModel):
    """A project command rendered with its arguments: the prompt sent as the user's message."""

    model_config = ConfigDict(frozen=True)

    name: str
    arguments: str = ""
    prompt: str
    #: The model the command's frontmatter names, if any (informational: the conversation's model answers).
    model: str | None = None


def is_command_name(name: str) -> bool:
    """Whether ``name`` can name a project command (a slug of at most 64 characters)."""
    return 0 < len(name) <= MAX_COMMAND_NAME and _NAME.fullmatch(name) is not None


def parse_slash_command(text: str) -> SlashCommand | None:
    """``text`` as a slash command, or ``None`` when it is not one (then it is a plain message)."""
    found = _LINE.fullmatch(text.strip())
    if found is None or not is_command_name(found.group(1)):
        return None
    return SlashCommand(name=found.group(1), arguments=(found.group(2) or "").strip())
