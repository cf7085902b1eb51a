"""The timeline: the applied entries of a conversation, shared by all of its states.

A state is frozen and every reducer step returns a new one with a longer
timeline. Copying the timeline at each step made every signal cost more as a
conversation grew; instead, each state holds a *view* of one shared list: the
list and the view's own length. Appending to the newest view extends the list
in place (O(1)) and returns a new view, while every older view still sees only
its own prefix, so no view ever changes. Appending to an older view (a branch:
a step taken again from an earlier state) copies that prefix first.

The shared store also indexes the entries by their dedup key ``(id,
correlation_id)`` and keeps *folds*: incremental computations over the
entries (the ``llm_context`` projection keeps its builder there). A fold is a
function of a prefix of the list, so it is a cache of a pure function: a view
asking for one feeds it only the entries appended since it was last asked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice
from typing import Any, Protocol, TypeVar, overload

from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema

from jidocode.shared.events.conversation import QueueOverflow

from .signal import Signal

__all__ = ["Fold", "Timeline", "dedup_keys"]


def dedup_keys(entry: Signal) -> tuple[tuple[str, str], ...]:
    """The dedup keys an entry stands for: its own ``(id, correlation_id)``, and for an overflow
    entry also the dropped input's (so a copy of it delivered again, e.g. when the input stream
    is read again after a reload, stays dropped: decided once, the same way on every replica)."""
    own = (entry.id, entry.correlation_id)
    if entry.type != QueueOverflow.TYPE:
        return (own,)
    dropped = entry.event_as(QueueOverflow).dropped_id
    return (own, (dropped, entry.correlation_id)) if dropped else (own,)


class Fold(Protocol):
    """An incremental computation over timeline entries, fed one entry at a time, in order."""

    def add(self, entry: Signal) -> None: ...


F = TypeVar("F", bound=Fold)


class _Store:
    """The list the views share, its key index, and the folds fed from it."""

    __slots__ = ("entries", "folds", "positions")

    def __init__(self, entries: list[Signal]) -> None:
        self.entries = entries
        #: dedup key -> position of the first entry with it
        self.positions: dict[tuple[str, str], int] = {}
        for index, entry in enumerate(entries):
            for key in dedup_keys(entry):
                self.positions.setdefault(key, index)
        #: fold factory -> (the fold, how many entries it was fed)
        self.folds: dict[Callable[[], Any], tuple[Any, int]] = {}


class Timeline(Sequence[Signal]):
    """An immutable sequence of entries (see the module docstring); ``append`` returns a new one."""

    __slots__ = ("_n", "_store")

    _store: _Store
    _n: int

    def __init__(self, entries: Iterable[Signal] = ()) -> None:
        self._store = _Store(list(entries))
        self._n = len(self._store.entries)

    @classmethod
    def _view(cls, store: _Store, n: int) -> Timeline:
        view = cls.__new__(cls)
        view._store = store
        view._n = n
        return view

    def append(self, entry: Signal) -> Timeline:
        """This timeline with ``entry`` at the end (O(1) on the newest view)."""
        store, n = self._store, self._n
        if n != len(store.entries):
            store = _Store(store.entries[:n])
        for key in dedup_keys(entry):
            store.positions.setdefault(key, n)
        store.entries.append(entry)
        return Timeline._view(store, n + 1)

    def prefix(self, n: int) -> Timeline:
        """The first ``n`` entries, sharing this timeline's store (O(1))."""
        if not 0 <= n <= self._n:
            raise IndexError(f"prefix of {n} entries in a timeline of {self._n}")
        return Timeline._view(self._store, n)

    def has(self, key: tuple[str, str]) -> bool:
        """Whether an entry with the dedup key ``(id, correlation_id)`` is in this timeline."""
        position = self._store.positions.get(key)
        return position is not None and position < self._n

    def fold(self, make: Callable[[], F]) -> F:
        """``make()`` fed every entry of this timeline, in order.

        The fold is kept in the shared store and fed only what was appended
        since it was last asked for, so asking after each step costs O(1)
        amortized. A view shorter than what the kept fold has seen (an older
        state) gets a fresh fold of its own. The caller must not feed it.
        """
        store, n = self._store, self._n
        kept = store.folds.get(make)
        if kept is not None and kept[1] <= n:
            fold, fed = kept
        else:
            fold, fed = make(), 0
        entries = store.entries
        for index in range(fed, n):  # (islice would step over the first ``fed`` entries one by one)
            fold.add(entries[index])
        if kept is None or kept[1] <= n:
            store.folds[make] = (fold, n)
        return fold  # type: ignore[no-any-return]

    # -- Sequence ---------------------------------------------------------------------

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, index: int) -> Signal: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Signal, ...]: ...

    def __getitem__(self, index: int | slice) -> Signal | tuple[Signal, ...]:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._n)
            if step == 1:
                return tuple(self._store.entries[start:stop])
            return tuple(self._store.entries[i] for i in range(start, stop, step))
        if index < 0:
            index += self._n
        if not 0 <= index < self._n:
            raise IndexError("timeline index out of range")
        return self._store.entries[index]

    def __iter__(self) -> Iterator[Signal]:
        return islice(self._store.entries, self._n)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Timeline):
            if other._store is self._store:
                return other._n == self._n
        elif not isinstance(other, (tuple, list)):
            return NotImplemented
        return len(other) == self._n and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Timeline({list(self)!r})"

    # -- pydantic -----------------------------------------------------------------------

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        """A field of this type takes a ``Timeline`` as it is, or any sequence of signals."""
        items = handler.generate_schema(tuple[Signal, ...])
        return core_schema.union_schema(
            [
                core_schema.is_instance_schema(cls),
                core_schema.no_info_after_validator_function(cls, items),
            ],
            serialization=core_schema.plain_serializer_function_ser_schema(tuple, return_schema=items),
        )
