"""The link-free directory walk shared by the tool runner's file tools and the PRD files, and the
write primitive every file the runtime writes under a project goes through (decision 0301)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jidocode.shared.errors import NotFound
from jidocode.shared.nofollow import (
    AppendFile,
    UnsafePath,
    append_bytes,
    create_bytes,
    dir_fd,
    open_dir,
    open_read,
    replace_bytes,
)


class Missing(Exception):
    pass


class Linked(Exception):
    pass


def _walk(root: Path, *parts: str, create: bool = False) -> set[str]:
    with dir_fd(root, parts, create=create, missing=Missing, linked=Linked) as fd:
        return set(os.listdir(fd))


def test_reaches_a_directory_and_makes_missing_ones_on_request(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f").write_text("x")
    assert _walk(tmp_path, "a", "b") == {"f"}
    with pytest.raises(Missing, match=r"/a/c$"):
        _walk(tmp_path, "a", "c", "d")
    assert _walk(tmp_path, "a", "c", "d", create=True) == set()
    assert (tmp_path / "a" / "c" / "d").is_dir()
    with pytest.raises(Missing, match="nowhere"):
        _walk(tmp_path / "nowhere")


def test_a_link_on_the_way_is_never_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("s")
    root = tmp_path / "root"
    (root / "a").mkdir(parents=True)
    (root / "a" / "link").symlink_to(outside)
    (root / "file").write_text("not a dir")
    with pytest.raises(Linked, match=r"/a/link$"):
        _walk(root, "a", "link")
    with pytest.raises(Linked, match=r"/a/link$"):  # nor made through, with create
        _walk(root, "a", "link", "sub", create=True)
    assert not (outside / "sub").exists()
    with pytest.raises(Linked, match=r"/file$"):
        _walk(root, "file")
    # the root itself may be a link (a project opened through one): only what is below is walked
    (tmp_path / "alias").symlink_to(root)
    assert _walk(tmp_path / "alias", "a") == {"link"}


def test_every_descriptor_is_closed(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "l").symlink_to(tmp_path)
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(50):
        _walk(tmp_path, "a", "b")
        with pytest.raises(Linked):
            _walk(tmp_path, "a", "l")
        with pytest.raises(Missing):
            _walk(tmp_path, "a", "x")
    assert len(os.listdir("/proc/self/fd")) == before


# --- the write primitive (docs/decisions/0301) ----------------------------------------------------


def _outside(tmp_path: Path) -> Path:
    """A canary file outside the root (standing in for ~/.bashrc), without a final newline."""
    canary = tmp_path / "outside" / "bashrc"
    canary.parent.mkdir(exist_ok=True)
    canary.write_bytes(b"export KEEP=1")
    return canary


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    (r / "d").mkdir(parents=True)
    return r


def test_open_dir_names_the_linked_component_and_makes_nothing_through_it(root: Path, tmp_path: Path) -> None:
    canary = _outside(tmp_path)
    (root / "d" / "link").symlink_to(canary.parent)
    link_refused = pytest.raises(UnsafePath, match=r"/d/link is a symbolic link or not a directory")
    with link_refused as info, open_dir(root, ("d", "link", "made"), create=True):
        pass
    assert info.value.reason == "link" and info.value.details["file"].endswith("/d/link")
    assert sorted(os.listdir(canary.parent)) == ["bashrc"]
    with pytest.raises(NotFound, match=r"/d/nope does not exist"), open_dir(root, ("d", "nope")):
        pass


def test_replace_bytes_writes_at_once_and_never_through_a_link(root: Path, tmp_path: Path) -> None:
    with open_dir(root, ("d",)) as dfd:
        assert replace_bytes(dfd, "f", b"one", shown=root / "d" / "f") is True
        assert replace_bytes(dfd, "f", b"two", shown=root / "d" / "f") is False
        assert (root / "d" / "f").read_bytes() == b"two"
        canary = _outside(tmp_path)
        (root / "d" / "l").symlink_to(canary)
        with pytest.raises(UnsafePath, match=r"/d/l is a symbolic link"):
            replace_bytes(dfd, "l", b"evil", shown=root / "d" / "l")
        (root / "d" / "sub").mkdir()
        with pytest.raises(UnsafePath, match="not a regular file"):
            replace_bytes(dfd, "sub", b"x", shown=root / "d" / "sub")
    assert canary.read_bytes() == b"export KEEP=1"
    assert (root / "d" / "l").is_symlink()
    assert sorted(os.listdir(root / "d")) == ["f", "l", "sub"]  # no temporary file left


def test_replace_bytes_into_a_hard_linked_name_leaves_the_other_name_alone(
    root: Path, tmp_path: Path
) -> None:
    canary = _outside(tmp_path)
    os.link(canary, root / "d" / "h")
    with open_dir(root, ("d",)) as dfd:
        replace_bytes(dfd, "h", b"new", shown=root / "d" / "h")
    assert (root / "d" / "h").read_bytes() == b"new"
    assert canary.read_bytes() == b"export KEEP=1"


def test_create_bytes_never_touches_an_existing_entry(root: Path, tmp_path: Path) -> None:
    canary = _outside(tmp_path)
    (root / "d" / "l").symlink_to(canary)
    (root / "d" / "dangling").symlink_to(tmp_path / "outside" / "new")
    with open_dir(root, ("d",)) as dfd:
        assert create_bytes(dfd, "f", b"made", shown="f") is True
        assert create_bytes(dfd, "f", b"again", shown="f") is False
        assert create_bytes(dfd, "l", b"evil", shown="l") is False
        assert create_bytes(dfd, "dangling", b"evil", shown="dangling") is False
    assert (root / "d" / "f").read_bytes() == b"made"
    assert canary.read_bytes() == b"export KEEP=1"
    assert not (tmp_path / "outside" / "new").exists()


def _append(root: Path, name: str, data: bytes, rotate_at: int | None = None) -> None:
    with open_dir(root, ("d",)) as dfd:
        append_bytes(dfd, name, data, shown=root / "d" / name, rotate_at=rotate_at)


def test_append_refuses_a_link_a_fifo_and_a_hard_link(root: Path, tmp_path: Path) -> None:
    canary = _outside(tmp_path)
    (root / "d" / "l").symlink_to(canary)
    with pytest.raises(UnsafePath, match=r"/d/l is a symbolic link") as info:
        _append(root, "l", b"$(evil)\n")
    assert info.value.reason == "link"
    os.mkfifo(root / "d" / "p")
    with pytest.raises(UnsafePath, match=r"/d/p is not a regular file"):
        _append(root, "p", b"x")  # refused, not waited on
    os.link(canary, root / "d" / "h")
    with pytest.raises(UnsafePath, match=r"/d/h has 2 names") as info:
        _append(root, "h", b"$(evil)\n")
    assert info.value.reason == "hard_linked"
    assert canary.read_bytes() == b"export KEEP=1"
    _append(root, "new", b"a\n")
    _append(root, "new", b"b\n")
    assert (root / "d" / "new").read_bytes() == b"a\nb\n"


def test_append_rotates_without_following_the_old_generations_link(root: Path, tmp_path: Path) -> None:
    canary = _outside(tmp_path)
    (root / "d" / "log.1").symlink_to(canary)
    _append(root, "log", b"x" * 8, rotate_at=10)
    _append(root, "log", b"y" * 8, rotate_at=10)  # 16 > 10: log -> log.1 (the link is replaced)
    assert (root / "d" / "log").read_bytes() == b"y" * 8
    assert (root / "d" / "log.1").read_bytes() == b"x" * 8 and not (root / "d" / "log.1").is_symlink()
    assert canary.read_bytes() == b"export KEEP=1"
    (root / "d" / "log.1").unlink()
    (root / "d" / "log.1").mkdir()
    with pytest.raises(UnsafePath, match=r"/d/log\.1 is not a regular file"):
        _append(root, "log", b"z" * 8, rotate_at=10)


def test_a_file_swapped_for_a_link_between_two_writes_stops_the_writer(root: Path, tmp_path: Path) -> None:
    canary = _outside(tmp_path)
    with open_dir(root, ("d",)) as dfd, AppendFile.open(dfd, "events", shown=root / "d" / "events") as f:
        f.write(b"one\n")
        os.rename(root / "d" / "events", root / "d" / "moved")
        (root / "d" / "events").symlink_to(canary)
        with pytest.raises(UnsafePath, match="was replaced or removed") as info:
            f.write(b"$(evil)\n")
        assert info.value.reason == "replaced"
        with pytest.raises(UnsafePath, match="was replaced or removed"):
            f.cut(0)
    assert canary.read_bytes() == b"export KEEP=1"
    assert (root / "d" / "moved").read_bytes() == b"one\n"


def test_only_the_runtimes_own_file_is_cut(root: Path, tmp_path: Path) -> None:
    (root / "d" / "theirs").write_bytes(b"user text without a newline")
    with open_dir(root, ("d",)) as dfd:
        with AppendFile.open(dfd, "theirs", shown="theirs") as f:  # appended to, never cut
            assert not f.ours
            with pytest.raises(UnsafePath, match="was not written by the runtime") as info:
                f.cut(0)
            assert info.value.reason == "foreign"
        with pytest.raises(UnsafePath, match="was not written by the runtime"):
            AppendFile.open(dfd, "theirs", shown="theirs", recognise=lambda head: head.startswith(b"{"))
        with AppendFile.open(dfd, "mine", shown="mine") as f:
            assert f.ours
            f.write(b"{torn")
            f.cut(0)
        (root / "d" / "known").write_bytes(b"{ours\n{to")
        with AppendFile.open(dfd, "known", shown="known", recognise=lambda head: head.startswith(b"{")) as f:
            assert f.ours
            f.cut(6)
        with pytest.raises(NotFound):
            AppendFile.open(dfd, "absent", shown="absent", create=False)
    assert (root / "d" / "theirs").read_bytes() == b"user text without a newline"
    assert (root / "d" / "mine").read_bytes() == b""
    assert (root / "d" / "known").read_bytes() == b"{ours\n"
    assert not (root / "d" / "absent").exists()


def test_open_read_refuses_what_append_refuses(root: Path, tmp_path: Path) -> None:
    canary = _outside(tmp_path)
    (root / "d" / "l").symlink_to(canary)
    os.link(canary, root / "d" / "h")
    os.mkfifo(root / "d" / "p")
    (root / "d" / "f").write_bytes(b"ok")
    with open_dir(root, ("d",)) as dfd:
        for name, reason in (("l", "link"), ("h", "hard_linked"), ("p", "not_regular")):
            with pytest.raises(UnsafePath) as info:
                open_read(dfd, name, shown=name)
            assert info.value.reason == reason
        fd = open_read(dfd, "f", shown="f")
        try:
            assert os.read(fd, 10) == b"ok"
        finally:
            os.close(fd)


# a random tree below the root: directories, files, links to a directory and a file outside it;
# random writes through it never change anything outside and never write through a link
_NAMES = st.sampled_from(["a", "b", "c"])
_KINDS = st.sampled_from(["dir", "file", "link_dir", "link_file", "fifo", "hard"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    tree=st.lists(st.tuples(st.lists(_NAMES, min_size=1, max_size=3), _KINDS), max_size=8),
    ops=st.lists(
        st.tuples(
            st.sampled_from(["append", "replace", "create", "rotate"]),
            st.lists(_NAMES, min_size=1, max_size=3),
            st.binary(min_size=1, max_size=20),
        ),
        min_size=1,
        max_size=8,
    ),
)
def test_random_trees_never_let_a_write_out(
    tmp_path_factory: pytest.TempPathFactory,
    tree: list[tuple[list[str], str]],
    ops: list[tuple[str, list[str], bytes]],
) -> None:
    base = tmp_path_factory.mktemp("tree")
    outside = base / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"keep")
    root = base / "root"
    root.mkdir()
    for parts, kind in tree:
        path = root.joinpath(*parts)
        ancestors = [root.joinpath(*parts[:n]) for n in range(1, len(parts))]
        if path.exists() or path.is_symlink() or any(a.is_symlink() for a in ancestors):
            continue  # made already, or the setup itself would go through a link
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if kind == "dir":
                path.mkdir()
            elif kind == "file":
                path.write_bytes(b"file")
            elif kind == "link_dir":
                path.symlink_to(outside)
            elif kind == "link_file":
                path.symlink_to(outside / "secret")
            elif kind == "fifo":
                os.mkfifo(path)
            else:
                os.link(outside / "secret", path)
        except (FileExistsError, NotADirectoryError):
            continue  # a file (or a link) on the way: this entry cannot be made
    before = {p.name: p.read_bytes() for p in outside.iterdir()}
    for op, parts, data in ops:
        *dirs, name = parts
        try:
            with open_dir(root, dirs, create=True) as dfd:
                shown = root.joinpath(*parts)
                if op == "append":
                    append_bytes(dfd, name, data, shown=shown)
                elif op == "rotate":
                    append_bytes(dfd, name, data, shown=shown, rotate_at=1)
                elif op == "replace":
                    replace_bytes(dfd, name, data, shown=shown)
                else:
                    create_bytes(dfd, name, data, shown=shown)
        except (UnsafePath, NotFound):
            continue
        written = root.joinpath(*parts)
        assert not written.is_symlink() or op == "create"  # create leaves a link where it is
        if op in ("append", "rotate", "replace"):
            assert written.read_bytes().endswith(data)
    assert {p.name: p.read_bytes() for p in outside.iterdir()} == before
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]


def test_the_public_surface_is_pinned() -> None:
    from jidocode.shared import nofollow

    assert set(nofollow.__all__) == {
        "DIR_FLAGS",
        "HEAD_BYTES",
        "AppendFile",
        "UnsafePath",
        "append_bytes",
        "create_bytes",
        "dir_fd",
        "open_dir",
        "open_read",
        "replace_bytes",
    }
    assert all(hasattr(nofollow, name) for name in nofollow.__all__)
