"""The text the git service hands to git and reads back (pure): commit messages, branch names,
excluded paths as pathspecs, and the ``-z`` listings git prints.

Model text only reaches git after these checks (decision 0300): a branch name is one argv item
of a plain set of characters, a commit message one line of subject and a body on stdin.
"""

from __future__ import annotations

import os
import re
import unicodedata
from typing import Final

from jidocode.shared.errors import InvalidInput

__all__ = [
    "BRANCH_MAX",
    "SUBJECT_MAX",
    "commit_message",
    "exclude_specs",
    "gitlinks",
    "one_line",
    "parse_porcelain",
    "shown",
    "shown_list",
    "untracked_repos",
    "validate_branch_name",
]

SUBJECT_MAX: Final = 72
BRANCH_MAX: Final = 200
#: Mode of a gitlink (a nested repository's commit) in the index and in trees.
_GITLINK: Final = b"160000"
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_SPACES: Final = re.compile(r"\s+")
_BRANCH_CHARS: Final = re.compile(r"[A-Za-z0-9._/+-]+")


def one_line(text: str) -> str:
    """``text`` on one line: control characters (newlines included) become spaces, runs of spaces one."""
    return _SPACES.sub(" ", _CONTROL.sub(" ", unicodedata.normalize("NFC", text))).strip()


def commit_message(story_id: str, title: str, prd_name: str) -> str:
    """The commit message of a passed story: ``feat(<prd>): <story id> <title>`` (one line of at most
    72 characters, control characters stripped), a blank line, and a body naming story and PRD
    with the whole title."""
    sid, full, prd = one_line(story_id), one_line(title), one_line(prd_name)
    subject = one_line(f"feat({prd}): {sid} {full}")
    if len(subject) > SUBJECT_MAX:
        subject = subject[: SUBJECT_MAX - 1].rstrip() + "…"
    body = [f"Story: {sid}", f"Title: {full}", f"PRD: {prd}", "", "Committed by the JidoCode PRD loop."]
    return subject + "\n\n" + "\n".join(body) + "\n"


def validate_branch_name(branch: str) -> str:
    """The first check of a branch name (``InvalidInput``), before ``git check-ref-format --branch``:
    no option look-alike, no ``HEAD``, and only a plain set of characters: shell metacharacters
    (``;``, ``$``, backquotes) and ``@{…}`` (which that command would expand) are refused even
    though git would take some of them."""
    if not isinstance(branch, str) or not branch:
        raise InvalidInput("branch name is empty")
    if len(branch) > BRANCH_MAX:
        raise InvalidInput(f"branch name is {len(branch)} characters long (at most {BRANCH_MAX})")
    if branch.startswith("-"):
        raise InvalidInput(f"branch name {branch!r} starts with '-'", details={"branch": branch})
    if branch in {"HEAD", "@"} or not _BRANCH_CHARS.fullmatch(branch):
        raise InvalidInput(
            f"branch name {branch!r} is not allowed (letters, digits and . _ / + - only)",
            details={"branch": branch},
        )
    return branch


def shown(path: bytes) -> str:
    """A path git printed, as text that any JSON encoder takes (bytes that are not UTF-8 escaped)."""
    return path.decode("utf-8", "backslashreplace")


def parse_porcelain(data: bytes) -> list[str]:
    """The paths of ``git status --porcelain=v1 -z``: each entry ``XY path``, a rename's or copy's
    original path as the next NUL-terminated field (both are listed). Sorted, unique."""
    fields = data.split(b"\0")
    paths: set[str] = set()
    i = 0
    while i < len(fields):
        entry = fields[i]
        i += 1
        if not entry:
            continue
        if len(entry) < 4 or entry[2:3] != b" ":
            raise ValueError(f"not a porcelain v1 entry: {entry[:80]!r}")
        xy = entry[:2]
        paths.add(shown(entry[3:]))
        if b"R" in xy or b"C" in xy:
            if i < len(fields) and fields[i]:
                paths.add(shown(fields[i]))
            i += 1
    return sorted(paths)


def exclude_specs(prefixes: tuple[str, ...]) -> list[str]:
    """Literal exclude pathspecs (relative to the cwd) of ``prefixes``; ``InvalidInput`` for a prefix
    that is absolute, climbs out (``..``), or holds a NUL."""
    specs = []
    for prefix in prefixes:
        norm = prefix.strip("/")
        if not norm or "\0" in prefix or os.path.isabs(prefix) or ".." in norm.split("/"):
            raise InvalidInput(f"excluded path {prefix!r} must be a relative path inside the work dir")
        specs.append(f":(exclude,literal){norm}")
    return specs


def untracked_repos(porcelain: bytes) -> list[str]:
    """The untracked nested repositories of ``git status --porcelain=v1 -z --untracked-files=all``.

    With every untracked file listed one by one, a directory is listed only when git would not
    enter it: it holds a repository of its own (``?? sub/``).
    """
    found = []
    for entry in porcelain.split(b"\0"):
        if entry.startswith(b"?? ") and entry.endswith(b"/"):
            found.append(shown(entry[3:-1]))
    return sorted(found)


def gitlinks(listing: bytes) -> set[str]:
    """The gitlinks (mode 160000) of ``git ls-files --stage -z`` or ``git ls-tree -r -z`` output."""
    found = set()
    for entry in listing.split(b"\0"):
        meta, tab, path = entry.partition(b"\t")
        if tab and meta.split(b" ", 1)[0] == _GITLINK:
            found.add(shown(path))
    return found


def shown_list(paths: list[str], limit: int = 20) -> str:
    """The first ``limit`` paths, comma-separated, and how many more there are."""
    return ", ".join(paths[:limit]) + (f" and {len(paths) - limit} more" if len(paths) > limit else "")
