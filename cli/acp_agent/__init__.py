"""`jidocode acp`: the Agent Client Protocol agent (editors: Zed, JetBrains, Neovim plugins).

:mod:`.server` serves it on stdio, :mod:`.agent` answers the editor's requests, :mod:`.session`
runs one session on one conversation, :mod:`.mapping` says what the conversation's events are
in ACP terms. See ``docs/acp.md`` and decision 0333.
"""

from .server import serve_stdio

__all__ = ["serve_stdio"]
