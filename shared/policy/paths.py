"""The path sandbox: where a tool may read and write (pure, apart from ``realpath``).

Contract:

- The root is the project's realpath, fixed when the project starts; a tool
  argument never names it.
- A user path is joined to the root (when relative), resolved with
  ``realpath`` (every symlink followed, ``..`` collapsed) and compared with the
  root **by path components**, so ``/proj-evil`` is not inside ``/proj``.
- A path outside the root is refused unless it lies under one of the
  ``additional_directories`` of the settings.
- A hidden path (JidoCode's data home, the JidoCode home, credential files:
  :func:`jidocode.shared.sandbox.runtime_hidden`, the list the OS sandbox
  hides from commands too) is refused whatever the additional directories
  cover, for reading as for writing; only the project root itself is never
  hidden.
- Sensitive files (``.env``, ``*.pem``, ``id_rsa*`` …) are refused by default.
- Protected files (the runtime's settings, ``.mcp.json``, ``.git`` internals)
  are never created or modified by a tool; reading them is allowed.

The checks run on the resolved path *and* on the path as written, so a
symlink named ``notes`` pointing at ``.git/hooks`` is as protected as the
directory itself. Opening the checked path without following a symlink
swapped in afterwards is the job of :mod:`jidocode.services.tool_runner.fsops`.
"""

from __future__ import annotations

import fnmatch
import os
import unicodedata
from pathlib import PurePosixPath
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict

from jidocode.shared.sandbox import PROTECTED as SANDBOX_PROTECTED
from jidocode.shared.sandbox import hidden_at, runtime_hidden

__all__ = [
    "PROTECTED_DIR_NAMES",
    "PROTECTED_FILE_NAMES",
    "SENSITIVE_DIR_NAMES",
    "SENSITIVE_NAME_PATTERNS",
    "TOOL_RUN_PATHS",
    "Access",
    "PathCheck",
    "PathSandbox",
    "bad_path_chars",
    "is_within",
]

Access = Literal["read", "write"]

#: Basename patterns of files holding secrets (denied by default, read and write).
SENSITIVE_NAME_PATTERNS: Final[tuple[str, ...]] = (
    ".env",
    ".env.*",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "*.jks",
    "*.keystore",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    ".netrc",
    ".pgpass",
    ".pypirc",
    ".npmrc",
    ".git-credentials",
    ".htpasswd",
    "credentials.json",
)
#: Harmless templates that the patterns above would catch.
SENSITIVE_EXCEPTIONS: Final[frozenset[str]] = frozenset(
    {".env.example", ".env.sample", ".env.template", ".env.dist"}
)
#: A directory of this name anywhere in the path makes everything below it sensitive.
SENSITIVE_DIR_NAMES: Final[frozenset[str]] = frozenset({".ssh", ".aws", ".gnupg", ".kube", ".docker"})
#: A directory of this name anywhere in the path: nothing below it may be written.
#: (``.git`` itself is also protected as a *file*: a worktree's ``.git`` file points git elsewhere.)
PROTECTED_DIR_NAMES: Final[frozenset[str]] = frozenset({".git", ".jido_code"})
#: Paths under a project root that other programs run or obey later (the OS sandbox's
#: protected list): never written by a file tool either.
TOOL_RUN_PATHS: Final[tuple[str, ...]] = SANDBOX_PROTECTED
#: Files that configure the runtime or run programs: never written by a tool.
PROTECTED_FILE_NAMES: Final[frozenset[str]] = frozenset(
    {".mcp.json", ".git", ".gitmodules", "settings.json", "settings.local.json"}
)

_SETTINGS_NAMES: Final = frozenset({"settings.json", "settings.local.json"})

# Bidi controls and zero-width characters make a path read differently from what it is.
_BAD_CATEGORIES: Final = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})


def bad_path_chars(path: str) -> list[str]:
    """Characters of ``path`` that have no place in a file name a tool may use.

    NUL and other control characters, bidi overrides, zero-width and private
    use characters (Unicode categories Cc, Cf, Cs, Co, Zl, Zp).
    """
    return sorted({f"U+{ord(ch):04X}" for ch in path if unicodedata.category(ch) in _BAD_CATEGORIES})


def is_within(path: str, base: str) -> bool:
    """``path`` equals ``base`` or lies below it, compared by components (both absolute)."""
    p = PurePosixPath(path).parts
    b = PurePosixPath(base).parts
    return len(p) >= len(b) and p[: len(b)] == b


class PathCheck(BaseModel):
    """The outcome of checking one path: resolved, and allowed or why not."""

    model_config = ConfigDict(frozen=True)

    ok: bool
    path: str
    #: ``outside_root``, ``hidden``, ``sensitive``, ``protected``, ``invalid``; ``None`` when ok.
    reason: str | None = None
    message: str = ""
    #: The directory the path was found under (the root or an additional directory).
    base: str | None = None


class PathSandbox(BaseModel):
    """The sandbox of one project: its root and the outside paths settings allow."""

    model_config = ConfigDict(frozen=True)

    root: str
    additional_directories: tuple[str, ...] = ()
    #: The project's data dir relative to the root (its ``settings*.json`` are protected).
    data_dir: str = ".jido"
    #: The global layer (``~/.jido_code``): protected as a whole.
    jido_home: str | None = None
    #: Paths no tool may read or write, whatever the additional directories say (realpaths).
    hidden: tuple[str, ...] = ()

    @classmethod
    def create(
        cls,
        root: str,
        *,
        additional_directories: tuple[str, ...] | list[str] = (),
        data_dir: str = ".jido",
        jido_home: str | None = None,
        home: str | None = None,
        hidden: tuple[str, ...] | None = None,
    ) -> PathSandbox:
        """Resolve the root and the additional directories once, at project start.

        ``hidden`` defaults to the runtime's one list (the data home, the JidoCode
        home ``jido_home`` or this process's, the credential files of its environment).
        """
        if not os.path.isabs(root):
            raise ValueError(f"project root must be absolute, got {root!r}")
        home_dir = home or os.path.expanduser("~")
        extra: list[str] = []
        for d in additional_directories:
            expanded = home_dir + d[1:] if d == "~" or d.startswith("~/") else d
            if not os.path.isabs(expanded):
                expanded = os.path.join(root, expanded)
            extra.append(os.path.realpath(expanded))
        return cls(
            root=os.path.realpath(root),
            additional_directories=tuple(extra),
            data_dir=data_dir,
            jido_home=os.path.realpath(jido_home) if jido_home else None,
            hidden=runtime_hidden(jido_home=jido_home) if hidden is None else hidden,
        )

    # -- classification (pure) ---------------------------------------------

    def is_sensitive(self, path: str) -> bool:
        parts = PurePosixPath(path).parts
        if any(part in SENSITIVE_DIR_NAMES for part in parts[:-1]):
            return True
        name = parts[-1] if parts else ""
        if name in SENSITIVE_EXCEPTIONS:
            return False
        return any(fnmatch.fnmatchcase(name, pat) for pat in SENSITIVE_NAME_PATTERNS)

    def is_protected(self, path: str) -> bool:
        """Whether a tool may never create or modify ``path`` (absolute, normalised)."""
        pure = PurePosixPath(path)
        parts = pure.parts
        if any(part in PROTECTED_DIR_NAMES for part in parts[:-1]):
            return True
        if self.jido_home and is_within(path, self.jido_home):
            return True
        name = parts[-1] if parts else ""
        if name in PROTECTED_FILE_NAMES - _SETTINGS_NAMES or name in PROTECTED_DIR_NAMES:
            return True
        if name in _SETTINGS_NAMES:
            # only the runtime's own settings: <root>/<data_dir>/, <root>/.jido_code/
            parent = str(pure.parent)
            for base in (self.root, *self.additional_directories):
                if parent in (os.path.join(base, self.data_dir), os.path.join(base, ".jido_code")):
                    return True
        # files that run later in the user's own tools (editor tasks, direnv, git hooks, CI),
        # the same list the OS sandbox binds read-only for bash
        for base in (self.root, *self.additional_directories):
            if any(is_within(path, os.path.join(base, rel)) for rel in TOOL_RUN_PATHS):
                return True
        # the data dir itself (replacing it by a symlink would redirect the settings)
        return path == os.path.normpath(os.path.join(self.root, self.data_dir))

    # -- resolution -----------------------------------------------------------

    def lexical(self, user_path: str) -> str:
        """``user_path`` made absolute against the root and normalised, no symlink followed."""
        joined = user_path if os.path.isabs(user_path) else os.path.join(self.root, user_path)
        return os.path.normpath(joined)

    def check(self, user_path: str, access: Access, *, allow_sensitive: bool = False) -> PathCheck:
        """Resolve ``user_path`` and decide whether ``access`` to it is allowed.

        ``allow_sensitive`` is set only when an explicit allow rule names the
        path (never by a tool argument).
        """
        if not isinstance(user_path, str) or user_path == "":
            return PathCheck(ok=False, path="", reason="invalid", message="path must be a non-empty string")
        bad = bad_path_chars(user_path)
        if bad:
            return PathCheck(
                ok=False,
                path=user_path,
                reason="invalid",
                message=f"path contains control or invisible characters: {', '.join(bad)}",
            )
        if len(user_path.encode("utf-8", "surrogatepass")) > 4096:
            return PathCheck(ok=False, path=user_path[:64], reason="invalid", message="path is too long")
        lexical = self.lexical(user_path)
        resolved = os.path.realpath(lexical)
        base = self.base_of(resolved)
        if base is None:
            return PathCheck(
                ok=False,
                path=resolved,
                reason="outside_root",
                message=f"{user_path!r} resolves to {resolved}, outside the project root {self.root}",
            )
        hidden = self.hidden_under(resolved) or self.hidden_under(lexical)
        if hidden is not None:
            return PathCheck(
                ok=False,
                path=resolved,
                reason="hidden",
                message=f"{user_path!r} is in {hidden}, which no tool may see (JidoCode's own data or "
                "credentials), whatever additional_directories allow",
                base=base,
            )
        if not allow_sensitive and (self.is_sensitive(resolved) or self.is_sensitive(lexical)):
            return PathCheck(
                ok=False,
                path=resolved,
                reason="sensitive",
                message=f"{user_path!r} is a sensitive file (secrets); denied by default",
                base=base,
            )
        if access == "write" and (self.is_protected(resolved) or self.is_protected(lexical)):
            return PathCheck(
                ok=False,
                path=resolved,
                reason="protected",
                message=f"{user_path!r} is protected (runtime settings, MCP config or git internals)",
                base=base,
            )
        return PathCheck(ok=True, path=resolved, base=base)

    def hidden_under(self, path: str) -> str | None:
        """The hidden path ``path`` (absolute, normalised) lies under, or ``None``."""
        return hidden_at(path, self.hidden, self.root)

    def base_of(self, resolved: str) -> str | None:
        """The root or additional directory ``resolved`` lies under, or ``None``."""
        for base in (self.root, *self.additional_directories):
            if is_within(resolved, base):
                return base
        return None
