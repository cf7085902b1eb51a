"""One project's checkpoints: a shadow git repository under the data home (decision 0334).

``<data home>/checkpoints/<project id>.git`` is a bare repository only the runtime writes (never
inside the project). A checkpoint is a commit whose tree is the work tree before the first
writing call of a conversation's turn, and whose message is its record (JSON: conversation,
turn, label, time, files, what was left out); ``refs/jido/cp/<key>`` names it, ``<key>`` a digest
of ``(conversation, turn)``, so a turn has at most one (created once, atomically). Its id is the
start of the commit id. ``refs/jido/after/<key>`` is the work tree after the turn's latest
writing call: what the agent left.

**Changed by the user since a checkpoint** = every path that differs between what the agent left
at the end of a checkpointed turn and the tree at the start of the next checkpointed turn (any
conversation), or between what the agent left last and the work tree now. Such a path is kept
by a restore unless told otherwise.

The objects are written and read on the host (:mod:`.tree`, through dulwich: no git program ever
runs on them); the only git run is the sandboxed listing of the work tree (:mod:`.listing`).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from dulwich.objects import Commit, ObjectID
from dulwich.refs import Ref
from dulwich.repo import Repo

from jidocode.shared.errors import InvalidInput, NotFound
from jidocode.shared.events.tools import CheckpointDiff, CheckpointInfo, CheckpointRestored

from . import tree
from .listing import Listing

__all__ = ["CP_REFS", "SKIPPED_MAX", "Checkpoint", "CheckpointStore", "expired", "user_changed"]

CP_REFS: Final = b"refs/jido/cp/"
AFTER_REFS: Final = b"refs/jido/after/"
#: The most paths a checkpoint's record names as left out (then ``…``).
SKIPPED_MAX: Final = 200
#: Characters of a checkpoint id (the start of its commit id).
ID_CHARS: Final = 12
#: Seconds an unreachable object is kept before a prune removes it.
PRUNE_GRACE_S: Final = 86400
_AUTHOR: Final = b"jidocode checkpoints <checkpoints@jidocode.invalid>"


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint as stored: its record, its tree, and the tree the agent left after the turn."""

    info: CheckpointInfo
    key: bytes
    tree: ObjectID
    after: ObjectID | None


#: A tree of the work tree: its id, how many files, and what was left out (named).
Snapshot = tuple[ObjectID, int, list[str]]


def turn_key(conversation_id: str, turn_id: str) -> bytes:
    """The ref name part of ``(conversation, turn)``: a digest (any ids make a valid ref)."""
    return hashlib.sha256(f"{conversation_id}\0{turn_id}".encode()).hexdigest()[:40].encode()


def changed(a: Mapping[str, tree.Entry], b: Mapping[str, tree.Entry]) -> set[str]:
    """The paths whose entry differs between ``a`` and ``b`` (pure)."""
    return {p for p in a.keys() | b.keys() if a.get(p) != b.get(p)}


def user_changed(
    timeline: Sequence[tuple[Mapping[str, tree.Entry], Mapping[str, tree.Entry] | None]],
    now: Mapping[str, tree.Entry],
) -> set[str]:
    """The paths somebody else than the agent changed (pure): ``timeline`` is, from the checkpoint
    on and oldest first, each checkpoint's ``(before, after)`` trees (``after`` ``None``: unknown)."""
    out: set[str] = set()
    for (_, after), (before_next, _) in itertools.pairwise(timeline):
        if after is not None:
            out |= changed(after, before_next)
    last_after = timeline[-1][1] if timeline else None
    if last_after is not None:
        out |= changed(last_after, now)
    return out


def expired(
    infos: Iterable[CheckpointInfo], *, now: float, max_age_days: float, max_per_conversation: int
) -> list[CheckpointInfo]:
    """The checkpoints past ``max_age_days``, or beyond the newest ``max_per_conversation`` of their
    conversation (pure)."""
    out: list[CheckpointInfo] = []
    per: dict[str, list[CheckpointInfo]] = {}
    for info in infos:
        per.setdefault(info.conversation_id, []).append(info)
    for items in per.values():
        items.sort(key=lambda i: i.created_at, reverse=True)
        for n, info in enumerate(items):
            if n >= max_per_conversation or now - info.created_at > max_age_days * 86400:
                out.append(info)
    return out


def _selected(path: str, paths: list[str] | None) -> bool:
    if paths is None:
        return True
    return any(path == p.strip("/") or path.startswith(p.strip("/") + "/") for p in paths)


class CheckpointStore:
    """The shadow repository of one project (its methods block: call them in a thread)."""

    def __init__(self, path: Path, root: str, *, max_file_bytes: int) -> None:
        self.path = path
        self.root = root
        self.max_file_bytes = max_file_bytes
        if not (path / "objects").is_dir():
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
            Repo.init_bare(str(path))
        self.repo = Repo(str(path))
        #: Blob ids of files by their stat, so unchanged files are not read again.
        self.stat_cache: tree.StatCache = {}
        self._cached_cap = max_file_bytes

    def close(self) -> None:
        self.repo.close()

    # --- recording ------------------------------------------------------------------------------

    def _has(self, ref: bytes) -> bool:
        return self.repo.refs.read_ref(Ref(ref)) is not None

    def has(self, conversation_id: str, turn_id: str) -> bool:
        return self._has(CP_REFS + turn_key(conversation_id, turn_id))

    def _scan(self, listing: Listing) -> tree.Scan:
        if self.stat_cache and self.max_file_bytes != self._cached_cap:
            self.stat_cache.clear()  # the cap changed: what was left out may count now
        self._cached_cap = self.max_file_bytes
        store = self.repo.object_store
        return tree.scan(
            self.root, listing.files, store, max_bytes=self.max_file_bytes, cache=self.stat_cache
        )

    def snapshot(self, listing: Listing) -> Snapshot:
        """The work tree as a tree: its id, how many files, and what was left out (named)."""
        found = self._scan(listing)
        skipped = [
            *found.skipped,
            *(f"{n} (nested repository)" for n in listing.nested),
            *(f"{n} (.gitignore)" for n in listing.ignored),
        ]
        if len(skipped) > SKIPPED_MAX:
            skipped = [*skipped[:SKIPPED_MAX], "…"]
        return tree.store_tree(found.entries, self.repo.object_store), len(found.entries), skipped

    def record(
        self, conversation_id: str, turn_id: str, label: str, listing: Listing
    ) -> CheckpointInfo | None:
        """Record the turn's checkpoint from ``listing``; ``None`` when the turn has one already."""
        if self.has(conversation_id, turn_id):
            return None
        return self.record_snapshot(conversation_id, turn_id, label, self.snapshot(listing))

    def record_snapshot(
        self, conversation_id: str, turn_id: str, label: str, snap: Snapshot
    ) -> CheckpointInfo | None:
        """Record the turn's checkpoint of a tree :meth:`snapshot` made; ``None`` when the turn has
        one already."""
        ref = CP_REFS + turn_key(conversation_id, turn_id)
        if self._has(ref):
            return None
        tree_id, files, skipped = snap
        record = {
            "conversation_id": conversation_id,
            "turn_id": turn_id,
            "label": label,
            "created_at": time.time(),
            "files": files,
            "skipped": skipped,
        }
        commit = self._commit(tree_id, json.dumps(record, ensure_ascii=False))
        if not self.repo.refs.add_if_new(Ref(ref), commit.id):
            return None  # another call of the turn (maybe on another replica) was first
        return _info(commit.id, record)

    def record_after(self, conversation_id: str, turn_id: str, listing: Listing) -> None:
        """What the agent left after a writing call of the turn (the turn must have a checkpoint)."""
        if self.has(conversation_id, turn_id):
            self.record_after_snapshot(conversation_id, turn_id, self.snapshot(listing))

    def record_after_snapshot(self, conversation_id: str, turn_id: str, snap: Snapshot) -> None:
        """:meth:`record_after` with a tree :meth:`snapshot` made."""
        key = turn_key(conversation_id, turn_id)
        if self._has(CP_REFS + key):
            self.repo.refs[Ref(AFTER_REFS + key)] = self._commit(snap[0], "after").id

    def _commit(self, tree_id: ObjectID, message: str) -> Commit:
        commit = Commit()
        commit.tree = tree_id
        commit.author = commit.committer = _AUTHOR
        commit.author_time = commit.commit_time = int(time.time())
        commit.author_timezone = commit.commit_timezone = 0
        commit.message = message.encode()
        self.repo.object_store.add_object(commit)
        return commit

    # --- reading --------------------------------------------------------------------------------

    def checkpoints(self, conversation_id: str | None = None) -> list[Checkpoint]:
        """The checkpoints (of ``conversation_id`` alone when given), oldest first."""
        refs = self.repo.refs.as_dict(Ref(CP_REFS.rstrip(b"/")))
        afters = self.repo.refs.as_dict(Ref(AFTER_REFS.rstrip(b"/")))
        out: list[Checkpoint] = []
        for key, sha in refs.items():
            commit = self.repo.object_store[sha]
            if not isinstance(commit, Commit):
                continue
            try:
                info = _info(sha, json.loads(commit.message))
            except (ValueError, TypeError, KeyError):
                continue  # not one of ours
            if conversation_id is not None and info.conversation_id != conversation_id:
                continue
            after = afters.get(key)
            after_commit = self.repo.object_store[after] if after is not None else None
            after_tree = after_commit.tree if isinstance(after_commit, Commit) else None
            out.append(Checkpoint(info=info, key=key, tree=commit.tree, after=after_tree))
        out.sort(key=lambda c: (c.info.created_at, c.info.id))
        return out

    def find(self, checkpoint_id: str) -> tuple[Checkpoint, list[Checkpoint]]:
        """The checkpoint ``checkpoint_id`` names, and every checkpoint from it on (oldest first)."""
        wanted = checkpoint_id.strip().lower()
        if len(wanted) < 4 or any(c not in "0123456789abcdef" for c in wanted):
            raise InvalidInput(f"{checkpoint_id!r} is not a checkpoint id (hex digits, at least 4)")
        every = self.checkpoints()
        hits = [i for i, c in enumerate(every) if c.info.id.startswith(wanted[:ID_CHARS])]
        if not hits:
            raise NotFound(
                f"no checkpoint {checkpoint_id!r} in this project: `jidocode checkpoints list` shows them",
                details={"checkpoint": checkpoint_id},
            )
        if len(hits) > 1:
            raise InvalidInput(f"{checkpoint_id!r} names {len(hits)} checkpoints: give more of its id")
        return every[hits[0]], every[hits[0] :]

    def _flat(self, tree_id: ObjectID | None) -> dict[str, tree.Entry] | None:
        return None if tree_id is None else tree.flatten(tree_id, self.repo.object_store)

    def plan(
        self, checkpoint_id: str, listing: Listing
    ) -> tuple[Checkpoint, dict[str, tree.Entry], dict[str, tree.Entry], set[str]]:
        """The checkpoint, its files, the work tree's now, and the paths the user changed since."""
        target, since = self.find(checkpoint_id)
        now = self._scan(listing).entries
        timeline = [(self._flat(c.tree) or {}, self._flat(c.after)) for c in since]
        return target, timeline[0][0], now, user_changed(timeline, now)

    def diff(self, checkpoint_id: str, listing: Listing) -> CheckpointDiff:
        target, then, now, by_user = self.plan(checkpoint_id, listing)
        left_out = _left_out(target.info)
        added = sorted(p for p in then if p not in now)
        modified = sorted(p for p in then if p in now and now[p] != then[p])
        deleted = sorted(p for p in now if p not in then and p not in left_out)
        touched = set(added) | set(modified) | set(deleted)
        return CheckpointDiff(
            checkpoint=target.info,
            added=added,
            modified=modified,
            deleted=deleted,
            changed_by_user=sorted(by_user & touched),
        )

    # --- restoring ------------------------------------------------------------------------------

    def restore(
        self, checkpoint_id: str, listing: Listing, *, paths: list[str] | None, overwrite: bool
    ) -> CheckpointRestored:
        """Put the work tree back as the checkpoint holds it (see :class:`CheckpointRestored`)."""
        target, then, now, by_user = self.plan(checkpoint_id, listing)
        left_out = _left_out(target.info)
        write = {p: e for p, e in then.items() if now.get(p) != e and _selected(p, paths)}
        delete = {p for p in now if p not in then and p not in left_out and _selected(p, paths)}
        kept = set() if overwrite else (set(write) | delete) & by_user
        write = {p: e for p, e in write.items() if p not in kept}
        delete -= kept
        failed = tree.apply(self.root, write, delete, self.repo.object_store)
        if failed:
            raise InvalidInput(
                "the checkpoint could not put back "
                + ", ".join(failed[:20])
                + ": a directory on the way is a link (never followed) or cannot be written",
                details={"failed": failed, "checkpoint": target.info.id},
            )
        return CheckpointRestored(
            checkpoint=target.info, restored=sorted(set(write) | delete), kept=sorted(kept)
        )

    def mark_left(self, listing: Listing) -> None:
        """The work tree now is what the agent left (after a restore): the newest checkpoint's
        after-tree, so the restore's own changes are never taken for the user's."""
        every = self.checkpoints()
        if every:
            tree_id, _, _ = self.snapshot(listing)
            self.repo.refs[Ref(AFTER_REFS + every[-1].key)] = self._commit(tree_id, "after").id

    # --- expiry ---------------------------------------------------------------------------------

    def expire(self, *, max_age_days: float, max_per_conversation: int) -> int:
        """Drop the expired checkpoints (:func:`expired`); how many. Their objects go at the next
        prune (:meth:`prune`)."""
        every = {c.info.id: c for c in self.checkpoints()}
        gone = expired(
            (c.info for c in every.values()),
            now=time.time(),
            max_age_days=max_age_days,
            max_per_conversation=max_per_conversation,
        )
        for info in gone:
            key = every[info.id].key
            for ref in (CP_REFS + key, AFTER_REFS + key):
                if self._has(ref):
                    self.repo.refs.remove_if_equals(Ref(ref), None)
        return len(gone)

    def prune(self) -> None:
        """Remove the objects no checkpoint has reached for a day (a day: longer than a replica's
        stat cache trusts a blob to exist, :data:`.tree.CACHE_S`): the loose ones each time, and
        at most once a day a full collection (packs rewritten without them)."""
        from dulwich.gc import garbage_collect, prune_unreachable_objects

        stamp = self.path / "jido-gc"
        try:
            due = time.time() - stamp.stat().st_mtime > PRUNE_GRACE_S
        except FileNotFoundError:
            due = True
        if due:
            stamp.touch()
            garbage_collect(self.repo, prune=True, grace_period=PRUNE_GRACE_S)
        else:
            prune_unreachable_objects(self.repo.object_store, self.repo.refs, grace_period=PRUNE_GRACE_S)


def _info(commit_id: bytes, record: dict[str, object]) -> CheckpointInfo:
    return CheckpointInfo.model_validate({**record, "id": commit_id.decode()[:ID_CHARS]})


def _left_out(info: CheckpointInfo) -> set[str]:
    """The paths the checkpoint left out (a restore never deletes them: it does not know them)."""
    return {s.rpartition(" (")[0] for s in info.skipped if " (" in s}


def store_path(checkpoints_home: Path, project_id: str) -> Path:
    """``<checkpoints home>/<project id>.git`` (the project id is a subject token: a safe name)."""
    if not project_id or "/" in project_id or project_id.startswith("."):
        raise InvalidInput(f"not a project id: {project_id!r}")
    return checkpoints_home / f"{project_id}.git"
