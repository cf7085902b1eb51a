"""What :func:`~jidocode.shared.policy.shell.analyze` returns: commands, words, redirections.

Pure data and the environment-prefix rule (:func:`env_flag`); split from
:mod:`jidocode.shared.policy.shell`, which re-exports every public name here.
"""

from __future__ import annotations

from typing import Final

from pydantic import BaseModel, ConfigDict

#: The working directory a command string starts in: the project root.
ROOT_CWD: Final[tuple[str, ...]] = (".",)

#: Environment variables a command prefix may set and still be covered by an allow rule.
SAFE_ENV_NAMES: Final[frozenset[str]] = frozenset(
    {
        "LANG",
        "LANGUAGE",
        "TZ",
        "TERM",
        "NO_COLOR",
        "FORCE_COLOR",
        "CLICOLOR",
        "CI",
        "DEBUG",
        "VERBOSE",
        "NODE_ENV",
        "RUST_LOG",
        "RUST_BACKTRACE",
        "PYTHONUNBUFFERED",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONHASHSEED",
        "COLUMNS",
        "LINES",
        "TMPDIR",
    }
)
_SAFE_ENV_PREFIXES: Final = ("LC_",)
#: Named in the flag so the reason is clear (all are refused anyway, being off the safe list).
_PROGRAM_VALUED_ENV: Final[frozenset[str]] = frozenset(
    {
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "LD_AUDIT",
        "GIT_SSH",
        "GIT_SSH_COMMAND",
        "GIT_EXTERNAL_DIFF",
        "GIT_PAGER",
        "GIT_EDITOR",
        "GIT_ASKPASS",
        "GIT_PROXY_COMMAND",
        "GIT_EXEC_PATH",
        "GIT_DIR",
        "GIT_CONFIG",
        "GIT_CONFIG_GLOBAL",
        "GIT_CONFIG_PARAMETERS",
        "SSH_ASKPASS",
        "PAGER",
        "EDITOR",
        "VISUAL",
        "BROWSER",
        "BASH_ENV",
        "ENV",
        "PROMPT_COMMAND",
        "PATH",
        "IFS",
        "SHELLOPTS",
        "BASHOPTS",
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "PYTHONHOME",
        "NODE_OPTIONS",
        "PERL5OPT",
        "PERL5LIB",
        "RUBYOPT",
        "LESSOPEN",
        "LESSCLOSE",
        "MANPAGER",
        "JAVA_TOOL_OPTIONS",
    }
)


class Word(BaseModel):
    """How bash treats one argument beyond quote removal."""

    model_config = ConfigDict(frozen=True)

    #: Its value comes from an expansion at run time (``$x``, ``$(…)``, backticks, ``$'…'``).
    dynamic: bool = False
    #: It holds an unquoted ``*``, ``?`` or ``[`` (bash replaces it by the matching file names).
    glob: bool = False
    #: bash expands a ``~`` in it (at its start, or after ``=``/``:`` in an assignment-like word).
    tilde: bool = False


_LITERAL: Final = Word()


class ShellCommand(BaseModel):
    """One simple command bash would run."""

    model_config = ConfigDict(frozen=True)

    argv: tuple[str, ...]
    #: ``NAME=value`` prefixes (and ``env NAME=value``) that reach this command.
    assignments: tuple[str, ...] = ()
    #: More arguments arrive at run time (``xargs``): only a ``:*`` rule can cover it.
    open_args: bool = False
    #: Why no allow rule may cover this command (empty: rules decide).
    flags: tuple[str, ...] = ()
    #: Needs no rule (``cd``, ``true`` …).
    neutral: bool = False
    #: One :class:`Word` per ``argv`` entry (empty: every word is literal).
    words: tuple[Word, ...] = ()
    #: Where the shell may be when it runs (relative to the root, or absolute); ``None``: unknown.
    cwd: tuple[str, ...] | None = ROOT_CWD

    @property
    def text(self) -> str:
        return " ".join(self.argv)

    def word(self, index: int) -> Word:
        return self.words[index] if index < len(self.words) else _LITERAL


class Redirect(BaseModel):
    """A redirection to or from a file."""

    model_config = ConfigDict(frozen=True)

    op: str
    target: str
    write: bool
    #: bash expands the leading ``~`` of the target.
    tilde: bool = False
    #: The target is computed at run time (``> $f``, ``< *.txt``): ``target`` is its text as written.
    dynamic: bool = False
    #: Where the shell may be when it opens the target (see :class:`ShellCommand`).
    cwd: tuple[str, ...] | None = ROOT_CWD

    @property
    def after_cd(self) -> bool:
        """A relative target whose directory a ``cd`` may have changed."""
        return not self.target.startswith("/") and self.cwd != ROOT_CWD


class ShellAnalysis(BaseModel):
    """Everything :func:`analyze` found in one command string."""

    model_config = ConfigDict(frozen=True)

    source: str
    commands: tuple[ShellCommand, ...] = ()
    redirects: tuple[Redirect, ...] = ()
    #: Reasons the string as a whole cannot be proven safe (empty: it can be judged command by command).
    unprovable: tuple[str, ...] = ()


def env_flag(name: str) -> str | None:
    """Why setting ``name`` for a command keeps allow rules from covering it (``None``: safe)."""
    if name in SAFE_ENV_NAMES or name.startswith(_SAFE_ENV_PREFIXES):
        return None
    if name in _PROGRAM_VALUED_ENV or name.startswith(("LD_", "DYLD_", "GIT_", "BASH_FUNC_", "npm_config_")):
        return f"environment variable {name} can make the command run another program"
    return f"environment variable {name} is not on the safe list"


class Unprovable(Exception):
    """The walk met something it cannot prove safe; the message says what."""
