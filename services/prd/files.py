"""A PRD's files under ``<root>/.daedalus/`` (seed 004 directory layout), written atomically.

Layout::

    <root>/.daedalus/.gitignore          worktrees/ and the logs (ensure_gitignored)
    <root>/.daedalus/prds/<name>/prd.md        the document for people (rendered at creation)
                                 prd.json      the document for the loop (docs/prd.schema.json)
                                 progress.md   what each story's attempts did, appended
                                 agent.log     the provider's raw output, appended, rotated
                                 events.jsonl  the loop's events (written by the event log)
    <root>/.daedalus/worktrees/<name>/   the PRD's git worktree, when asked for

Everything under ``.daedalus`` comes from the project, so it is untrusted input: a symlink at
``.daedalus``, ``prds``, ``<name>`` or a file in it could point the loop's writes (or reads) at any
file of the user. Every path is therefore opened component by component from the root with
``O_NOFOLLOW`` (``openat``), and a symlink anywhere below the root is refused with
``InvalidInput`` naming it (docs/decisions/0273-prd-files-no-symlinks-and-gitignore.md). The files
themselves are written through :mod:`jidocode.shared.nofollow` (docs/decisions/0301): replaced by
rename, appended only to a regular file with no other name (a hard link could be a file outside the
project), never through a link, never cut.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from jidocode.shared.errors import Conflict, InvalidInput, NotFound, PayloadTooLarge
from jidocode.shared.nofollow import append_bytes, create_bytes, dir_fd, open_read, replace_bytes

from .model import NAME_PATTERN, Prd, error_path, parse_prd_data

__all__ = [
    "AGENT_LOG_MAX_BYTES",
    "GITIGNORE_LINES",
    "MAX_ENTRY_BYTES",
    "MAX_PRD_BYTES",
    "PROGRESS_MAX_BYTES",
    "PROGRESS_READ_BYTES",
    "PrdPaths",
    "append_agent_log",
    "append_progress",
    "create_prd",
    "ensure_gitignored",
    "error_path",
    "list_prds",
    "load_prd",
    "locate",
    "parse_prd",
    "read_progress",
    "render_prd_md",
    "save_prd",
]

#: ``prd.json`` larger than this is refused unread (500 stories of capped size fit well within).
MAX_PRD_BYTES: Final = 1024 * 1024
#: ``agent.log`` is rotated to ``agent.log.1`` (replacing the previous one) when an append would
#: take it past this: the last 8 MiB at least, 16 MiB at most, are kept.
AGENT_LOG_MAX_BYTES: Final = 8 * 1024 * 1024
#: ``progress.md`` rotates to ``progress.md.1`` the same way, past 2 MiB.
PROGRESS_MAX_BYTES: Final = 2 * 1024 * 1024
#: One appended entry keeps its first this many bytes (and says it was cut).
MAX_ENTRY_BYTES: Final = 1024 * 1024
#: What :func:`read_progress` returns at most (the end of the file: the newest entries).
PROGRESS_READ_BYTES: Final = 64 * 1024
#: ``.daedalus/.gitignore``: runtime state never belongs in a commit; the PRD documents may.
GITIGNORE_LINES: Final = ("worktrees/", "prds/*/agent.log*", "prds/*/events.jsonl", "*.tmp")

_NAME_RE = re.compile(NAME_PATTERN)
_CUT = "\n…(cut: entry over {limit} bytes)\n"


@dataclass(frozen=True)
class PrdPaths:
    """Where one PRD's files are; the name is checked here, so no path can leave ``.daedalus``."""

    root: Path
    name: str

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME_RE.match(self.name):
            raise InvalidInput(
                f"PRD name {self.name!r} must be 1-64 letters, digits, '_' or '-'",
                details={"field": "name", "value": str(self.name)[:100]},
            )

    @property
    def dir(self) -> Path:
        return self.root / ".daedalus" / "prds" / self.name

    @property
    def prd_md(self) -> Path:
        return self.dir / "prd.md"

    @property
    def prd_json(self) -> Path:
        return self.dir / "prd.json"

    @property
    def progress_md(self) -> Path:
        return self.dir / "progress.md"

    @property
    def agent_log(self) -> Path:
        return self.dir / "agent.log"

    @property
    def events_jsonl(self) -> Path:
        return self.dir / "events.jsonl"

    @property
    def worktree(self) -> Path:
        return self.root / ".daedalus" / "worktrees" / self.name


# --- opening without following links ----------------------------------------------------------------


def _symlink_error(path: Path) -> InvalidInput:
    return InvalidInput(
        f"{path} is a symbolic link or not a directory; PRD files are not read or written through "
        "links (a link could lead outside the project)",
        details={"file": str(path)},
    )


def _missing(root: Path) -> Callable[[str], NotFound]:
    def error(path: str) -> NotFound:
        if path == str(root):
            return NotFound(f"project directory {root} does not exist", details={"file": path})
        return NotFound(f"{path} does not exist", details={"file": path})

    return error


def _dir_fd(
    root: Path, parts: tuple[str, ...], *, create: bool = False
) -> contextlib.AbstractContextManager[int]:
    """A descriptor of ``root/parts…`` reached without following a link below ``root``.

    ``create`` makes missing directories (mode 0755); otherwise a missing one is ``NotFound``.
    """
    return dir_fd(
        root, parts, create=create, missing=_missing(root), linked=lambda path: _symlink_error(Path(path))
    )


def locate(path: Path) -> tuple[Path, tuple[str, ...], str]:
    """``(root, dirs below it, file name)`` for a path of the seed's layout, else the parent as root.

    ``<root>/.daedalus/prds/<name>/<file>`` is checked link-free from ``<root>``; any other path
    only in its last component.
    """
    parts = path.parts
    if len(parts) >= 4 and parts[-4] == ".daedalus" and parts[-3] == "prds":
        return Path(*parts[:-4]), (".daedalus", "prds", parts[-2]), parts[-1]
    return path.parent, (), path.name


def _read_capped(fd: int, limit: int, shown: Path) -> bytes:
    info = os.fstat(fd)
    if info.st_size > limit:
        raise PayloadTooLarge(
            f"{shown} is {info.st_size} bytes, more than the {limit} bytes a PRD may have",
            details={"file": str(shown), "size": info.st_size, "limit": limit},
        )
    chunks: list[bytes] = []
    total = 0
    while chunk := os.read(fd, 65536):
        total += len(chunk)
        if total > limit:  # it grew while we read
            raise PayloadTooLarge(
                f"{shown} is more than the {limit} bytes a PRD may have",
                details={"file": str(shown), "limit": limit},
            )
        chunks.append(chunk)
    return b"".join(chunks)


# --- errors naming the field ----------------------------------------------------------------------


def parse_prd(raw: bytes, shown: Path) -> Prd:
    """Decode and validate ``prd.json`` bytes; ``InvalidInput`` naming the file and the field."""
    try:
        # utf-8-sig: a byte order mark some editors write is not worth refusing the file for
        value: Any = json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise InvalidInput(
            f"{shown}: not valid UTF-8 at byte {exc.start}", details={"file": str(shown)}
        ) from None
    except json.JSONDecodeError as exc:
        raise InvalidInput(
            f"{shown}: invalid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})",
            details={"file": str(shown), "line": exc.lineno},
        ) from None
    except RecursionError:
        raise InvalidInput(f"{shown}: JSON nested too deeply", details={"file": str(shown)}) from None
    return parse_prd_data(value, source=str(shown))


# --- the operations ---------------------------------------------------------------------------------


def list_prds(root: Path) -> list[str]:
    """The names of the PRDs of ``root`` (directories with a ``prd.json``), sorted."""
    try:
        with _dir_fd(root, (".daedalus", "prds")) as dfd:
            names = []
            for name in os.listdir(dfd):
                if not _NAME_RE.match(name):
                    continue
                try:
                    info = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if not stat.S_ISDIR(info.st_mode):
                    continue
                with contextlib.suppress(FileNotFoundError):
                    os.stat(f"{name}/prd.json", dir_fd=dfd, follow_symlinks=False)
                    names.append(name)
            return sorted(names)
    except NotFound:
        return []


def load_prd(path: Path, *, max_bytes: int = MAX_PRD_BYTES) -> Prd:
    """``InvalidInput`` naming the file and the field (``userStories[1].title: …``).

    ``path`` is a ``prd.json``; in the seed's layout no link between the root and it is followed.
    Missing: ``NotFound``; larger than ``max_bytes``: ``PayloadTooLarge``.
    """
    path = Path(path)
    root, dirs, name = locate(path)
    with _dir_fd(root, dirs) as dfd:
        fd = open_read(dfd, name, shown=path)  # a FIFO planted as prd.json is refused, not waited on
        try:
            raw = _read_capped(fd, max_bytes, path)
        finally:
            os.close(fd)
    return parse_prd(raw, path)


def _prd_bytes(prd: Prd, shown: Path) -> bytes:
    data = (json.dumps(prd.to_json_dict(), indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    if len(data) > MAX_PRD_BYTES:
        raise PayloadTooLarge(
            f"{shown}: the PRD would be {len(data)} bytes, more than the {MAX_PRD_BYTES} bytes allowed",
            details={"file": str(shown), "size": len(data), "limit": MAX_PRD_BYTES},
        )
    return data


def save_prd(path: Path, prd: Prd) -> None:
    """Atomically: a temporary file beside it, fsync, rename (readers see the old or the new file)."""
    path = Path(path)
    data = _prd_bytes(prd, path)
    root, dirs, name = locate(path)
    with _dir_fd(root, dirs) as dfd:
        replace_bytes(dfd, name, data, shown=path)


def render_prd_md(prd: Prd) -> str:
    """``prd.md``: the PRD for people (title, description, each story with its criteria)."""
    lines = [f"# {prd.title or prd.name}", ""]
    if prd.description:
        lines += [prd.description.strip(), ""]
    if prd.branch_name:
        lines += [f"Branch: `{prd.branch_name}`", ""]
    lines += ["## User stories", ""]
    if not prd.user_stories:
        lines += ["(none yet)", ""]
    for story in prd.user_stories:
        lines += [f"### {story.id}: {story.title}", "", f"Priority: {story.priority}", ""]
        if story.description:
            lines += [story.description.strip(), ""]
        if story.acceptance_criteria:
            lines += ["Acceptance criteria:", ""]
            lines += [f"- [ ] {criterion}" for criterion in story.acceptance_criteria]
            lines.append("")
    return "\n".join(lines)


def create_prd(paths: PrdPaths, prd: Prd) -> None:
    """``prd.md`` (from the PRD), ``prd.json``, an empty ``progress.md``; ``Conflict`` if it exists.

    Also writes ``.daedalus/.gitignore`` when there is none (:func:`ensure_gitignored`).

    ``prd.json`` is written last: its presence is what makes the PRD exist, so a create that dies
    half-way can simply be repeated.
    """
    if prd.name != paths.name:
        raise InvalidInput(
            f"the PRD is named {prd.name!r} but would be written as {paths.name!r}",
            details={"field": "name"},
        )
    data = _prd_bytes(prd, paths.prd_json)
    ensure_gitignored(paths.root)
    with _dir_fd(paths.root, (".daedalus", "prds", paths.name), create=True) as dfd:
        try:
            os.stat("prd.json", dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            pass
        else:
            raise Conflict(
                f"PRD {paths.name!r} already exists ({paths.prd_json})", details={"prd": paths.name}
            )
        replace_bytes(dfd, "prd.md", render_prd_md(prd).encode("utf-8"), shown=paths.prd_md)
        replace_bytes(dfd, "progress.md", b"", shown=paths.progress_md)
        replace_bytes(dfd, "prd.json", data, shown=paths.prd_json)


def _stamp(now: datetime | None) -> str:
    return (now or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _capped_entry(text: str, limit: int) -> bytes:
    data = text.encode("utf-8")
    if len(data) <= limit:
        return data
    return data[:limit].decode("utf-8", "ignore").encode("utf-8") + _CUT.format(limit=limit).encode()


def _append(paths: PrdPaths, name: str, entry: bytes, max_bytes: int) -> None:
    """Append ``entry`` to ``name``, first rotating the file to ``name.1`` when it would pass
    ``max_bytes`` (one old generation is kept). A link, a non-regular file or a file with another
    name (a hard link) at ``name`` is refused (``InvalidInput``), never written through."""
    with _dir_fd(paths.root, (".daedalus", "prds", paths.name)) as dfd:
        append_bytes(dfd, name, entry, shown=paths.dir / name, rotate_at=max_bytes)


def append_progress(
    paths: PrdPaths,
    text: str,
    *,
    now: datetime | None = None,
    max_bytes: int = PROGRESS_MAX_BYTES,
    max_entry_bytes: int = MAX_ENTRY_BYTES,
) -> None:
    """Append ``text`` under a ``## <UTC timestamp>`` heading to ``progress.md``."""
    body = _capped_entry(text.rstrip("\n"), max_entry_bytes)
    entry = f"\n## {_stamp(now)}\n\n".encode() + body + b"\n"
    _append(paths, "progress.md", entry, max_bytes)


def append_agent_log(
    paths: PrdPaths,
    text: str,
    *,
    now: datetime | None = None,
    max_bytes: int = AGENT_LOG_MAX_BYTES,
    max_entry_bytes: int = MAX_ENTRY_BYTES,
) -> None:
    """Append ``text`` under a ``--- <UTC timestamp> ---`` line to ``agent.log`` (rotated past
    :data:`AGENT_LOG_MAX_BYTES`)."""
    body = _capped_entry(text.rstrip("\n"), max_entry_bytes)
    entry = f"--- {_stamp(now)} ---\n".encode() + body + b"\n"
    _append(paths, "agent.log", entry, max_bytes)


def read_progress(paths: PrdPaths, *, max_bytes: int = PROGRESS_READ_BYTES) -> str:
    """The end of ``progress.md`` (at most ``max_bytes``; ``""`` when there is none yet), read
    without following a link: it goes into the provider's prompt, so it must be this PRD's file."""
    try:
        with _dir_fd(paths.root, (".daedalus", "prds", paths.name)) as dfd:
            fd = open_read(dfd, "progress.md", shown=paths.progress_md)
            try:
                size = os.fstat(fd).st_size
                start = max(0, size - max_bytes)
                raw = os.pread(fd, max_bytes, start)
            finally:
                os.close(fd)
    except NotFound:
        return ""
    text = raw.decode("utf-8", "replace")
    if start:
        # drop the partial line (and any cut character) the window starts in
        text = text.partition("\n")[2]
    return text


def ensure_gitignored(root: Path) -> bool:
    """Write ``.daedalus/.gitignore`` (:data:`GITIGNORE_LINES`) when missing; ``True`` if written.

    Worktrees, logs and events are runtime state and never committable; ``prd.md``, ``prd.json``
    and ``progress.md`` stay visible to git so the user may commit the plan (the git service still
    leaves ``.daedalus/`` out of story commits). An existing file is the user's and is kept.
    """
    text = "# written by jidocode prd: runtime state of the PRD loop\n" + "\n".join(GITIGNORE_LINES) + "\n"
    with _dir_fd(Path(root), (".daedalus",), create=True) as dfd:
        return create_bytes(dfd, ".gitignore", text.encode(), shown=Path(root) / ".daedalus" / ".gitignore")
