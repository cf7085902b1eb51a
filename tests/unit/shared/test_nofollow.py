"""The link-free directory walk shared by the tool runner's file tools and the PRD files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jidocode.shared.nofollow import dir_fd


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
