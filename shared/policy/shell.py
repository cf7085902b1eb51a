"""Shell command analysis with a real bash parser (``bashlex``), pure.

:func:`analyze` turns a command string into every simple command bash would
run — after ``;``, ``&&``, ``||``, ``|``, ``&``, newlines, inside ``$(…)``,
backticks, process substitution, ``if``/``for``/``while`` bodies, subshells
and brace groups, behind wrappers (``env``, ``xargs``, ``sh -c``/``bash -c``
(whose string is parsed in turn), ``timeout``, ``nice``, ``nohup``,
``sudo`` …) — plus its redirections. Each command carries:

- ``flags``: reasons why no allow rule may cover it (:mod:`.programs`: a
  program-valued option such as ``git -c core.fsmonitor=…``, ``find -exec``,
  ``rg --pre``, a sed or awk program that runs commands; an environment
  prefix off the safe list such as ``LD_PRELOAD=…``; a builtin that assigns
  a variable named by its argument such as ``wait -p``);
- ``words``: for each argument whether bash computes it at run time (``$``,
  backticks), globs it, or expands a leading ``~`` — the decision resolves
  ``~`` and globs itself, and asks about the rest;
- ``cwd``: the directories the shell may be in when it runs (relative to
  the project root), or ``None`` after a ``cd`` the walk cannot follow (a
  computed target, ``cd -``, a ``cd`` inside a loop). A ``cd`` that may fail
  keeps the old directory among the candidates.

What the parser cannot prove safe lands in ``unprovable``: parse errors,
constructs bashlex does not implement (``[[ ]]``, ``case``, arithmetic),
``eval``/``source``/``declare`` and their kind, function definitions,
here-docs with expansions, brace expansion, and any ``${…}`` other than a
plain name with a literal default, pattern or length (``${x:-$(cmd)}``,
``${x@P}``, ``${!x}``, ``${a[i]}`` can all run code). The decision is then
*ask* or *deny* — never *allow*.

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

from pydantic import BaseModel, ConfigDict

from .programs import OPTION_CHECKED, inert, option_flags

__all__ = [
    "MAX_COMMAND_CHARS",
    "ROOT_CWD",
    "SAFE_ENV_NAMES",
    "Redirect",
    "ShellAnalysis",
    "ShellCommand",
    "Word",
    "analyze",
    "env_flag",
]

MAX_COMMAND_CHARS: Final = 64 * 1024
_MAX_DEPTH: Final = 6
_MAX_COMMANDS: Final = 512
_MAX_CWDS: Final = 8
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
        "compopt",
    }
)
_SHELLS: Final[frozenset[str]] = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "yash"})
_PRIVILEGED: Final[frozenset[str]] = frozenset({"sudo", "doas", "pkexec"})
_WRITE_OPS: Final[frozenset[str]] = frozenset({">", ">>", ">|", "&>", "&>>", "<>", ">&"})
_READ_OPS: Final[frozenset[str]] = frozenset({"<", "<&"})
_DEV_OK: Final[frozenset[str]] = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"})
_INVISIBLE: Final = frozenset({"Cf", "Co", "Cs", "Zl", "Zp"})


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


_PARAM_NAME: Final = r"(?:[A-Za-z_][A-Za-z0-9_]*(?:\[(?:[0-9]+|@|\*)\])?|[0-9]+|[@*#?$!_-])"
_PARAM_PLAIN: Final = re.compile(rf"#?{_PARAM_NAME}")
_PARAM_OP: Final = re.compile(
    rf"{_PARAM_NAME}(?::?[-+=?]|##?|%%?|//?|/#|/%|\^\^?|,,?)(?P<word>.*)", re.DOTALL
)
_PARAM_SUBSTRING: Final = re.compile(rf"{_PARAM_NAME}:[ ]*-?[0-9]+(?::[ ]*-?[0-9]+)?")
#: Characters that would make the word of ``${x:-word}`` run or expand something.
_PARAM_WORD_UNSAFE: Final = re.compile(r"[$`\\'\"(){}\[\]<>!]")
_CD_WORD: Final = re.compile(r"(?<![\w.-])(?:cd|pushd|popd)(?![\w.-])")
_ASSIGNMENT_LIKE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")


def _parameter_problem(raw: str) -> str | None:
    """Why the parameter expansion ``raw`` (``$x``, ``${…}``) may run code; ``None`` when it cannot."""
    if not raw.startswith("${"):
        return None  # $x, $1, $@, $'…' (its value is only dynamic)
    inner = raw[2:-1] if raw.endswith("}") else raw[2:]
    if _PARAM_PLAIN.fullmatch(inner) or _PARAM_SUBSTRING.fullmatch(inner):
        return None
    m = _PARAM_OP.fullmatch(inner)
    if m is not None and not _PARAM_WORD_UNSAFE.search(m.group("word")):
        return None
    return f"parameter expansion {raw[:60]} (operators, subscripts, indirection or nested expansions can run code)"


def _tilde(raw: str) -> bool:
    """Whether bash expands a ``~`` in the word written as ``raw``."""
    if raw.startswith("~"):
        return True
    return _ASSIGNMENT_LIKE.match(raw) is not None and re.search(r"[=:]~", raw) is not None


_QUOTED_HEREDOC: Final = re.compile(
    r"<<(-?)([ \t]*)(?:(['\"])([A-Za-z_][A-Za-z0-9_]*)\3|\\([A-Za-z_][A-Za-z0-9_]*))"
)


def _unquote_heredocs(command: str) -> tuple[str, frozenset[int]]:
    """bashlex reads ``<<'EOF'`` as wanting a line ``'EOF'``: blank the quotes out (same length).

    Returns the text to parse and where each quoted delimiter word now starts
    (its body is literal: no expansion is checked there).
    """
    starts: list[int] = []

    def blank(m: re.Match[str]) -> str:
        name = m.group(4) or m.group(5)
        head = "<<" + m.group(1) + m.group(2)
        starts.append(m.start() + len(head) + 1)
        tail = " " if m.group(4) else ""
        return head + " " + name + tail

    return _QUOTED_HEREDOC.sub(blank, command), frozenset(starts)


class _Walker:
    def __init__(
        self,
        source: str,
        depth: int,
        cwd: tuple[str, ...] | None,
        quoted_heredocs: frozenset[int] = frozenset(),
    ) -> None:
        self.quoted_heredocs = quoted_heredocs
        self.src = source
        self.depth = depth
        self.commands: list[ShellCommand] = []
        self.redirects: list[Redirect] = []
        self.unprovable: list[str] = []
        self.cwd: tuple[str, ...] | None = cwd

    # -- nodes ----------------------------------------------------------------

    def node(self, n: Any) -> None:
        kind = n.kind
        if kind == "list":
            for p in n.parts:
                if p.kind in ("operator", "pipe", "reservedword"):
                    continue
                self.node(p)
        elif kind == "pipeline":
            # every part of a pipeline runs in a subshell: a cd there does not last
            for p in n.parts:
                if p.kind in ("operator", "pipe", "reservedword"):
                    continue
                self.isolated(p)
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
            # a compound's redirections are opened before its body runs
            for r in getattr(n, "redirects", None) or ():
                self.redirect(r)
            subshell = first is not None and first.kind == "reservedword" and first.word == "("
            for p in items:
                if subshell:
                    self.isolated(p)
                else:
                    self.node(p)
        elif kind in ("if", "for", "while", "until"):
            if kind != "if" and _CD_WORD.search(self.raw(n)):
                # a later iteration runs where an earlier one moved to
                self.cwd = None
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

    def isolated(self, n: Any) -> None:
        """Walk ``n`` as a subshell: its directory changes do not reach what follows."""
        saved = self.cwd
        self.node(n)
        self.cwd = saved

    def word_parts(self, w: Any) -> bool:
        """Recurse into substitutions of a word; return whether its value is computed at run time."""
        dynamic = False
        for p in getattr(w, "parts", None) or ():
            if p.kind in ("commandsubstitution", "processsubstitution"):
                dynamic = True
                self.isolated(p.command)
            elif p.kind == "parameter":
                dynamic = True
                problem = _parameter_problem(self.raw(p))
                if problem:
                    raise _Unprovable(problem)
            elif p.kind == "tilde":
                continue
            else:
                raise _Unprovable(f"unsupported word part {p.kind!r}")
        return dynamic

    def word(self, w: Any) -> Word:
        dynamic = self.word_parts(w)
        raw = self.raw(w)
        parts: list[Any] = list(getattr(w, "parts", None) or ())
        if len(parts) == 1 and parts[0].kind == "processsubstitution" and parts[0].pos == w.pos:
            return Word()  # <(cmd) is a /dev/fd/N path (cmd itself was walked above)
        unq = _unquoted(raw)
        return Word(dynamic=dynamic, glob=any(c in unq for c in "*?["), tilde=_tilde(raw))

    def raw(self, n: Any) -> str:
        start, end = n.pos
        return str(self.src[start:end])

    def redirect(self, r: Any) -> None:
        op = r.type
        target = r.output
        if op in ("<<", "<<-"):
            body = r.heredoc.value if r.heredoc is not None else ""
            delim_raw = self.raw(target) if hasattr(target, "pos") else ""
            quoted = hasattr(target, "pos") and target.pos[0] in self.quoted_heredocs
            if not quoted and not any(q in delim_raw for q in "'\"\\") and ("$" in body or "`" in body):
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
        raw = self.raw(target)
        unq = _unquoted(raw)
        write = op in _WRITE_OPS
        if op not in _WRITE_OPS and op not in _READ_OPS:
            raise _Unprovable(f"unsupported redirection {op!r}")
        if dynamic or any(c in unq for c in "*?[{"):
            self.redirects.append(Redirect(op=op, target=raw, write=write, dynamic=True, cwd=self.cwd))
            return
        path = target.word
        if path in _DEV_OK or re.fullmatch(r"/dev/fd/\d+", path):
            return
        self.redirects.append(
            Redirect(op=op, target=path, write=write, tilde=raw.startswith("~"), cwd=self.cwd)
        )

    def command(self, n: Any) -> None:
        assignments: list[str] = []
        words: list[Any] = []
        for p in n.parts:
            if p.kind == "assignment":
                if "[" in p.word.split("=", 1)[0]:
                    raise _Unprovable("array assignment (subscripts run code)")
                self.word_parts(p)
                assignments.append(p.word)
            elif p.kind == "word":
                words.append(p)
            elif p.kind == "redirect":
                self.redirect(p)
            else:
                raise _Unprovable(f"unsupported command part {p.kind!r}")
        infos = [self.word(w) for w in words]
        argv = tuple(w.word for w in words)
        if not argv:
            # bare assignments set shell variables for the rest of the script
            flags = []
            for a in assignments:
                name = a.split("=", 1)[0].rstrip("+")
                if not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
                    reason = env_flag(name)
                    if reason:
                        flags.append(reason)
            self.commands.append(
                ShellCommand(
                    argv=(), assignments=tuple(assignments), flags=tuple(flags), neutral=True, cwd=self.cwd
                )
            )
            return
        self.simple(argv, infos, [self.raw(w) for w in words], tuple(assignments))

    # -- one simple command, wrappers unwrapped -------------------------------------

    def simple(
        self,
        argv: tuple[str, ...],
        words: list[Word],
        raws: list[str],
        assignments: tuple[str, ...],
        *,
        open_args: bool = False,
    ) -> None:
        if len(self.commands) > _MAX_COMMANDS:
            raise _Unprovable("too many commands")
        flags: list[str] = []
        for a in assignments:
            name = a.split("=", 1)[0].rstrip("+")
            reason = env_flag(name)
            if reason:
                flags.append(reason)
        if words[0].dynamic or (raws[0] != "[" and any(c in _unquoted(raws[0]) for c in "*?[{")):
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
            if self.shell_c(argv, words):
                if flags:  # BASH_ENV=… bash -c '…': the prefix reaches the shell itself
                    self.commands.append(
                        ShellCommand(argv=argv, assignments=assignments, flags=tuple(flags), cwd=self.cwd)
                    )
                return
            if not argv[1:] or any(a not in ("--version", "--help") for a in argv[1:]):
                # `echo 'rm -rf x' | sh`, `bash script.sh`, `bash <<EOF`: commands the walk cannot see
                raise _Unprovable(f"{base} reads its commands from stdin or a script file")
        inner = _unwrap(argv)
        if inner is not None:
            start, extra_assign, inner_open = inner
            if any(w.dynamic for w in words[1:start]):
                raise _Unprovable(f"{base} arguments computed at run time")
            if base in _PRIVILEGED:
                self.commands.append(
                    ShellCommand(
                        argv=argv,
                        assignments=assignments,
                        flags=tuple(flags),
                        open_args=open_args,
                        words=tuple(words),
                        cwd=self.cwd,
                    )
                )
            if start >= len(argv):
                # a wrapper without a command (env prints the environment, exec only redirects)
                if base not in _PRIVILEGED:
                    self.commands.append(
                        ShellCommand(
                            argv=argv,
                            assignments=assignments,
                            flags=tuple(flags),
                            words=tuple(words),
                            cwd=self.cwd,
                        )
                    )
                return
            self.simple(
                argv[start:],
                words[start:],
                raws[start:],
                assignments + extra_assign,
                open_args=open_args or inner_open,
            )
            return
        flags.extend(option_flags(argv, base))
        if base in OPTION_CHECKED:
            if any(w.dynamic for w in words[1:]):
                flags.append(f"{base} arguments computed at run time could carry program-valued options")
            if any(
                w.glob and _unquoted(r)[:1] in ("*", "?", "[")
                for w, r in zip(words[1:], raws[1:], strict=True)
            ):
                # src/*.py only expands to names starting with src/; *.py may expand to "-e…"
                flags.append(f"{base} arguments expanded from file names could carry options")
            if open_args:
                flags.append(f"{base} gets extra arguments at run time (xargs)")
        literal = not any(w.dynamic or w.glob or w.tilde for w in words[1:])
        neutral = prog == base and not open_args and inert(argv, literal)
        self.commands.append(
            ShellCommand(
                argv=argv,
                assignments=assignments,
                open_args=open_args,
                flags=tuple(flags),
                neutral=neutral,
                words=tuple(words),
                cwd=self.cwd,
            )
        )
        if prog == base and base in ("cd", "pushd", "popd"):
            self.chdir(argv, words)

    def chdir(self, argv: tuple[str, ...], words: list[Word]) -> None:
        """Follow ``cd``: the candidates become the old ones plus each joined with the target."""
        args = list(zip(argv[1:], words[1:], strict=True))
        while args and args[0][0].startswith("-") and args[0][0] != "-":
            if args.pop(0)[0] == "--":
                break
        if argv[0] == "popd" or len(args) != 1 or self.cwd is None:
            self.cwd = None  # popd, a bare cd (home) or several words: not followed
            return
        target, info = args[0]
        if info.dynamic or info.glob or info.tilde or target == "-" or target.startswith("+"):
            self.cwd = None
            return
        moved = [os.path.normpath(os.path.join(c, target)) for c in self.cwd]
        candidates = tuple(dict.fromkeys((*self.cwd, *moved)))  # the cd may fail: the old ones stay
        self.cwd = candidates if len(candidates) <= _MAX_CWDS else None

    def shell_c(self, argv: tuple[str, ...], words: list[Word]) -> bool:
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
                    if words[i + 1].dynamic:
                        raise _Unprovable(f"{argv[0]} -c string computed at run time")
                    if self.depth >= _MAX_DEPTH:
                        raise _Unprovable("shell strings nested too deeply")
                    if set(w[1:]) & {"i", "l"}:
                        raise _Unprovable(f"{argv[0]} {w} reads startup files")
                    inner = analyze(argv[i + 1], _depth=self.depth + 1, _cwd=self.cwd)
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
            if w.startswith(("-C", "--chdir")):
                raise _Unprovable("env -C runs the command in another directory")
            if w in ("-u", "--unset"):
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


def analyze(command: str, *, _depth: int = 0, _cwd: tuple[str, ...] | None = ROOT_CWD) -> ShellAnalysis:
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
    text, quoted_heredocs = _unquote_heredocs(command) if "<<" in command else (command, frozenset[int]())
    # bashlex builds its parser tables when imported (~0.1 s): only a process that parses pays
    import bashlex  # type: ignore[import-untyped]
    import bashlex.errors  # type: ignore[import-untyped]

    walker = _Walker(text, _depth, _cwd, quoted_heredocs)
    try:
        trees = bashlex.parse(text)
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
