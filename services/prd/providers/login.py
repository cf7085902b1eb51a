"""A provider CLI's own login: the files it reads under the home and the hosts it talks to.

Each CLI flavor declares a :class:`Login` (:mod:`.codex`, :mod:`.claude`, :mod:`.gemini`). None
of it is used until the user turns it on for that provider, in their own settings only
(``prd.providers.<key>.use_login = true``: a project's layer cannot, see
``services/prd/config.py``). Then, for that provider's process only:

- the declared files that exist are readable, **read-only**, at their place under the home
  (:func:`login_files`); nothing else of the home is (the sandbox's home stays empty);
- its network is the egress proxy, which lets it reach the declared domains (its API and login
  hosts) through a pass opened for the run (:data:`EgressOpener`, given by whoever runs the
  loop); nothing else. Without an opener the CLI gets no proxy: its network is then what the
  user's ``sandbox.network`` says, as before.

Without ``use_login`` the CLI runs as before: an empty home, credentials only through
``providers.<key>.env``. See docs/prd-providers.md ("Logins").
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Final

from jidocode.shared.sandbox import Egress

__all__ = ["CLAUDE", "CODEX", "GEMINI", "NO_LOGIN", "EgressOpener", "Login", "login_files"]

#: ``(provider key, domains) -> async context of an Egress``: a pass of the egress proxy that
#: lets one run reach ``domains`` (and what the user's rules allow), closed when the run ends.
EgressOpener = Callable[[str, tuple[str, ...]], AbstractAsyncContextManager[Egress]]


@dataclass(frozen=True)
class Login:
    """What a CLI's own login needs: ``files`` (relative to the home) it reads, ``domains`` it reaches."""

    files: tuple[str, ...] = ()
    domains: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for rel in self.files:
            if os.path.isabs(rel) or ".." in rel.split("/"):
                raise ValueError(f"a login file is a path under the home, not {rel!r}")


#: A CLI without a login of its own to open.
NO_LOGIN: Final = Login()
#: ``codex login`` (ChatGPT or an API key): ``$CODEX_HOME/auth.json``; the API, ChatGPT's backend
#: (a ChatGPT login) and the token refresh.
CODEX: Final = Login(
    files=(".codex/auth.json",),
    domains=("api.openai.com", "chatgpt.com", "auth.openai.com"),
)
#: ``claude`` (``/login``): ``~/.claude/.credentials.json`` on Linux; the API and the OAuth refresh.
CLAUDE: Final = Login(
    files=(".claude/.credentials.json",),
    domains=("api.anthropic.com", "console.anthropic.com", "claude.ai"),
)
#: ``gemini`` (Login with Google): the OAuth tokens, the account, and the settings that say which
#: login is selected; the Gemini API, Code Assist (a Google login) and the token refresh.
GEMINI: Final = Login(
    files=(".gemini/oauth_creds.json", ".gemini/google_accounts.json", ".gemini/settings.json"),
    domains=("generativelanguage.googleapis.com", "cloudcode-pa.googleapis.com", "oauth2.googleapis.com"),
)


def login_files(login: Login, home: str) -> list[str]:
    """The declared files that exist under ``home``, absolute; one that leads out of the home
    (a link elsewhere) is left out: the login opens the CLI's own files, nothing more."""
    real_home = os.path.realpath(home)
    out: list[str] = []
    for rel in login.files:
        path = os.path.join(home, rel)
        real = os.path.realpath(path)
        if os.path.isfile(real) and os.path.commonpath([real, real_home]) == real_home:
            out.append(path)
    return out
