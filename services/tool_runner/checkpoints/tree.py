"""The work tree as git objects and back, on the host, never through a link (decision 0334).

:func:`scan` reads the files git listed (sandboxed, :mod:`.listing`) into blobs and trees of the
shadow repository: each path is reached component by component from the root's descriptor with
``O_NOFOLLOW`` (a directory swapped for a link on the way is skipped, never followed); a symlink
is stored as a link (mode ``120000``, its target as the blob), never read through; a FIFO, socket
or device is left out; a file over the size cap is left out and named. The bytes are stored as
they are: no filter, no end-of-line conversion, no ``.gitattributes`` applies.

:func:`flatten` turns a tree back into ``{path: (mode, blob id)}``; :func:`apply` makes the work
tree hold given entries (written through :mod:`jidocode.shared.nofollow`: a temporary file renamed
over the name, never written through a link) and removes others.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from dulwich.object_store import BaseObjectStore
from dulwich.objects import Blob, ObjectID, Tree

from jidocode.shared import nofollow
from jidocode.shared.errors import NotFound

__all__ = ["CACHE_S", "Entry", "Scan", "StatCache", "apply", "flatten", "scan", "store_tree"]

#: Git's modes: a regular file, an executable one, a symlink.
REGULAR: Final = 0o100644
EXECUTABLE: Final = 0o100755
LINK: Final = 0o120000
_DIR: Final = 0o040000
_OPEN_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
#: How long a file's blob id is taken from its stat without reading it again (less than the
#: prune grace period of :meth:`.store.CheckpointStore.prune`: a cached blob still exists).
CACHE_S: Final = 3600.0
#: A file changed this recently is read again (its mtime may not show a change made in the
#: same clock tick: git's "racy" files).
_RACY_S: Final = 2.0

#: A path's entry: its git mode and blob id.
Entry = tuple[int, ObjectID]
#: What a regular file's stat says: size, mtime, ctime, inode, mode.
StatKey = tuple[int, int, int, int, int]
#: ``path -> (stat key, entry, when cached)``: files not read again while their stat is the same.
StatCache = dict[str, tuple[StatKey, Entry, float]]


#: New blobs are written as one pack once they hold this many bytes (one fsync, not one each).
_PACK_BYTES: Final = 64 * 1024 * 1024


@dataclass
class Scan:
    """The files read from the work tree, and the paths left out (with why)."""

    entries: dict[str, Entry] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)


@dataclass
class _NewBlobs:
    """Blobs the store does not hold yet, written together as a pack."""

    store: BaseObjectStore
    blobs: dict[ObjectID, Blob] = field(default_factory=dict)
    size: int = 0

    def add(self, data: bytes) -> ObjectID:
        blob = Blob.from_string(data)
        if blob.id not in self.blobs and blob.id not in self.store:
            self.blobs[blob.id] = blob
            self.size += len(data)
            if self.size >= _PACK_BYTES:
                self.flush()
        return blob.id

    def flush(self) -> None:
        if self.blobs:
            self.store.add_objects([(b, None) for b in self.blobs.values()])
        self.blobs.clear()
        self.size = 0


def scan(
    root: str, paths: Iterable[str], store: BaseObjectStore, *, max_bytes: int, cache: StatCache | None = None
) -> Scan:
    """Read ``paths`` (relative, ``/``-separated) below ``root`` into ``store``'s blobs; a file
    whose stat is the same as when ``cache`` saw it is not read again."""
    out = Scan()
    seen: StatCache = {} if cache is None else cache
    now = time.time()
    new = _NewBlobs(store)
    with _Dirs(root) as dirs:
        for path in sorted(set(paths)):
            parent, _, name = path.rpartition("/")
            dfd = dirs.get(parent)
            if dfd is None or not name:
                continue  # a directory on the way is gone or became a link: nothing to read
            entry = _cached(dfd, name, path, seen, now) or _read(dfd, name, max_bytes, new)
            if not isinstance(entry, str) and entry[0] != LINK:
                _remember(dfd, name, path, entry, seen, now)
            if isinstance(entry, str):
                if entry:
                    out.skipped.append(f"{path} ({entry})")
                continue
            out.entries[path] = entry
    new.flush()
    return out


def _stat_key(dfd: int, name: str) -> StatKey | None:
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_mode)


def _cached(dfd: int, name: str, path: str, cache: StatCache, now: float) -> Entry | None:
    hit = cache.get(path)
    if hit is None or now - hit[2] > CACHE_S:
        return None
    return hit[1] if _stat_key(dfd, name) == hit[0] else None


def _remember(dfd: int, name: str, path: str, entry: Entry, cache: StatCache, now: float) -> None:
    key = _stat_key(dfd, name)
    if key is not None and stat.S_ISREG(key[4]) and now - key[2] / 1e9 > _RACY_S:
        cache.setdefault(path, (key, entry, now))


def _read(dfd: int, name: str, max_bytes: int, new: _NewBlobs) -> Entry | str:
    """The entry of ``name`` in ``dfd``, or why it is left out (empty: gone, say nothing)."""
    try:
        info = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return ""
    if stat.S_ISLNK(info.st_mode):
        return (LINK, new.add(os.fsencode(os.readlink(name, dir_fd=dfd))))
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file"
    if info.st_size > max_bytes:
        return f"over the size cap of {max_bytes} bytes"
    try:
        fd = os.open(name, _OPEN_FLAGS, dir_fd=dfd)
    except OSError as exc:
        return "" if exc.errno == errno.ENOENT else "cannot be read"
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode) or opened.st_size > max_bytes:
            return "changed while read"
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
    finally:
        os.close(fd)
    mode = EXECUTABLE if opened.st_mode & 0o100 else REGULAR
    return (mode, new.add(b"".join(chunks)))


class _Dirs:
    """Descriptors of the directories below a root, each opened from its parent without a link."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.fds: dict[str, int | None] = {}

    def __enter__(self) -> _Dirs:
        self.fds[""] = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in self.fds.values():
            if fd is not None:
                os.close(fd)

    def get(self, rel: str) -> int | None:
        if rel in self.fds:
            return self.fds[rel]
        parent, _, name = rel.rpartition("/")
        up = self.get(parent)
        fd = None
        if up is not None:
            with contextlib.suppress(OSError):  # gone, or a link: never followed
                fd = os.open(name, nofollow.DIR_FLAGS, dir_fd=up)
        self.fds[rel] = fd
        return fd


def store_tree(entries: Mapping[str, Entry], store: BaseObjectStore) -> ObjectID:
    """The id of the tree holding ``entries`` (written to ``store`` with its subtrees)."""
    nested: dict[str, object] = {}
    for path, entry in entries.items():
        node = nested
        *dirs, name = path.split("/")
        for d in dirs:
            child = node.setdefault(d, {})
            assert isinstance(child, dict)
            node = child
        node[name] = entry
    return _write(nested, store)


def _write(node: Mapping[str, object], store: BaseObjectStore) -> ObjectID:
    tree = Tree()
    for name, value in node.items():
        if isinstance(value, dict):
            tree.add(os.fsencode(name), _DIR, _write(value, store))
        else:
            assert isinstance(value, tuple)
            mode: int = value[0]
            sha: ObjectID = value[1]
            tree.add(os.fsencode(name), mode, sha)
    if tree.id not in store:
        store.add_object(tree)
    return tree.id


def flatten(tree_id: ObjectID, store: BaseObjectStore) -> dict[str, Entry]:
    """``{path: (mode, blob id)}`` of every file and link under the tree ``tree_id``."""
    out: dict[str, Entry] = {}
    stack: list[tuple[str, ObjectID]] = [("", tree_id)]
    while stack:
        prefix, sha = stack.pop()
        tree = store[sha]
        assert isinstance(tree, Tree)
        for item in tree.iteritems():
            path = prefix + os.fsdecode(item.path)
            if stat.S_ISDIR(item.mode):
                stack.append((path + "/", item.sha))
            else:
                out[path] = (item.mode, item.sha)
    return out


def apply(root: str, write: Mapping[str, Entry], delete: Iterable[str], store: BaseObjectStore) -> list[str]:
    """Delete ``delete`` (then the directories that became empty), then write ``write``; the paths
    that could not be put back (a directory on the way is a link: never followed)."""
    failed: list[str] = []
    for path in sorted(delete, key=lambda p: (-p.count("/"), p)):
        if not _remove(root, path):
            failed.append(path)
    for path, (mode, sha) in sorted(write.items()):
        blob = store[sha]
        assert isinstance(blob, Blob)
        if not _put(root, path, mode, blob.as_raw_string()):
            failed.append(path)
    return failed


def _remove(root: str, path: str) -> bool:
    *dirs, name = path.split("/")
    try:
        with nofollow.open_dir(root, dirs) as dfd:
            _clear(dfd, name)
    except NotFound:
        return True  # a directory on the way is gone: so is the file
    except (nofollow.UnsafePath, OSError):
        return False
    _prune(root, dirs)
    return True


def _prune(root: str, dirs: list[str]) -> None:
    """Remove the directories of ``dirs`` that became empty, deepest first."""
    while dirs:
        *up, name = dirs
        try:
            with nofollow.open_dir(root, up) as dfd:
                os.rmdir(name, dir_fd=dfd)
        except (OSError, nofollow.UnsafePath, NotFound):
            return
        dirs = up


def _clear(dfd: int, name: str) -> None:
    """Remove the entry ``name`` of ``dfd`` (a link itself, never what it names; an empty dir)."""
    try:
        info = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode):
        os.rmdir(name, dir_fd=dfd)  # its files were deleted first; a non-empty one stays (OSError)
    else:
        os.unlink(name, dir_fd=dfd)


def _put(root: str, path: str, mode: int, data: bytes) -> bool:
    *dirs, name = path.split("/")
    try:
        with nofollow.open_dir(root, dirs, create=True) as dfd:
            if mode == LINK:
                _clear(dfd, name)
                os.symlink(os.fsdecode(data), name, dir_fd=dfd)
                return True
            info = _lstat(dfd, name)
            if info is not None and not stat.S_ISREG(info.st_mode):
                _clear(dfd, name)
            nofollow.replace_bytes(dfd, name, data, shown=path, mode=0o755 if mode == EXECUTABLE else 0o644)
    except (nofollow.UnsafePath, NotFound, OSError):
        return False
    return True


def _lstat(dfd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return None
