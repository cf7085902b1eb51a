"""Shell command analysis with a real bash parser (``bashlex``), pure.

:func:`analyze` turns a command string into every simple command bash would
run — after ``;``, ``&&``, ``||``, ``|``, ``&``, newlines, inside ``$(…)``,
backticks, process substitution, ``if``/``for``/``while`` bodies, subshells
and brace groups, behind wrappers (``env``, ``xargs``, ``sh -c``/``bash -c``
(whose string is parsed in turn), ``timeout``, ``nice``, ``nohup``,
``sudo`` …) — plus its redirections. Each command carries ``flags``: reasons
why no allow rule may cover it (a program-valued option such as
``git -c core.fsmonitor=…`` or ``find -exec``, an environment prefix that is
not on the safe list such as ``LD_PRELOAD=…`` or ``GIT_SSH_COMMAND=…``, an
expansion in the program name …). What the parser cannot prove safe (parse
errors, constructs bashlex does not implement, ``eval``, function
definitions, here-docs with expansions, arithmetic, brace expansion …) lands
in ``unprovable``: the decision is then *ask* or *deny*, never *allow*.

This is a best-effort reading of bash; ``docs/security.md`` lists what it
does not claim. The allow list is the safety net: a program nobody allowed
never runs.
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Callable
from typing import Any, Final

import bashlex  # type: ignore[import-untyped]
import bashlex.errors  # type: ignore[import-untyped]
from pydantic import BaseModel, ConfigDict

__all__ = [
    "MAX_COMMAND_CHARS",
    "SAFE_ENV_NAMES",
    "Redirect",
    "ShellAnalysis",
    "ShellCommand",
    "analyze",
]

MAX_COMMAND_CHARS: Final = 64 * 1024
_MAX_DEPTH: Final = 6
_MAX_COMMANDS: Final = 512

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

#: Builtins whose effect on later commands the analysis cannot follow.
_UNPROVABLE_BUILTINS: Final[frozenset[str]] = frozenset(
    {
        "eval",
        "source",
        ".",
        "alias",
        "unalias",
        "trap",
        "declare",
        "typeset",
        "local",
        "export",
        "readonly",
        "let",
        "enable",
        "shopt",
        "hash",
        "fc",
        "history",
        "bind",
        "complete",
        "compgen",
        "mapfile",
        "readarray",
        "coproc",
        "caller",
        "watch",
        "su",
        "runuser",
        "script",
    }
)
#: Commands that run nothing and change nothing outside the shell: no rule needed.
_NEUTRAL: Final[frozenset[str]] = frozenset(
    {"true", "false", ":", "cd", "pwd", "exit", "wait", "pushd", "popd"}
)
_SHELLS: Final[frozenset[str]] = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "yash"})
_PRIVILEGED: Final[frozenset[str]] = frozenset({"sudo", "doas", "pkexec"})
_WRITE_OPS: Final[frozenset[str]] = frozenset({">", ">>", ">|", "&>", "&>>", "<>", ">&"})
_READ_OPS: Final[frozenset[str]] = frozenset({"<", "<&"})
_DEV_OK: Final[frozenset[str]] = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"})
_INVISIBLE: Final = frozenset({"Cf", "Co", "Cs", "Zl", "Zp"})


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

    @property
    def text(self) -> str:
        return " ".join(self.argv)


class Redirect(BaseModel):
    """A redirection to or from a file; ``target`` is ``None`` when it is computed at run time."""

    model_config = ConfigDict(frozen=True)

    op: str
    target: str | None
    write: bool
    #: The target is relative and a ``cd`` may have moved the shell before it.
    after_cd: bool = False


class ShellAnalysis(BaseModel):
    """Everything :func:`analyze` found in one command string."""

    model_config = ConfigDict(frozen=True)

    source: str
    commands: tuple[ShellCommand, ...] = ()
    redirects: tuple[Redirect, ...] = ()
    #: Reasons the string as a whole cannot be proven safe (empty: it can be judged command by command).
    unprovable: tuple[str, ...] = ()


# --- program-valued options ----------------------------------------------------


def _opt_is(word: str, *names: str) -> bool:
    for name in names:
        if word == name or (name.startswith("--") and word.startswith(name + "=")):
            return True
        if (
            not name.startswith("--")
            and len(name) == 2
            and word.startswith(name)
            and not word.startswith("--")
        ):
            # -cfoo, -Ifoo: an attached value
            return True
    return False


def _git_flags(argv: tuple[str, ...]) -> list[str]:
    out: list[str] = []
    sub: str | None = None
    sub_index = 0
    for i, w in enumerate(argv[1:], start=1):
        if sub is None:
            if _opt_is(w, "-c", "--config-env", "--exec-path", "--git-dir", "--work-tree", "--namespace"):
                out.append(f"git option {w.split('=')[0]} can run programs or redirect the repository")
            elif w in ("-C",):
                continue
            elif not w.startswith("-") and argv[i - 1] != "-C":
                sub, sub_index = w, i
        else:
            if _opt_is(w, "--upload-pack", "--receive-pack", "--exec", "--extcmd", "--template"):
                out.append(f"git {sub} option {w.split('=')[0]} runs a program")
            elif sub in ("clone", "fetch", "pull", "ls-remote", "archive", "push") and w == "-u":
                out.append(f"git {sub} -u names a program to run")
            elif sub in ("rebase", "difftool") and (w == "-x" or w.startswith("-x")):
                out.append(f"git {sub} -x runs a command")
    if sub in ("filter-branch", "filter-repo"):
        out.append(f"git {sub} runs shell code")
    rest = argv[sub_index + 1 :] if sub is not None else ()
    if sub == "submodule" and "foreach" in rest:
        out.append("git submodule foreach runs shell code")
    if sub == "bisect" and rest[:1] == ("run",):
        out.append("git bisect run runs a command")
    if sub == "config" and not any(
        w in ("-l", "--list", "--get", "--get-all", "--get-regexp", "--show-origin") for w in rest
    ):
        out.append("git config may write the repository configuration (protected)")
    return out


_FIND_ACTIONS: Final = frozenset(
    {"-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf", "-fls"}
)


def _find_flags(argv: tuple[str, ...]) -> list[str]:
    return [f"find {w} runs a program or writes files" for w in argv[1:] if w in _FIND_ACTIONS]


def _table_flags(options: tuple[str, ...], what: str) -> Callable[[tuple[str, ...]], list[str]]:
    def check(argv: tuple[str, ...]) -> list[str]:
        return [f"{what} option {w.split('=')[0]} runs a program" for w in argv[1:] if _opt_is(w, *options)]

    return check


def _awk_flags(argv: tuple[str, ...]) -> list[str]:
    prog = [w for w in argv[1:] if not w.startswith("-")]
    if any("system" in w or "|" in w or "getline" in w or ">" in w for w in prog[:1]):
        return ["awk program runs commands or writes files (system, pipes, redirection)"]
    if any(_opt_is(w, "-f", "--file") for w in argv[1:]):
        return ["awk -f runs a program file"]
    return []


_SED_EXEC: Final = re.compile(r"(^|[;{}\n])\s*[ewWrR]\b|/[gpiImM0-9]*[ew]\b")


def _sed_flags(argv: tuple[str, ...]) -> list[str]:
    out: list[str] = []
    for w in argv[1:]:
        if _opt_is(w, "-f", "--file"):
            out.append("sed -f runs a script file")
        elif not w.startswith("-") and _SED_EXEC.search(w):
            out.append("sed script executes commands or reads/writes files (e, w, r)")
            break
    return out


def _make_flags(argv: tuple[str, ...]) -> list[str]:
    return [
        f"make variable {w.split('=')[0]} names a program"
        for w in argv[1:]
        if re.match(r"^\.?SHELL(FLAGS)?=|^MAKE=", w)
    ]


_OPTION_CHECKS: Final[dict[str, Callable[[tuple[str, ...]], list[str]]]] = {
    "git": _git_flags,
    "find": _find_flags,
    "rsync": _table_flags(("-e", "--rsh", "--rsync-path"), "rsync"),
    "ssh": _table_flags(("-o", "-F"), "ssh"),
    "scp": _table_flags(("-S", "-o", "-F"), "scp"),
    "sftp": _table_flags(("-S", "-o", "-F"), "sftp"),
    "tar": _table_flags(
        (
            "--to-command",
            "--checkpoint-action",
            "-I",
            "--use-compress-program",
            "--info-script",
            "--new-volume-script",
            "-F",
            "--rsh-command",
            "--rmt-command",
        ),
        "tar",
    ),
    "zip": _table_flags(("-TT", "--unzip-command"), "zip"),
    "sort": _table_flags(("--compress-program",), "sort"),
    "man": _table_flags(("-P", "--pager", "-H", "--html"), "man"),
    "less": _table_flags(("--lesskey-src", "-k"), "less"),
    "npm": _table_flags(("--script-shell",), "npm"),
    "yarn": _table_flags(("--script-shell",), "yarn"),
    "pnpm": _table_flags(("--script-shell",), "pnpm"),
    "awk": _awk_flags,
    "gawk": _awk_flags,
    "mawk": _awk_flags,
    "nawk": _awk_flags,
    "sed": _sed_flags,
    "gsed": _sed_flags,
    "make": _make_flags,
    "gmake": _make_flags,
}


def _builtin_flags(argv: tuple[str, ...]) -> list[str]:
    name = argv[0]
    # Array subscripts are evaluated arithmetically, which runs $(…) inside them.
    if name == "printf" and any(_opt_is(w, "-v") for w in argv[1:]):
        return ["printf -v assigns a variable (array subscripts run code)"]
    if name in ("test", "[") and "-v" in argv[1:]:
        return ["test -v evaluates array subscripts"]
    if name in ("read", "unset") and any("[" in w for w in argv[1:]):
        return [f"{name} with an array subscript evaluates code"]
    return []


def env_flag(name: str) -> str | None:
    """Why setting ``name`` for a command keeps allow rules from covering it (``None``: safe)."""
    if name in SAFE_ENV_NAMES or name.startswith(_SAFE_ENV_PREFIXES):
        return None
    if name in _PROGRAM_VALUED_ENV or name.startswith(("LD_", "DYLD_", "GIT_", "BASH_FUNC_", "npm_config_")):
        return f"environment variable {name} can make the command run another program"
    return f"environment variable {name} is not on the safe list"


# --- the walk ------------------------------------------------------------------


class _Unprovable(Exception):
    pass


def _unquoted(raw: str) -> str:
    """The characters of ``raw`` outside quotes and escapes (what bash may expand)."""
    out: list[str] = []
    i, quote = 0, ""
    while i < len(raw):
        c = raw[i]
        if quote == "'":
            if c == "'":
                quote = ""
        elif quote == '"':
            if c == "\\":
                i += 1
            elif c == '"':
                quote = ""
        elif c == "\\":
            i += 1
        elif c in "'\"":
            quote = c
        else:
            out.append(c)
        i += 1
    return "".join(out)


class _Walker:
    def __init__(self, source: str, depth: int) -> None:
        self.src = source
        self.depth = depth
        self.commands: list[ShellCommand] = []
        self.redirects: list[Redirect] = []
        self.unprovable: list[str] = []
        self.cd_seen = False

    # -- nodes ----------------------------------------------------------------

    def node(self, n: Any) -> None:
        kind = n.kind
        if kind in ("list", "pipeline"):
            for p in n.parts:
                if p.kind in ("operator", "pipe", "reservedword"):
                    continue
                self.node(p)
        elif kind == "compound":
            items = [p for p in n.list if p.kind != "reservedword"]
            first = n.list[0] if n.list else None
            if (
                first is not None
                and first.kind == "reservedword"
                and first.word == "("
                and items
                and items[0].kind == "compound"
                and items[0].pos[0] == n.pos[0] + 1
            ):
                raise _Unprovable("arithmetic command (( … ))")
            for p in items:
                self.node(p)
            for r in getattr(n, "redirects", None) or ():
                self.redirect(r)
        elif kind in ("if", "for", "while", "until"):
            for p in n.parts:
                if p.kind == "reservedword":
                    continue
                if p.kind == "word":
                    self.word_parts(p)
                else:
                    self.node(p)
        elif kind == "command":
            self.command(n)
        elif kind == "function":
            raise _Unprovable("function definition (it can shadow any command)")
        else:
            raise _Unprovable(f"unsupported shell construct {kind!r}")

    def word_parts(self, w: Any) -> bool:
        """Recurse into substitutions of a word; return whether its value is computed at run time."""
        dynamic = False
        for p in getattr(w, "parts", None) or ():
            if p.kind in ("commandsubstitution", "processsubstitution"):
                dynamic = True
                self.node(p.command)
            elif p.kind == "parameter":
                dynamic = True
            elif p.kind == "tilde":
                continue
            else:
                raise _Unprovable(f"unsupported word part {p.kind!r}")
        return dynamic

    def raw(self, n: Any) -> str:
        start, end = n.pos
        return str(self.src[start:end])

    def redirect(self, r: Any) -> None:
        op = r.type
        target = r.output
        if op in ("<<", "<<-"):
            body = r.heredoc.value if r.heredoc is not None else ""
            delim_raw = self.raw(target) if hasattr(target, "pos") else ""
            if not any(q in delim_raw for q in "'\"\\") and ("$" in body or "`" in body):
                raise _Unprovable("here-document with expansions")
            return
        if op == "<<<":
            if hasattr(target, "kind"):
                self.word_parts(target)
            return
        if not hasattr(target, "kind"):
            return  # a file descriptor (2>&1, >&-)
        if op in (">&", "<&") and target.word.isdigit():
            return
        dynamic = self.word_parts(target)
        unq = _unquoted(self.raw(target))
        if dynamic or any(c in unq for c in "*?[{"):
            raise _Unprovable(f"redirection {op} to a target computed at run time")
        path = target.word
        write = op in _WRITE_OPS
        if op not in _WRITE_OPS and op not in _READ_OPS:
            raise _Unprovable(f"unsupported redirection {op!r}")
        if path in _DEV_OK or re.fullmatch(r"/dev/fd/\d+", path):
            return
        self.redirects.append(
            Redirect(op=op, target=path, write=write, after_cd=self.cd_seen and not path.startswith("/"))
        )

    def command(self, n: Any) -> None:
        assignments: list[str] = []
        words: list[Any] = []
        for p in n.parts:
            if p.kind == "assignment":
                self.word_parts(p)
                assignments.append(p.word)
            elif p.kind == "word":
                words.append(p)
            elif p.kind == "redirect":
                self.redirect(p)
            else:
                raise _Unprovable(f"unsupported command part {p.kind!r}")
        dynamic = [self.word_parts(w) for w in words]
        argv = tuple(w.word for w in words)
        if not argv:
            # bare assignments set shell variables for the rest of the script
            flags = []
            for a in assignments:
                name = a.split("=", 1)[0].split("[", 1)[0]
                if "[" in a.split("=", 1)[0]:
                    raise _Unprovable("array assignment (subscripts run code)")
                if not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
                    reason = env_flag(name)
                    if reason:
                        flags.append(reason)
            self.commands.append(
                ShellCommand(argv=(), assignments=tuple(assignments), flags=tuple(flags), neutral=True)
            )
            return
        self.simple(argv, dynamic, [self.raw(w) for w in words], tuple(assignments))

    # -- one simple command, wrappers unwrapped -------------------------------------

    def simple(
        self,
        argv: tuple[str, ...],
        dynamic: list[bool],
        raws: list[str],
        assignments: tuple[str, ...],
        *,
        open_args: bool = False,
    ) -> None:
        if len(self.commands) > _MAX_COMMANDS:
            raise _Unprovable("too many commands")
        flags: list[str] = []
        for a in assignments:
            name = a.split("=", 1)[0]
            reason = env_flag(name)
            if reason:
                flags.append(reason)
        if dynamic[0] or any(c in _unquoted(raws[0]) for c in "*?[{"):
            raise _Unprovable("the program name is computed at run time")
        for raw in raws:
            unq = _unquoted(raw)
            if "{" in unq and ("," in unq or ".." in unq) and unq != "{}":
                raise _Unprovable("brace expansion")
        prog = argv[0]
        base = os.path.basename(prog)
        if base in _UNPROVABLE_BUILTINS or prog in _UNPROVABLE_BUILTINS:
            raise _Unprovable(f"{prog} changes how later commands run; cannot be judged")
        if base in _SHELLS:
            if self.shell_c(argv, dynamic):
                if flags:  # BASH_ENV=… bash -c '…': the prefix reaches the shell itself
                    self.commands.append(ShellCommand(argv=argv, assignments=assignments, flags=tuple(flags)))
                return
        inner = _unwrap(argv)
        if inner is not None:
            start, extra_assign, inner_open = inner
            if any(dynamic[1:start]):
                raise _Unprovable(f"{base} arguments computed at run time")
            if base in _PRIVILEGED:
                self.commands.append(
                    ShellCommand(argv=argv, assignments=assignments, flags=tuple(flags), open_args=open_args)
                )
            if start >= len(argv):
                # a wrapper without a command (env prints the environment, exec only redirects)
                if base not in _PRIVILEGED:
                    self.commands.append(ShellCommand(argv=argv, assignments=assignments, flags=tuple(flags)))
                return
            self.simple(
                argv[start:],
                dynamic[start:],
                raws[start:],
                assignments + extra_assign,
                open_args=open_args or inner_open,
            )
            return
        if base == "command" and len(argv) > 1 and argv[1] in ("-v", "-V"):
            self.commands.append(ShellCommand(argv=argv, neutral=True, flags=tuple(flags)))
            return
        check = _OPTION_CHECKS.get(base)
        if check is not None:
            flags.extend(check(argv))
            if any(dynamic[1:]):
                flags.append(f"{base} arguments computed at run time could carry program-valued options")
            if any(any(c in _unquoted(r) for c in "*?[") for r in raws[1:]):
                flags.append(f"{base} arguments expanded from file names could carry options")
            if open_args:
                flags.append(f"{base} gets extra arguments at run time (xargs)")
        flags.extend(_builtin_flags(argv))
        if base in ("cd", "pushd", "popd"):
            self.cd_seen = True
        neutral = base in _NEUTRAL and prog == base
        if base == "set" and all(
            re.fullmatch(r"[-+][euxvo]+|pipefail|errexit|nounset|xtrace", w) for w in argv[1:]
        ):
            neutral = True
        self.commands.append(
            ShellCommand(
                argv=argv, assignments=assignments, open_args=open_args, flags=tuple(flags), neutral=neutral
            )
        )

    def shell_c(self, argv: tuple[str, ...], dynamic: list[bool]) -> bool:
        """``sh -c STRING``: analyse STRING as a script; return whether it was one."""
        i = 1
        while i < len(argv):
            w = argv[i]
            if w in ("-o", "+o", "-O", "+O"):
                i += 2
                continue
            if w.startswith(("-", "+")) and not w.startswith("--") and len(w) > 1:
                if "c" in w[1:]:
                    if i + 1 >= len(argv):
                        raise _Unprovable(f"{argv[0]} -c without a command string")
                    if dynamic[i + 1]:
                        raise _Unprovable(f"{argv[0]} -c string computed at run time")
                    if self.depth >= _MAX_DEPTH:
                        raise _Unprovable("shell strings nested too deeply")
                    if set(w[1:]) & {"i", "l"}:
                        raise _Unprovable(f"{argv[0]} {w} reads startup files")
                    inner = analyze(argv[i + 1], _depth=self.depth + 1)
                    self.commands.extend(inner.commands)
                    self.redirects.extend(inner.redirects)
                    self.unprovable.extend(inner.unprovable)
                    return True
                i += 1
                continue
            if w.startswith("--"):
                i += 1
                continue
            return False
        return False


def _unwrap(argv: tuple[str, ...]) -> tuple[int, tuple[str, ...], bool] | None:
    """For a wrapper: (index of the inner command, env assignments it adds, open args); else ``None``."""
    base = os.path.basename(argv[0])
    n = len(argv)

    def skip(i: int, with_value: frozenset[str], flags_ok: Callable[[str], bool]) -> int:
        while i < n:
            w = argv[i]
            if w == "--":
                return i + 1
            if w in with_value:
                i += 2
            elif w.startswith("-") and len(w) > 1 and flags_ok(w):
                i += 1
            else:
                return i
        return i

    any_flag: Callable[[str], bool] = lambda w: True  # noqa: E731
    if base in ("nohup", "builtin"):
        return (1, (), False)
    if base == "nice":
        return (skip(1, frozenset({"-n", "--adjustment"}), any_flag), (), False)
    if base == "timeout":
        i = skip(1, frozenset({"-s", "--signal", "-k", "--kill-after"}), any_flag)
        return (i + 1, (), False)  # the duration
    if base == "stdbuf":
        return (skip(1, frozenset({"-i", "-o", "-e"}), any_flag), (), False)
    if base == "setsid":
        return (skip(1, frozenset(), any_flag), (), False)
    if base == "ionice":
        if "-p" in argv or "-P" in argv:
            return None
        return (skip(1, frozenset({"-c", "-n"}), any_flag), (), False)
    if base == "command":
        if n > 1 and argv[1] in ("-v", "-V"):
            return None
        return (skip(1, frozenset(), lambda w: w == "-p"), (), False)
    if base == "exec":
        return (skip(1, frozenset({"-a"}), lambda w: w in ("-c", "-l", "-cl", "-lc")), (), False)
    if base == "env":
        i = 1
        assigns: list[str] = []
        while i < n:
            w = argv[i]
            if w in ("-S", "--split-string") or w.startswith(("-S", "--split-string")):
                raise _Unprovable("env -S splits a string into a command")
            if w in ("-u", "--unset", "-C", "--chdir"):
                i += 2
            elif w == "--":
                i += 1
                break
            elif w.startswith("-"):
                i += 1
            elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", w, re.DOTALL):
                assigns.append(w)
                i += 1
            else:
                break
        while i < n and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", argv[i], re.DOTALL):
            assigns.append(argv[i])
            i += 1
        return (i, tuple(assigns), False)
    if base == "xargs":
        with_value = frozenset(
            {
                "-a",
                "-d",
                "-E",
                "-I",
                "-L",
                "-n",
                "-P",
                "-s",
                "--arg-file",
                "--delimiter",
                "--max-args",
                "--max-procs",
                "--max-chars",
                "--max-lines",
                "--replace",
            }
        )
        i = skip(1, with_value, any_flag)
        return (i, (), True)
    if base == "sudo":
        for w in argv[1:]:
            if not w.startswith("-"):
                break
            if w in ("-s", "-i", "-e", "--shell", "--login", "--edit") or (
                not w.startswith("--") and set(w[1:]) & {"s", "i", "e"}
            ):
                raise _Unprovable(f"sudo {w} runs a shell or an editor")
        i = skip(
            1,
            frozenset({"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T", "--user", "--group"}),
            any_flag,
        )
        assigns = []
        while i < n and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", argv[i], re.DOTALL):
            assigns.append(argv[i])
            i += 1
        return (i, tuple(assigns), False)
    if base == "doas":
        if "-s" in argv[1:2] or "-C" in argv:
            raise _Unprovable("doas -s/-C")
        return (skip(1, frozenset({"-u"}), any_flag), (), False)
    if base == "pkexec":
        return (skip(1, frozenset({"--user"}), any_flag), (), False)
    return None


def analyze(command: str, *, _depth: int = 0) -> ShellAnalysis:
    """Every command and redirection of ``command`` as bash would run it (see module doc)."""
    if not isinstance(command, str):
        return ShellAnalysis(source=str(command), unprovable=("command is not a string",))
    if len(command) > MAX_COMMAND_CHARS:
        return ShellAnalysis(
            source=command[:200], unprovable=(f"command longer than {MAX_COMMAND_CHARS} characters",)
        )
    if "\x00" in command:
        return ShellAnalysis(source=command.replace("\x00", "\\0"), unprovable=("NUL byte in the command",))
    invisible = sorted({f"U+{ord(c):04X}" for c in command if unicodedata.category(c) in _INVISIBLE})
    if invisible:
        return ShellAnalysis(
            source=command, unprovable=(f"invisible or bidi control characters: {', '.join(invisible)}",)
        )
    controls = sorted(
        {f"U+{ord(c):04X}" for c in command if unicodedata.category(c) == "Cc" and c not in "\n\t"}
    )
    if controls:
        return ShellAnalysis(source=command, unprovable=(f"control characters: {', '.join(controls)}",))
    if "$[" in _unquoted(command):
        return ShellAnalysis(source=command, unprovable=("arithmetic expansion $[ … ]",))
    if not command.strip():
        return ShellAnalysis(source=command, unprovable=("empty command",))
    walker = _Walker(command, _depth)
    try:
        trees = bashlex.parse(command)
        for tree in trees:
            walker.node(tree)
    except _Unprovable as exc:
        # keep what was found before: a denied command next to an unprovable one is still denied
        return ShellAnalysis(
            source=command,
            commands=tuple(walker.commands),
            redirects=tuple(walker.redirects),
            unprovable=(*walker.unprovable, str(exc)),
        )
    except bashlex.errors.ParsingError as exc:
        return ShellAnalysis(
            source=command, unprovable=(f"shell syntax the parser cannot read: {exc.message}",)
        )
    except NotImplementedError as exc:
        return ShellAnalysis(
            source=command, unprovable=(f"shell construct not supported by the parser: {exc}",)
        )
    except (RecursionError, IndexError, AttributeError, TypeError, ValueError, AssertionError) as exc:
        # bashlex has rough edges on odd input: anything it trips on is unprovable, never allowed
        return ShellAnalysis(source=command, unprovable=(f"shell parser failed: {type(exc).__name__}",))
    return ShellAnalysis(
        source=command,
        commands=tuple(walker.commands),
        redirects=tuple(walker.redirects),
        unprovable=tuple(walker.unprovable),
    )
