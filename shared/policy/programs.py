"""Options that make a program run another program, and builtins that are not inert (pure tables).

:func:`option_flags` gives, for one simple command, the reasons no allow rule
may cover it: a program-valued option (``git -c``, ``find -exec``,
``rg --pre``, ``git grep -O``), a sed or awk program that runs commands or
touches files (:mod:`.scripts`), git plumbing that writes arbitrary content
into the work tree, an archive extraction whose file names are not visible,
or a builtin that assigns a variable named by its argument (array subscripts
in such a name run code: ``wait -p 'a[$(id)]'``).

:func:`inert` says which builtins need no rule at all: only those that run
nothing and assign nothing, with their options checked.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from .scripts import awk_risk, sed_risk

__all__ = [
    "GIT_VALUE_OPTIONS",
    "OPTION_CHECKED",
    "git_subcommand",
    "inert",
    "opt_is",
    "option_flags",
]


def opt_is(word: str, *names: str) -> bool:
    """Whether ``word`` is one of the options ``names`` (``--x=v`` and an attached ``-xv`` included)."""
    for name in names:
        if word == name or (name.startswith("--") and word.startswith(name + "=")):
            return True
        if (
            not name.startswith("--")
            and len(name) == 2
            and word.startswith(name)
            and not word.startswith("--")
        ):
            return True  # -cfoo, -Ifoo: an attached value
    return False


# --- git -------------------------------------------------------------------------------

#: git's global options that take a separate value.
GIT_VALUE_OPTIONS: Final = frozenset(
    {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--super-prefix", "--config-env", "--list-cmds"}
)
_GIT_PLUMBING_WRITERS: Final = frozenset(
    {
        "update-index",
        "checkout-index",
        "read-tree",
        "mktree",
        "commit-tree",
        "update-ref",
        "symbolic-ref",
        "fast-import",
        "unpack-objects",
        "replace",
        "am",
    }
)
_GIT_RUNS_PROGRAMS: Final = frozenset(
    {"difftool", "mergetool", "send-email", "instaweb", "daemon", "web--browse", "credential", "p4", "svn"}
)


def git_subcommand(argv: tuple[str, ...]) -> tuple[str | None, int]:
    """git's subcommand and its index in ``argv`` (``None``, 0 without one)."""
    i = 1
    while i < len(argv):
        w = argv[i]
        if w in GIT_VALUE_OPTIONS:
            i += 2
            continue
        if w.startswith("-"):
            i += 1
            continue
        return w, i
    return None, 0


def _git_flags(argv: tuple[str, ...]) -> list[str]:
    """Why a ``git`` command may run programs or write what the command does not show."""
    sub, sub_index = git_subcommand(argv)
    out = [
        f"git option {w.split('=')[0]} can run programs or redirect the repository"
        for w in argv[1 : sub_index or len(argv)]
        if opt_is(w, "-c", "--config-env", "--exec-path", "--git-dir", "--work-tree", "--namespace")
    ]
    if sub is None:
        return out
    rest = argv[sub_index + 1 :]
    out.extend(_git_subcommand_option_flags(sub, rest))
    out.extend(_git_subcommand_flags(sub, rest))
    return out


def _git_subcommand_option_flags(sub: str, rest: tuple[str, ...]) -> list[str]:
    """Options of the subcommand that name a program to run."""
    out: list[str] = []
    for w in rest:
        if opt_is(w, "--upload-pack", "--receive-pack", "--exec", "--extcmd", "--template"):
            out.append(f"git {sub} option {w.split('=')[0]} runs a program")
        elif sub in ("clone", "fetch", "pull", "ls-remote", "archive", "push") and w == "-u":
            out.append(f"git {sub} -u names a program to run")
        elif sub in ("rebase", "difftool") and (w == "-x" or w.startswith("-x")):
            out.append(f"git {sub} -x runs a command")
        elif sub == "grep" and (opt_is(w, "-O", "--open-files-in-pager")):
            out.append("git grep -O runs a program on the matching files")
    return out


def _git_subcommand_flags(sub: str, rest: tuple[str, ...]) -> list[str]:
    """Subcommands that run code or write content the command line does not show."""
    out: list[str] = []
    if sub in ("filter-branch", "filter-repo"):
        out.append(f"git {sub} runs shell code")
    if sub in _GIT_RUNS_PROGRAMS:
        out.append(f"git {sub} runs external programs")
    if sub in _GIT_PLUMBING_WRITERS:
        out.append(f"git {sub} writes arbitrary content into the index or work tree (protected files too)")
    if sub == "hash-object" and "-w" in rest:
        out.append("git hash-object -w writes objects that plumbing can check out anywhere")
    if sub == "apply" and not any(w in ("--check", "--stat", "--numstat", "--summary") for w in rest):
        out.append("git apply writes the files its patch names (not visible in the command)")
    if sub == "submodule" and "foreach" in rest:
        out.append("git submodule foreach runs shell code")
    if sub == "bisect" and rest[:1] == ("run",):
        out.append("git bisect run runs a command")
    if sub == "config" and not any(
        w in ("-l", "--list", "--get", "--get-all", "--get-regexp", "--show-origin") for w in rest
    ):
        out.append("git config may write the repository configuration (protected)")
    return out


# --- other programs ---------------------------------------------------------------------

_FIND_ACTIONS: Final = frozenset(
    {"-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf", "-fls"}
)


def _find_flags(argv: tuple[str, ...]) -> list[str]:
    return [f"find {w} runs a program or writes files" for w in argv[1:] if w in _FIND_ACTIONS]


def _table_flags(options: tuple[str, ...], what: str) -> Callable[[tuple[str, ...]], list[str]]:
    def check(argv: tuple[str, ...]) -> list[str]:
        return [f"{what} option {w.split('=')[0]} runs a program" for w in argv[1:] if opt_is(w, *options)]

    return check


_AWK_VALUE: Final = frozenset({"-v", "-F", "-f", "-e", "-i", "-l", "-E"})
_AWK_LONG_VALUE: Final = frozenset(
    {"--assign", "--field-separator", "--file", "--source", "--include", "--load", "--exec"}
)
_AWK_SAFE_SWITCHES: Final = frozenset(
    {"-b", "-c", "-n", "-N", "-P", "-r", "-s", "-S", "-t", "-M", "--posix", "--traditional", "--sandbox"}
)


def awk_split(argv: tuple[str, ...]) -> tuple[list[str], list[int], list[str]]:
    """awk's program texts, the indexes of its file operands and the options it does not understand."""
    programs: list[str] = []
    files: list[int] = []
    unknown: list[str] = []
    from_file = False
    i, n = 1, len(argv)
    while i < n:
        w = argv[i]
        if w == "--":
            i += 1
            break
        if not w.startswith("-") or w == "-":
            break
        name, eq, value = w.partition("=") if w.startswith("--") else (w[:2], "", w[2:])
        has_value = bool(eq or value)
        if name in _AWK_VALUE or name in _AWK_LONG_VALUE:
            if not has_value:
                i += 1
                value = argv[i] if i < n else ""
            if name in ("-f", "--file", "-i", "--include", "-l", "--load", "-E", "--exec"):
                from_file = True
                unknown.append(f"{name} loads a program file")
            elif name in ("-e", "--source"):
                programs.append(value)
        elif w not in _AWK_SAFE_SWITCHES:
            unknown.append(w)
        i += 1
    if not programs and not from_file and i < n:
        programs.append(argv[i])
        i += 1
    for j in range(i, n):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", argv[j], re.DOTALL):
            files.append(j)
    return programs, files, unknown


def _awk_flags(argv: tuple[str, ...]) -> list[str]:
    programs, _, unknown = awk_split(argv)
    out = [f"awk option {u} is not understood or loads code" for u in unknown]
    for p in programs:
        risk = awk_risk(p)
        if risk:
            out.append(risk)
    if not programs and not unknown:
        out.append("awk without a program")
    return out


_SED_VALUE: Final = frozenset({"-e", "-f", "-l"})
_SED_LONG_VALUE: Final = frozenset({"--expression", "--file", "--line-length"})
_SED_SWITCHES: Final = frozenset(
    {
        "-n",
        "-E",
        "-r",
        "-s",
        "-u",
        "-z",
        "--quiet",
        "--silent",
        "--regexp-extended",
        "--separate",
        "--unbuffered",
        "--null-data",
        "--posix",
        "--debug",
        "--sandbox",
        "--follow-symlinks",
    }
)


def sed_split(argv: tuple[str, ...]) -> tuple[list[str], list[int], bool, list[str]]:
    """sed's scripts, the indexes of its file operands, whether it edits in place, and odd options."""
    words = _SedWords(argv)
    i, n = 1, len(argv)
    while i < n:
        w = argv[i]
        if w == "--":
            words.operands.extend(range(i + 1, n))
            break
        if w.startswith("--"):
            i = words.long_option(w, i)
        elif w.startswith("-") and w != "-":
            i = words.short_options(w, i)
        else:
            words.operands.append(i)
        i += 1
    scripts, operands = words.scripts, words.operands
    if not words.explicit and operands:
        scripts.append(argv[operands[0]])
        operands = operands[1:]
    return scripts, list(operands), words.in_place, words.odd


@dataclass
class _SedWords:
    """What :func:`sed_split` has read of sed's words so far."""

    argv: tuple[str, ...]
    scripts: list[str] = field(default_factory=list)
    operands: list[int] = field(default_factory=list)
    odd: list[str] = field(default_factory=list)
    in_place: bool = False
    #: A script came from ``-e``/``-f``: the first operand is a file, not the script.
    explicit: bool = False

    def value_after(self, i: int) -> tuple[int, str]:
        """The option's value in the next word: (its index, the value or ``""`` past the end)."""
        i += 1
        return i, self.argv[i] if i < len(self.argv) else ""

    def long_option(self, w: str, i: int) -> int:
        """Read ``--name[=value]`` at ``i``; return the index of the last word it used."""
        name, eq, value = w.partition("=")
        if name in _SED_LONG_VALUE:
            if not eq:
                i, value = self.value_after(i)
            if name == "--expression":
                self.scripts.append(value)
                self.explicit = True
            elif name == "--file":
                self.explicit = True
                self.odd.append("--file loads a script file")
        elif name == "--in-place":
            self.in_place = True
        elif name not in _SED_SWITCHES:
            self.odd.append(name)
        return i

    def short_options(self, w: str, i: int) -> int:
        """Read the clustered short options ``w`` at ``i``; return the index of the last word used."""
        j = 1
        while j < len(w):
            o = "-" + w[j]
            if o == "-i":
                self.in_place = True  # -i[SUFFIX]: the rest of the word is the suffix
                break
            if o in _SED_VALUE:
                value = w[j + 1 :]
                if not value:
                    i, value = self.value_after(i)
                if o == "-e":
                    self.scripts.append(value)
                    self.explicit = True
                elif o == "-f":
                    self.explicit = True
                    self.odd.append("-f loads a script file")
                break
            if o not in _SED_SWITCHES:
                self.odd.append(o)
            j += 1
        return i


def _sed_flags(argv: tuple[str, ...]) -> list[str]:
    scripts, _, _, odd = sed_split(argv)
    out = [f"sed option {o} is not understood or loads a script" for o in odd]
    if "--sandbox" in argv:
        return out
    for s in scripts:
        risk = sed_risk(s)
        if risk:
            out.append(f"sed script: {risk}")
    return out


def _make_flags(argv: tuple[str, ...]) -> list[str]:
    return [
        f"make variable {w.split('=')[0]} names a program"
        for w in argv[1:]
        if re.match(r"^\.?SHELL(FLAGS)?=|^MAKE=", w)
    ]


def _tar_flags(argv: tuple[str, ...]) -> list[str]:
    out = _table_flags(
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
    )(argv)
    if tar_extracts(argv):
        out.append("tar extracts files whose names are not in the command (they may replace protected files)")
    return out


def tar_extracts(argv: tuple[str, ...]) -> bool:
    """Whether a tar command extracts (``x``, ``--extract``, ``--get``)."""
    for k, w in enumerate(argv[1:], start=1):
        if w in ("--extract", "--get"):
            return True
        if w.startswith("-") and not w.startswith("--") and "x" in w[1:]:
            return True
        if k == 1 and not w.startswith("-") and "x" in w:
            return True  # old style: tar xf a.tar
    return False


def _unzip_flags(argv: tuple[str, ...]) -> list[str]:
    if any(w in ("-l", "-t", "-v", "-p", "-Z", "-z") for w in argv[1:]):
        return []
    return ["unzip extracts files whose names are not in the command (they may replace protected files)"]


def _patch_flags(argv: tuple[str, ...]) -> list[str]:
    if "--dry-run" in argv:
        return []
    return ["patch writes the files its patch names (not visible in the command)"]


def _curl_flags(argv: tuple[str, ...]) -> list[str]:
    if any(opt_is(w, "--remote-name", "--remote-name-all", "--remote-header-name") for w in argv[1:]) or any(
        w.startswith("-") and not w.startswith("--") and ("O" in w[1:] or "J" in w[1:]) for w in argv[1:]
    ):
        return ["curl -O/-J names its output file after the server's answer"]
    return []


def _wget_flags(argv: tuple[str, ...]) -> list[str]:
    if any(opt_is(w, "-O", "--output-document", "--spider") for w in argv[1:]):
        return []
    return ["wget names its output file after the URL"]


_OPTION_CHECKS: Final[dict[str, Callable[[tuple[str, ...]], list[str]]]] = {
    "git": _git_flags,
    "find": _find_flags,
    "rsync": _table_flags(("-e", "--rsh", "--rsync-path"), "rsync"),
    "ssh": _table_flags(("-o", "-F"), "ssh"),
    "scp": _table_flags(("-S", "-o", "-F"), "scp"),
    "sftp": _table_flags(("-S", "-o", "-F"), "sftp"),
    "tar": _tar_flags,
    "zip": _table_flags(("-TT", "--unzip-command"), "zip"),
    "unzip": _unzip_flags,
    "patch": _patch_flags,
    "sort": _table_flags(("--compress-program",), "sort"),
    "man": _table_flags(("-P", "--pager", "-H", "--html"), "man"),
    "less": _table_flags(("--lesskey-src", "-k"), "less"),
    "rg": _table_flags(("--pre",), "rg"),
    "npm": _table_flags(("--script-shell",), "npm"),
    "yarn": _table_flags(("--script-shell",), "yarn"),
    "pnpm": _table_flags(("--script-shell",), "pnpm"),
    "curl": _curl_flags,
    "wget": _wget_flags,
    "awk": _awk_flags,
    "gawk": _awk_flags,
    "mawk": _awk_flags,
    "nawk": _awk_flags,
    "sed": _sed_flags,
    "gsed": _sed_flags,
    "make": _make_flags,
    "gmake": _make_flags,
}
#: Programs whose options are checked above: arguments computed at run time could hide such an option.
OPTION_CHECKED: Final = frozenset(_OPTION_CHECKS)


# --- builtins ----------------------------------------------------------------------------


def _builtin_flags(argv: tuple[str, ...]) -> list[str]:
    name, args = argv[0], argv[1:]
    # A variable name given to these is assigned; a subscript in it is evaluated and runs $(…).
    if name == "printf" and any(opt_is(w, "-v") for w in args):
        return ["printf -v assigns a variable (array subscripts run code)"]
    if name in ("test", "[") and "-v" in args:
        return ["test -v evaluates array subscripts"]
    if name == "wait" and any(w == "-p" or (w.startswith("-") and "p" in w[1:]) for w in args):
        return ["wait -p assigns a variable (array subscripts run code)"]
    if name == "read" and any(w.startswith("-") and "a" in w[1:] for w in args):
        return ["read -a assigns an array"]
    if name == "getopts":
        return ["getopts assigns a variable named by its argument"]
    if name in ("read", "unset") and any("[" in w for w in args):
        return [f"{name} with an array subscript evaluates code"]
    return []


def option_flags(argv: tuple[str, ...], base: str) -> list[str]:
    """Why an allow rule may not cover this command (empty: the rules decide)."""
    check = _OPTION_CHECKS.get(base)
    out = check(argv) if check is not None else []
    out.extend(_builtin_flags(argv))
    return out


_JOB: Final = re.compile(r"\d+|%[+%-]?|%\d+|%[A-Za-z0-9_.-]+")
_SET_SAFE: Final = re.compile(r"[-+][euxvo]+|pipefail|errexit|nounset|xtrace")


def inert(argv: tuple[str, ...], literal: bool) -> bool:
    """Whether the builtin ``argv`` runs nothing and assigns nothing (needs no rule).

    ``literal``: no argument is computed at run time. Everything not listed
    here (``echo``, ``read``, ``printf``, ``kill``, ``command -v`` …) needs a
    rule like any program; ``eval``, ``source``, ``declare`` and their kind
    are unprovable (:mod:`.shell`).
    """
    name, args = argv[0], argv[1:]
    if name in (":", "true", "false"):
        return True
    if name == "pwd":
        return all(a in ("-L", "-P") for a in args)
    if name in ("cd", "pushd", "popd"):
        return True  # the walker follows the working directory; a cd that it cannot is judged later
    if name in ("exit", "return", "break", "continue", "shift"):
        return literal and len(args) <= 1 and all(re.fullmatch(r"-?\d{1,9}", a) for a in args)
    if name == "wait":
        return literal and all(a in ("-n", "-f") or _JOB.fullmatch(a) for a in args)
    if name == "set":
        return literal and all(_SET_SAFE.fullmatch(a) for a in args)
    if name in ("test", "["):
        # file tests and comparisons (no arithmetic evaluation in test); -v/-R look up variables
        return not any(a in ("-v", "-R") for a in args)
    if name == "read":
        return literal and _plain_read(args)
    return False


_READ_VALUE: Final = frozenset({"-t", "-n", "-N", "-d", "-p", "-u"})
_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _plain_read(args: tuple[str, ...]) -> bool:
    """``read [-rs] [-t N] … name…`` assigning plain variables (no ``-a``, no subscripts)."""
    i = 0
    while i < len(args) and args[i].startswith("-") and args[i] != "--":
        opt = args[i]
        if opt in _READ_VALUE:
            i += 2
            continue
        if not re.fullmatch(r"-[rse]+", opt):
            return False
        i += 1
    if i < len(args) and args[i] == "--":
        i += 1
    return all(_NAME.fullmatch(a) for a in args[i:])
