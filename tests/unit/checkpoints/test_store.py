"""The checkpoint store on a temporary directory: record, change, restore (no sandbox, no bus).

The work tree's listing, which the tool runner gets from git in the sandbox
(``tests/integration/checkpoints/test_hostile_repo.py`` runs that part), is made here by
walking the directory: these tests are about the store.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jidocode.services.conversation.core import initial_state
from jidocode.services.conversation.tools_bridge import turn_of
from jidocode.services.tool_runner.checkpoints import tree
from jidocode.services.tool_runner.checkpoints.listing import Listing, parse_listing
from jidocode.services.tool_runner.checkpoints.store import CheckpointStore, expired, user_changed
from jidocode.shared.errors import InvalidInput, NotFound
from jidocode.shared.events.tools import TURN_LABEL_MAX, CheckpointInfo


def listing_of(root: Path) -> Listing:
    """Every file and link under ``root`` (what git lists when nothing is ignored), ``.git`` left out."""
    files = []
    for base, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".git" and not os.path.islink(os.path.join(base, d))]
        files += [os.path.relpath(os.path.join(base, n), root) for n in names]
        files += [
            os.path.relpath(os.path.join(base, d), root)
            for d in os.listdir(base)
            if os.path.islink(os.path.join(base, d)) and os.path.isdir(os.path.join(base, d))
        ]
    return Listing(files=tuple(sorted(set(files))), ignored=(), nested=())


def tree_of(root: Path) -> dict[str, tuple[str, bytes]]:
    """Every file (bytes, exec bit) and link (target) under ``root``; directories by their files."""
    out: dict[str, tuple[str, bytes]] = {}
    for base, dirs, names in os.walk(root):
        for name in [*names, *(d for d in dirs if os.path.islink(os.path.join(base, d)))]:
            path = os.path.join(base, name)
            rel = os.path.relpath(path, root)
            if os.path.islink(path):
                out[rel] = ("link", os.fsencode(os.readlink(path)))
            else:
                kind = "exec" if os.stat(path).st_mode & 0o100 else "file"
                out[rel] = (kind, Path(path).read_bytes())
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(base, d))]
    return out


_OPEN: list[CheckpointStore] = []


@pytest.fixture(autouse=True)
def _close_stores() -> Iterator[None]:
    yield
    while _OPEN:
        _OPEN.pop().close()


def _store(tmp: Path) -> tuple[Path, CheckpointStore]:
    root = tmp / "work"
    root.mkdir()
    store = CheckpointStore(tmp / "data" / "p.git", str(root), max_file_bytes=1024)
    _OPEN.append(store)
    return root, store


def test_restore_gives_back_files_links_and_modes_and_keeps_user_changes(tmp_path: Path) -> None:
    root, store = _store(tmp_path)
    (root / "a.txt").write_bytes(b"one\r\n")
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o755)
    (root / "d").mkdir()
    (root / "d" / "b.txt").write_text("b")
    os.symlink("/etc/passwd", root / "out")
    (root / "big.bin").write_bytes(b"x" * 2048)  # over the cap: left out, named, never deleted
    before = tree_of(root)
    info = store.record("c", "t1", "do it", listing_of(root))
    assert info is not None and info.files == 4 and info.label == "do it"
    assert any(s.startswith("big.bin (over the size cap") for s in info.skipped)
    assert store.record("c", "t1", "again", listing_of(root)) is None  # one per turn

    (root / "a.txt").write_text("two")
    shutil.rmtree(root / "d")
    (root / "d").write_text("now a file")
    (root / "run.sh").chmod(0o644)
    (root / "out").unlink()
    (root / "out").mkdir()
    (root / "out" / "x").write_text("x")
    store.record_after("c", "t1", listing_of(root))
    (root / "mine.txt").write_text("the user's")  # after the turn: the user's

    diff = store.diff(info.id, listing_of(root))
    assert diff.changed_by_user == ["mine.txt"]
    assert set(diff.deleted) == {"d", "out/x", "mine.txt"} and "a.txt" in diff.modified
    done = store.restore(info.id, listing_of(root), paths=None, overwrite=False)
    assert done.kept == ["mine.txt"]
    assert tree_of(root) == {**before, "mine.txt": ("file", b"the user's")}

    again = store.restore(info.id, listing_of(root), paths=None, overwrite=True)
    assert again.restored == ["mine.txt"] and tree_of(root) == before


def test_an_unknown_or_ambiguous_id_is_a_clear_error(tmp_path: Path) -> None:
    root, store = _store(tmp_path)
    with pytest.raises(NotFound, match="no checkpoint 'abcdef'"):
        store.diff("abcdef", listing_of(root))
    with pytest.raises(InvalidInput, match="not a checkpoint id"):
        store.diff("../x", listing_of(root))


names = st.sampled_from(["a", "b", "c", "d/e", "d/f", "g/h/i"])
ops = st.lists(
    st.tuples(st.sampled_from(["write", "delete", "rename", "mkdir"]), names, names, st.binary(max_size=64)),
    max_size=12,
)


def _apply(root: Path, op: str, src: str, dst: str, data: bytes) -> None:
    """One change by the agent (or anybody): whatever the tree holds, never failing."""
    s, d = root / src, root / dst
    if op == "write":
        if s.is_dir():
            shutil.rmtree(s)
        s.parent.mkdir(parents=True, exist_ok=True) if not s.parent.is_file() else None
        if s.parent.is_dir():
            s.write_bytes(data)
    elif op == "delete" and s.is_file():
        s.unlink()
    elif op == "rename" and s.is_file() and not d.exists() and d.parent.is_dir():
        s.rename(d)
    elif op == "mkdir" and not s.exists() and s.parent.is_dir():
        s.mkdir()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(setup=ops, turn=ops)
def test_any_writes_deletes_and_renames_are_undone_by_restore(
    tmp_path_factory: pytest.TempPathFactory,
    setup: list[tuple[str, str, str, bytes]],
    turn: list[tuple[str, str, str, bytes]],
) -> None:
    root, store = _store(tmp_path_factory.mktemp("prop"))
    for op in setup:
        _apply(root, *op)
    checkpointed = tree_of(root)
    info = store.record("c", "t", "", listing_of(root))
    assert info is not None
    for op in turn:
        _apply(root, *op)
    store.record_after("c", "t", listing_of(root))
    done = store.restore(info.id, listing_of(root), paths=None, overwrite=False)
    assert done.kept == []
    assert tree_of(root) == checkpointed


# --- pure parts ---------------------------------------------------------------------------------


def test_user_changes_are_the_gaps_between_what_the_agent_left_and_what_came_next() -> None:
    e = (0o100644, b"1" * 20)
    f = (0o100644, b"2" * 20)
    first = ({"a": e}, {"a": f})  # the agent changed a
    second = ({"a": f, "u": e}, {"a": f, "u": e, "b": e})  # u came between the turns: the user's
    assert user_changed([first, second], {"a": f, "u": e, "b": e, "v": e}) == {"u", "v"}
    assert user_changed([first, (second[0], None)], {"a": e}) == {"u"}  # unknown after: no claim


def test_expiry_by_age_and_by_count_per_conversation() -> None:
    def cp(conv: str, at: float, n: int) -> CheckpointInfo:
        return CheckpointInfo(id=f"{n:012x}", conversation_id=conv, turn_id=str(n), created_at=at)

    day = 86400.0
    infos = [cp("a", 100 * day - i * 10, i) for i in range(4)] + [cp("b", 50 * day, 9)]
    gone = expired(infos, now=100 * day, max_age_days=30, max_per_conversation=3)
    assert sorted(i.turn_id for i in gone) == ["3", "9"]  # a's oldest beyond 3; b past 30 days


def test_the_sandboxed_listing_is_split_at_the_double_nul() -> None:
    assert parse_listing(b"a\0sub/\0b c\0\0build/\0x.log\0") == Listing(
        files=("a", "b c"), ignored=("build/", "x.log"), nested=("sub/",)
    )
    assert parse_listing(b"\0build/\0") == Listing(files=(), ignored=("build/",), nested=())
    assert parse_listing(b"a\0\0") == Listing(files=("a",), ignored=(), nested=())


def test_the_turn_is_its_first_user_message_and_the_label_its_text_cut() -> None:
    from jidocode.services.conversation.core import Signal
    from jidocode.shared.events.conversation import UserMessage

    assert turn_of(None) == (None, None)
    message = Signal.of(
        UserMessage(text="fix\n the   bug " + "x" * 300), id="m1", source="t", correlation_id="m1"
    )
    state = initial_state("p", "c").model_copy(
        update={"timeline": initial_state("p", "c").timeline.append(message), "turn_messages": ("m1",)}
    )
    turn, label = turn_of(state)
    assert turn == "m1" and label is not None
    assert label.startswith("fix the bug x") and len(label) == TURN_LABEL_MAX and label.endswith("…")


def test_a_file_is_read_again_when_its_stat_changes_even_with_the_same_size_and_mtime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tree, "_RACY_S", -1.0)  # a file just written counts as settled
    root, store = _store(tmp_path)
    (root / "a.txt").write_text("old")
    os.utime(root / "a.txt", ns=(10**18, 10**18))
    first = store.record("c", "t1", "", listing_of(root))
    assert first is not None and "a.txt" in store.stat_cache
    (root / "a.txt").write_text("new")  # same size and mtime: only the ctime tells
    os.utime(root / "a.txt", ns=(10**18, 10**18))
    second = store.record("c", "t2", "", listing_of(root))
    assert second is not None
    (root / "a.txt").write_text("zzz")
    store.restore(second.id, listing_of(root), paths=None, overwrite=True)
    assert (root / "a.txt").read_text() == "new"
    store.restore(first.id, listing_of(root), paths=["a.txt"], overwrite=True)
    assert (root / "a.txt").read_text() == "old"
