"""Protected paths kept by a snapshot, a watch while calls run, and a repair.

Bubblewrap binds the protected paths that exist read-only, but cannot bind a
path that does not exist yet without creating it in the user's tree; Landlock
cannot take any subtree out of the writable project root (rights add up down
the tree: what lets a command create a top-level file lets it write
``.git/config``). Both gaps are closed here: before the call the protected
paths are captured (:mod:`._snapshot`: missing, a symlink, a file with its
bytes, a directory with its tree); while it runs they are watched
(:mod:`._watch`), and whatever differs is removed and the captured state put
back *at once*, the calls in flight stopped and failed (:class:`Ticket`);
after it the same repair runs again. The git directory itself is held by an
``O_PATH`` descriptor and put back wherever it was moved (:mod:`._gitdir`).

Calls of one project that overlap share one snapshot (:class:`Guard`): the
first takes it, each repairs when it ends, the last drops it. A call that
starts while another has changed a protected path therefore still restores
the state from before the first one; a change is charged to every call in
flight (which one made it cannot be told).

Limits (see docs/decisions/0307-landlock-keeps-git.md): between a change and
its repair a protected path is on disk for the watch's latency (milliseconds);
the contents of ``.git`` other than the protected paths (objects, refs, the
index) are not kept: a command can delete them, as git itself can; a change the
user makes to a protected path during a call is undone too (and stops the
call); two tool-runner processes sharing a project directory do not share
snapshots.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from ._gitdir import GIT_SKELETON, GitDir, hold_git, put_git_back
from ._snapshot import DIR_FLAGS, Dir, File, Link, Missing, Node, Present, TooLarge, capture, repair
from ._watch import Targets, Watch, targets

__all__ = [
    "GUARD",
    "Dir",
    "File",
    "Guard",
    "Link",
    "Missing",
    "Node",
    "Present",
    "Ticket",
    "TooLarge",
    "capture",
    "put_git_back",
    "repair",
]


class Ticket:
    """One call's part in its root's snapshot: what was repaired while it ran, and how to stop it.

    The guard may stop the call from its watch thread (:meth:`halt`) as soon as a protected
    path changes; :meth:`attach` gives it the way to (the call's process, once started).
    """

    def __init__(self, root: str) -> None:
        self.root = root
        self.repaired: set[str] = set()
        self._stop: Callable[[], None] | None = None
        self._halted = False
        self._lock = threading.Lock()

    def attach(self, stop: Callable[[], None]) -> None:
        """Stop the call with ``stop`` when a protected path changes (at once if one already has)."""
        with self._lock:
            self._stop = stop
            if self._halted:
                stop()

    def detach(self) -> None:
        """The call's processes are gone: nothing to stop any more (no ``stop`` runs after this)."""
        with self._lock:
            self._stop = None

    def halt(self) -> None:
        """Stop the call (now if attached, else when it is)."""
        # under the lock: ``stop`` never runs after :meth:`detach` (its pidfd is closed then)
        with self._lock:
            self._halted = True
            if self._stop is not None:
                self._stop()


@dataclass
class _Held:
    root: str
    before: dict[str, Node]
    full: bool
    git: GitDir | None = None
    calls: list[Ticket] = field(default_factory=list)
    watch: Watch | None = None

    def find(self) -> Targets:
        """What the watch looks at: the protected paths, and the inside of the protected directories."""
        trees = [rel for rel, node in self.before.items() if isinstance(node, Dir)]
        rels = [*self.before, *(GIT_SKELETON if self.git is not None else ())]
        return targets(self.root, rels, trees)

    def drop(self) -> Watch | None:
        """Release the git directory's descriptor; the watch, for the caller to close outside the lock."""
        if self.git is not None:
            os.close(self.git.fd)
            self.git = None
        watch, self.watch = self.watch, None
        return watch


class Guard:
    """The snapshots of the projects with sandboxed calls in flight, one per root while calls overlap.

    While a root has calls in flight its protected paths are watched (:mod:`._watch`): a change
    is repaired at once, recorded on every call in flight, and stops them (:class:`Ticket`).
    The work runs in worker threads under a thread lock: capturing and repairing are file I/O,
    and the event loop never waits on them.
    """

    def __init__(self) -> None:
        self._held: dict[str, _Held] = {}
        self._lock = threading.Lock()

    def _take(self, root: str, rels: tuple[str, ...], full: bool, watch: bool = True) -> _Held:
        root_fd = os.open(root, DIR_FLAGS)
        try:
            git = hold_git(root_fd)
        finally:
            os.close(root_fd)
        held = _Held(root, {}, full, git)
        try:
            held.before = capture(root, rels, full=full)
            try:
                if watch:
                    held.watch = Watch(root, held.find, lambda: self._changed(held))
            except OSError:
                if full:
                    raise  # under Landlock the watch is the wall while the call runs
        except BaseException:
            held.drop()
            raise
        return held

    def _enter(self, root: str, rels: tuple[str, ...], full: bool, watch: bool = True) -> Ticket:
        with self._lock:
            held = self._held.get(root)
            if held is None:
                held = self._held[root] = self._take(root, rels, full, watch)
            elif full and not held.full:
                # bubblewrap calls hold the snapshot (kinds only; they cannot change what exists):
                # Landlock needs the contents, which are still the ones from before them
                kinds = tuple(r for r, n in held.before.items() if isinstance(n, Present))
                held.before.update(capture(root, kinds, full=True))
                held.full = True
            missing = tuple(r for r in rels if r not in held.before)
            if missing:
                held.before.update(capture(root, missing, full=full))
            if held.watch is not None:
                held.watch.arm()
            ticket = Ticket(root)
            held.calls.append(ticket)
            return ticket

    @staticmethod
    def _check(held: _Held) -> list[str]:
        fixed = put_git_back(held.root, held.git) if held.git is not None else []
        return sorted({*fixed, *repair(held.root, held.before)})

    def _changed(self, held: _Held) -> None:
        """A watched path changed (in the watch thread): repair, and stop every call in flight if it had to.

        A repair that fails stops them too (the one after each call then tries again).
        """
        with self._lock:
            if self._held.get(held.root) is not held or held.watch is None:
                return
            try:
                held.watch.arm()
                fixed = self._check(held)
            except OSError:
                fixed = []
                calls = list(held.calls)
            else:
                calls = list(held.calls) if fixed else []
            for call in calls:
                call.repaired.update(fixed)
        for call in calls:
            call.halt()

    def _leave(self, root: str, ticket: Ticket | None) -> list[str]:
        watch: Watch | None = None
        others: list[Ticket] = []
        try:
            with self._lock:
                held = self._held.get(root)
                if held is None:
                    return []
                if ticket is None or ticket not in held.calls:
                    ticket = held.calls[0] if held.calls else Ticket(root)
                try:
                    fixed = self._check(held)
                    if fixed:
                        others = [c for c in held.calls if c is not ticket]
                        for call in (ticket, *others):
                            call.repaired.update(fixed)
                finally:
                    if ticket in held.calls:
                        held.calls.remove(ticket)
                    if not held.calls:
                        del self._held[root]
                        watch = held.drop()
        finally:
            # outside the lock: the watch thread may be waiting for it, and is joined here
            if watch is not None:
                watch.close()
        for call in others:
            call.halt()  # a change found after this call was made by a call still running
        return sorted(ticket.repaired)

    async def enter(self, root: str, rels: tuple[str, ...], *, full: bool, watch: bool = True) -> Ticket:
        """Join (or take) the root's snapshot. ``full``: contents are needed (raises :class:`TooLarge`).
        ``watch``: repair while the calls run (the first call of the root decides), else only after."""
        return await asyncio.to_thread(self._enter, root, rels, full, watch)

    async def leave(self, root: str, ticket: Ticket | None = None) -> list[str]:
        """Repair the root's protected paths; the ones repaired during and after ``ticket``'s call.

        The last call out drops the snapshot. Without ``ticket``, the longest-running call leaves.
        """
        return await asyncio.to_thread(self._leave, root, ticket)


#: The guard of this process (the filesystem is shared by every call of the process).
GUARD: Final = Guard()
