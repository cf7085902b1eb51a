"""What :func:`~jidocode.shared.policy.operands.operands` returns, and the option reader it uses.

Pure: :class:`PathUse`, :class:`Transfer` and :class:`Operands` (re-exported by
:mod:`jidocode.shared.policy.operands`), and :func:`parse_options`, which reads
GNU-style options (anywhere, ``--name=value``, clustered short flags) for
every program table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final, Literal

UseKind = Literal["read", "read_tree", "write", "cwd", "link", "mention"]
#: A link destination that covers everything (the whole work tree may change).
ALL: Final = "\x00all"


@dataclass(frozen=True)
class PathUse:
    """One word (or the value inside one word) that names a path."""

    index: int
    text: str
    kind: UseKind
    #: The path is the whole word, so bash's globbing applies to it.
    whole: bool = True


@dataclass(frozen=True)
class Transfer:
    """``cp``/``mv``/``ln``/``install``/``rsync``: sources put into a destination."""

    sources: tuple[tuple[int, str], ...]
    dest: tuple[int, str]
    #: ``True``: the destination is a directory; ``None``: it is one if it exists as one.
    into_dir: bool | None
    recursive: bool
    #: The sources become links (``ln``) or links are copied as links.
    makes_links: bool


@dataclass
class Operands:
    uses: list[PathUse] = field(default_factory=list)
    transfer: Transfer | None = None
    #: Paths that may become links during the call: (word index, text); ``text == ALL`` for the tree.
    links: list[tuple[int, str]] = field(default_factory=list)
    #: The program is in the tables (its file operands are known); else its words are mentions.
    known: bool = True
    #: What the program does with an operand (``xargs`` appends operands at run time).
    operand_kinds: tuple[UseKind, ...] = ("read",)


def option_set(*names: str) -> frozenset[str]:
    """A set of option names (written as a call so the tables read as lists)."""
    return frozenset(names)


def parse_options(
    argv: tuple[str, ...], values: frozenset[str]
) -> tuple[list[int], list[tuple[int, str, str, bool]]]:
    """(operand indexes, options as (index, name, value, value_is_whole_word)); GNU-style, options anywhere."""
    operands: list[int] = []
    options: list[tuple[int, str, str, bool]] = []
    i, n = 1, len(argv)
    while i < n:
        w = argv[i]
        if w == "--":
            operands.extend(range(i + 1, n))
            break
        if w.startswith("--"):
            name, eq, value = w.partition("=")
            if eq:
                options.append((i, name, value, False))
            elif name in values and i + 1 < n:
                options.append((i + 1, name, argv[i + 1], True))
                i += 1
            else:
                options.append((i, name, "", False))
        elif re.fullmatch(r"-\d+", w):
            options.append((i, w, "", False))  # head -5
        elif w.startswith("-") and len(w) > 1:
            j = 1
            while j < len(w):
                o = "-" + w[j]
                if o in values:
                    value = w[j + 1 :]
                    if value:
                        options.append((i, o, value, False))
                    elif i + 1 < n:
                        options.append((i + 1, o, argv[i + 1], True))
                        i += 1
                    break
                options.append((i, o, "", False))
                j += 1
        else:
            operands.append(i)
        i += 1
    return operands, options


def use(argv: tuple[str, ...], i: int, kind: UseKind) -> PathUse:
    """The whole word ``argv[i]`` as a path used as ``kind``."""
    return PathUse(i, argv[i], kind)
