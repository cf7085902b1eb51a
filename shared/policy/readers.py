"""How each program that reads or writes its operands takes its arguments (pure tables).

:data:`READERS` maps a program's name to its :class:`ReaderSpec`; used by
:func:`jidocode.shared.policy.operands.operands` for every program without a
reader of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from .operand_model import option_set as _f


@dataclass(frozen=True)
class ReaderSpec:
    """How a reader takes its arguments."""

    #: Options that take a separate value (short ``-x`` and long ``--xx``).
    values: frozenset[str] = frozenset()
    #: Options whose value is a file read / written.
    reads: frozenset[str] = frozenset()
    writes: frozenset[str] = frozenset()
    #: The first operand is not a path (a pattern, a filter) unless one of ``given`` supplied it.
    skip_first: bool = False
    given: frozenset[str] = frozenset()
    #: Operands are read recursively always, or when one of these options is present.
    tree: bool = False
    tree_when: frozenset[str] = frozenset()
    #: Without operands the program reads the working directory.
    default_dot: bool = False
    #: Operands are written, not read.
    writes_operands: bool = False
    #: Operands to skip at the start (``chmod MODE file``) unless ``--reference`` is given.
    skip_lead: int = 0
    #: ``PROG in out``: the second operand is written (``uniq``, ``xxd``).
    second_writes: bool = False


_GREP = ReaderSpec(
    values=_f(
        "-e",
        "--regexp",
        "-f",
        "--file",
        "-m",
        "--max-count",
        "-A",
        "-B",
        "-C",
        "--after-context",
        "--before-context",
        "--context",
        "-d",
        "--directories",
        "-D",
        "--devices",
        "--label",
        "--exclude-from",
        "--binary-files",
        "--group-separator",
    ),
    reads=_f("-f", "--file", "--exclude-from"),
    skip_first=True,
    given=_f("-e", "--regexp", "-f", "--file"),
    tree_when=_f("-r", "-R", "--recursive", "--dereference-recursive"),
)
_RG = ReaderSpec(
    values=_f(
        "-e",
        "--regexp",
        "-f",
        "--file",
        "-g",
        "--glob",
        "--iglob",
        "-t",
        "--type",
        "-T",
        "--type-not",
        "--type-add",
        "--type-clear",
        "-m",
        "--max-count",
        "-A",
        "-B",
        "-C",
        "--context",
        "--after-context",
        "--before-context",
        "-j",
        "--threads",
        "-M",
        "--max-columns",
        "--max-depth",
        "-d",
        "-E",
        "--encoding",
        "--sort",
        "--sortr",
        "--color",
        "--colors",
        "--pre",
        "--pre-glob",
        "--ignore-file",
        "-r",
        "--replace",
        "--path-separator",
        "--max-filesize",
        "--engine",
        "--context-separator",
        "--field-match-separator",
        "--field-context-separator",
        "--dfa-size-limit",
        "--regex-size-limit",
    ),
    reads=_f("-f", "--file", "--ignore-file", "--pre"),
    skip_first=True,
    given=_f("-e", "--regexp", "-f", "--file"),
    tree=True,
    default_dot=True,
)
_SIMPLE = ReaderSpec()
_N = ReaderSpec(values=_f("-n", "-c", "--lines", "--bytes", "-s", "--sleep-interval", "--pid"))
READERS: Final[dict[str, ReaderSpec]] = {
    "cat": _SIMPLE,
    "tac": _SIMPLE,
    "nl": ReaderSpec(values=_f("-b", "-d", "-f", "-h", "-i", "-l", "-n", "-s", "-v", "-w")),
    "head": _N,
    "tail": _N,
    "less": ReaderSpec(
        values=_f(
            "-b", "-h", "-j", "-o", "-O", "-p", "-P", "-t", "-T", "-x", "-y", "-z", "--log-file", "--LOG-FILE"
        ),
        writes=_f("-o", "-O", "--log-file", "--LOG-FILE"),
    ),
    "more": _SIMPLE,
    "wc": ReaderSpec(reads=_f("--files0-from")),
    "od": ReaderSpec(values=_f("-A", "-j", "-N", "-t", "-w", "-S")),
    "xxd": ReaderSpec(values=_f("-c", "-g", "-l", "-o", "-s", "-n"), second_writes=True),
    "hexdump": ReaderSpec(values=_f("-e", "-f", "-n", "-s"), reads=_f("-f")),
    "strings": ReaderSpec(values=_f("-n", "-t", "-e")),
    "file": ReaderSpec(values=_f("-m", "-f", "-F", "-P"), reads=_f("-m", "-f")),
    "stat": ReaderSpec(values=_f("-c", "--format", "--printf")),
    "md5sum": _SIMPLE,
    "sha1sum": _SIMPLE,
    "sha256sum": _SIMPLE,
    "sha512sum": _SIMPLE,
    "b2sum": _SIMPLE,
    "cksum": _SIMPLE,
    "base64": ReaderSpec(values=_f("-w", "--wrap")),
    "base32": ReaderSpec(values=_f("-w", "--wrap")),
    "cut": ReaderSpec(values=_f("-b", "-c", "-d", "-f", "--delimiter", "--output-delimiter")),
    "paste": ReaderSpec(values=_f("-d", "--delimiters")),
    "join": ReaderSpec(values=_f("-1", "-2", "-a", "-e", "-j", "-o", "-t", "-v")),
    "comm": ReaderSpec(values=_f("--output-delimiter")),
    "cmp": ReaderSpec(values=_f("-i", "-n", "--ignore-initial", "--bytes")),
    "diff": ReaderSpec(
        values=_f("-U", "-C", "-L", "--label", "-x", "--exclude", "-X", "--exclude-from", "-I", "-F"),
        reads=_f("-X", "--exclude-from"),
        tree_when=_f("-r", "--recursive"),
    ),
    "uniq": ReaderSpec(values=_f("-f", "-s", "-w"), second_writes=True),
    "fold": ReaderSpec(values=_f("-w")),
    "fmt": ReaderSpec(values=_f("-w", "-p")),
    "column": ReaderSpec(values=_f("-s", "-c", "-o", "-t", "-N")),
    "expand": ReaderSpec(values=_f("-t")),
    "unexpand": ReaderSpec(values=_f("-t")),
    "iconv": ReaderSpec(values=_f("-f", "-t", "-o"), writes=_f("-o", "--output")),
    "zcat": _SIMPLE,
    "bzcat": _SIMPLE,
    "xzcat": _SIMPLE,
    "readlink": _SIMPLE,
    "realpath": ReaderSpec(values=_f("--relative-to", "--relative-base")),
    "ls": ReaderSpec(
        values=_f("-I", "--ignore", "--hide", "-w", "--width", "-T", "--tabsize", "--format", "--sort"),
        tree_when=_f("-R", "--recursive"),
        default_dot=True,
    ),
    "du": ReaderSpec(
        values=_f("-d", "--max-depth", "-t", "--threshold", "--exclude", "-B"), tree=True, default_dot=True
    ),
    "tree": ReaderSpec(
        values=_f("-L", "-I", "-P", "-o", "--filelimit"), writes=_f("-o"), tree=True, default_dot=True
    ),
    "grep": _GREP,
    "egrep": _GREP,
    "fgrep": _GREP,
    "rg": _RG,
    "ag": ReaderSpec(
        values=_f("-G", "--file-search-regex", "--ignore", "-A", "-B", "-C", "-m"),
        skip_first=True,
        tree=True,
        default_dot=True,
    ),
    "ack": ReaderSpec(
        values=_f("--type", "-A", "-B", "-C", "-m"), skip_first=True, tree=True, default_dot=True
    ),
    "jq": ReaderSpec(
        values=_f("--arg", "--argjson", "--slurpfile", "--rawfile", "--indent", "-f", "--from-file", "-L"),
        reads=_f("-f", "--from-file"),
        skip_first=True,
        given=_f("-f", "--from-file"),
    ),
    "sort": ReaderSpec(
        values=_f(
            "-o",
            "--output",
            "-t",
            "--field-separator",
            "-k",
            "--key",
            "-S",
            "--buffer-size",
            "-T",
            "--temporary-directory",
            "--compress-program",
            "--files0-from",
            "--parallel",
            "--batch-size",
            "--random-source",
        ),
        reads=_f("--files0-from", "--random-source"),
        writes=_f("-o", "--output", "-T", "--temporary-directory"),
    ),
    "shuf": ReaderSpec(
        values=_f("-n", "-o", "--output", "--random-source", "-i"), writes=_f("-o", "--output")
    ),
    "tee": ReaderSpec(writes_operands=True),
    "touch": ReaderSpec(
        values=_f("-r", "-d", "-t", "--reference", "--date"),
        reads=_f("-r", "--reference"),
        writes_operands=True,
    ),
    "truncate": ReaderSpec(
        values=_f("-s", "-r", "--size", "--reference"), reads=_f("-r", "--reference"), writes_operands=True
    ),
    "rm": ReaderSpec(writes_operands=True),
    "rmdir": ReaderSpec(writes_operands=True),
    "unlink": ReaderSpec(writes_operands=True),
    "shred": ReaderSpec(
        values=_f("-n", "-s", "--iterations", "--size", "--random-source"), writes_operands=True
    ),
    "mkdir": ReaderSpec(values=_f("-m", "--mode", "--context"), writes_operands=True),
    "chmod": ReaderSpec(values=_f("--reference"), reads=_f("--reference"), writes_operands=True, skip_lead=1),
    "chown": ReaderSpec(
        values=_f("--reference", "--from"), reads=_f("--reference"), writes_operands=True, skip_lead=1
    ),
    "chgrp": ReaderSpec(values=_f("--reference"), reads=_f("--reference"), writes_operands=True, skip_lead=1),
    "find": ReaderSpec(),  # handled below
}
