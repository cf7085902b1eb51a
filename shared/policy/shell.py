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
from typing import Any, Final

from .programs import OPTION_CHECKED, inert, option_flags
from .shell_model import (
    ROOT_CWD,
    SAFE_ENV_NAMES,
    Redirect,
    ShellAnalysis,
    ShellCommand,
    Unprovable,
    Word,
    env_flag,
)
from .shell_text import expands_tilde, parameter_problem, unquote_heredocs, unquoted
from .wrappers import Inner, unwrap

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


# --- the walk ------------------------------------------------------------------

_CD_WORD: Final = re.compile(r"(?<![\w.-])(?:cd|pushd|popd)(?![\w.-])")
_SEPARATORS: Final = ("operator", "pipe", "reservedword")


def _runnable(parts: list[Any]) -> list[Any]:
    """The parts of a list or pipeline that run (not ``;``, ``&&``, ``|`` or ``!``)."""
    return [p for p in parts if p.kind not in _SEPARATORS]


def _assignment_flags(assignments: tuple[str, ...]) -> list[str]:
    """Why the ``NAME=value`` prefixes of a command keep allow rules from covering it."""
    flags: list[str] = []
    for a in assignments:
        reason = env_flag(a.split("=", 1)[0].rstrip("+"))
        if reason:
            flags.append(reason)
    return flags


def _check_words(words: list[Word], raws: list[str]) -> None:
    """Raise when the program name is computed at run time or a word uses brace expansion."""
    if words[0].dynamic or (raws[0] != "[" and any(c in unquoted(raws[0]) for c in "*?[{")):
        raise Unprovable("the program name is computed at run time")
    for raw in raws:
        unq = unquoted(raw)
        if "{" in unq and ("," in unq or ".." in unq) and unq != "{}":
            raise Unprovable("brace expansion")


def _run_time_option_flags(base: str, words: list[Word], raws: list[str], *, open_args: bool) -> list[str]:
    """For a program whose options are checked: the arguments that could carry unseen options."""
    flags: list[str] = []
    if any(w.dynamic for w in words[1:]):
        flags.append(f"{base} arguments computed at run time could carry program-valued options")
    if any(w.glob and unquoted(r)[:1] in ("*", "?", "[") for w, r in zip(words[1:], raws[1:], strict=True)):
        # src/*.py only expands to names starting with src/; *.py may expand to "-e…"
        flags.append(f"{base} arguments expanded from file names could carry options")
    if open_args:
        flags.append(f"{base} gets extra arguments at run time (xargs)")
    return flags


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
        """Walk one bashlex node: what it runs, where, and with which redirections."""
        kind = n.kind
        if kind == "list":
            for p in _runnable(n.parts):
                self.node(p)
        elif kind == "pipeline":
            # every part of a pipeline runs in a subshell: a cd there does not last
            for p in _runnable(n.parts):
                self.isolated(p)
        elif kind == "compound":
            self.compound(n)
        elif kind in ("if", "for", "while", "until"):
            self.control(n)
        elif kind == "command":
            self.command(n)
        elif kind == "function":
            raise Unprovable("function definition (it can shadow any command)")
        else:
            raise Unprovable(f"unsupported shell construct {kind!r}")

    def compound(self, n: Any) -> None:
        """A subshell ``( … )`` or a brace group ``{ …; }`` (and its redirections)."""
        items = [p for p in n.list if p.kind != "reservedword"]
        first = n.list[0] if n.list else None
        subshell = first is not None and first.kind == "reservedword" and first.word == "("
        if subshell and items and items[0].kind == "compound" and items[0].pos[0] == n.pos[0] + 1:
            raise Unprovable("arithmetic command (( … ))")
        # a compound's redirections are opened before its body runs
        for r in getattr(n, "redirects", None) or ():
            self.redirect(r)
        for p in items:
            if subshell:
                self.isolated(p)
            else:
                self.node(p)

    def control(self, n: Any) -> None:
        """``if``, ``for``, ``while`` or ``until``: its words and every body."""
        if n.kind != "if" and _CD_WORD.search(self.raw(n)):
            # a later iteration runs where an earlier one moved to
            self.cwd = None
        for p in n.parts:
            if p.kind == "reservedword":
                continue
            if p.kind == "word":
                self.word_parts(p)
            else:
                self.node(p)

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
                problem = parameter_problem(self.raw(p))
                if problem:
                    raise Unprovable(problem)
            elif p.kind == "tilde":
                continue
            else:
                raise Unprovable(f"unsupported word part {p.kind!r}")
        return dynamic

    def word(self, w: Any) -> Word:
        dynamic = self.word_parts(w)
        raw = self.raw(w)
        parts: list[Any] = list(getattr(w, "parts", None) or ())
        if len(parts) == 1 and parts[0].kind == "processsubstitution" and parts[0].pos == w.pos:
            return Word()  # <(cmd) is a /dev/fd/N path (cmd itself was walked above)
        unq = unquoted(raw)
        return Word(dynamic=dynamic, glob=any(c in unq for c in "*?["), tilde=expands_tilde(raw))

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
                raise Unprovable("here-document with expansions")
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
        unq = unquoted(raw)
        write = op in _WRITE_OPS
        if op not in _WRITE_OPS and op not in _READ_OPS:
            raise Unprovable(f"unsupported redirection {op!r}")
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
                    raise Unprovable("array assignment (subscripts run code)")
                self.word_parts(p)
                assignments.append(p.word)
            elif p.kind == "word":
                words.append(p)
            elif p.kind == "redirect":
                self.redirect(p)
            else:
                raise Unprovable(f"unsupported command part {p.kind!r}")
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
        """Record the command ``argv`` (or the one a wrapper or ``sh -c`` runs) with its flags."""
        if len(self.commands) > _MAX_COMMANDS:
            raise Unprovable("too many commands")
        flags = _assignment_flags(assignments)
        _check_words(words, raws)
        prog = argv[0]
        base = os.path.basename(prog)
        if base in _UNPROVABLE_BUILTINS or prog in _UNPROVABLE_BUILTINS:
            raise Unprovable(f"{prog} changes how later commands run; cannot be judged")
        if base in _SHELLS and self.shell(argv, words, assignments, flags):
            return
        inner = unwrap(argv)
        if inner is not None:
            self.wrapped(argv, words, raws, assignments, flags, inner, open_args=open_args)
            return
        flags.extend(option_flags(argv, base))
        if base in OPTION_CHECKED:
            flags.extend(_run_time_option_flags(base, words, raws, open_args=open_args))
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

    def shell(
        self, argv: tuple[str, ...], words: list[Word], assignments: tuple[str, ...], flags: list[str]
    ) -> bool:
        """A shell: walk its ``-c`` string and return ``True``; ``False`` for ``--version``/``--help``."""
        if self.shell_c(argv, words):
            if flags:  # BASH_ENV=… bash -c '…': the prefix reaches the shell itself
                self.commands.append(
                    ShellCommand(argv=argv, assignments=assignments, flags=tuple(flags), cwd=self.cwd)
                )
            return True
        if not argv[1:] or any(a not in ("--version", "--help") for a in argv[1:]):
            # `echo 'rm -rf x' | sh`, `bash script.sh`, `bash <<EOF`: commands the walk cannot see
            raise Unprovable(f"{os.path.basename(argv[0])} reads its commands from stdin or a script file")
        return False

    def wrapped(
        self,
        argv: tuple[str, ...],
        words: list[Word],
        raws: list[str],
        assignments: tuple[str, ...],
        flags: list[str],
        inner: Inner,
        *,
        open_args: bool,
    ) -> None:
        """A wrapper: record it when it is privileged or runs nothing, then walk its inner command."""
        base = os.path.basename(argv[0])
        start, extra_assign, inner_open = inner
        if any(w.dynamic for w in words[1:start]):
            raise Unprovable(f"{base} arguments computed at run time")
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
                        raise Unprovable(f"{argv[0]} -c without a command string")
                    if words[i + 1].dynamic:
                        raise Unprovable(f"{argv[0]} -c string computed at run time")
                    if self.depth >= _MAX_DEPTH:
                        raise Unprovable("shell strings nested too deeply")
                    if set(w[1:]) & {"i", "l"}:
                        raise Unprovable(f"{argv[0]} {w} reads startup files")
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


def _refused_outright(command: str) -> ShellAnalysis | None:
    """The analysis of a string refused before parsing (too long, NUL, invisible characters …)."""
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
    if "$[" in unquoted(command):
        return ShellAnalysis(source=command, unprovable=("arithmetic expansion $[ … ]",))
    if not command.strip():
        return ShellAnalysis(source=command, unprovable=("empty command",))
    return None


def analyze(command: str, *, _depth: int = 0, _cwd: tuple[str, ...] | None = ROOT_CWD) -> ShellAnalysis:
    """Every command and redirection of ``command`` as bash would run it (see module doc)."""
    if not isinstance(command, str):
        return ShellAnalysis(source=str(command), unprovable=("command is not a string",))
    refused = _refused_outright(command)
    if refused is not None:
        return refused
    text, quoted_heredocs = unquote_heredocs(command) if "<<" in command else (command, frozenset[int]())
    # bashlex builds its parser tables when imported (~0.1 s): only a process that parses pays
    import bashlex  # type: ignore[import-untyped]
    import bashlex.errors  # type: ignore[import-untyped]

    walker = _Walker(text, _depth, _cwd, quoted_heredocs)
    try:
        trees = bashlex.parse(text)
        for tree in trees:
            walker.node(tree)
    except Unprovable as exc:
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
