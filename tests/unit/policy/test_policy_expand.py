"""Brace and pathname expansion as bash does them, bounded."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jidocode.shared.policy.expand import MAX_BRACE_WORDS, MAX_GLOB_ENTRIES, brace_expand, glob_paths
from tests.helpers import count_scandir


@pytest.mark.parametrize(
    ("word", "words"),
    [
        ("plain", ["plain"]),
        ("a{b,c}d", ["abd", "acd"]),
        ("t{o,}uch", ["touch", "tuch"]),
        ("{a,b{c,d}}", ["a", "bc", "bd"]),
        ("{x,y}{1,2}", ["x1", "x2", "y1", "y2"]),
        ("f{1..3}", ["f1", "f2", "f3"]),
        ("{3..1}", ["3", "2", "1"]),
        ("{0..10..5}", ["0", "5", "10"]),
        ("{a..c}", ["a", "b", "c"]),
        ("{}", ["{}"]),
        ("{x}", ["{x}"]),
        ("a{b", ["a{b"]),
        ("{lit}{a,b}", ["{lit}a", "{lit}b"]),
    ],
)
def test_brace_expand(word: str, words: list[str]) -> None:
    assert brace_expand(word) == words


def test_brace_expand_is_bounded() -> None:
    assert len(brace_expand("{1..9}{1..9}{1..9}{1..9}")) == MAX_BRACE_WORDS
    assert len(brace_expand("{1..999999}")) == MAX_BRACE_WORDS


def test_glob_paths_follows_bash(tmp_path: Path) -> None:
    for name in ("a.py", "b.py", ".hidden.py", "sub/c.py", "sub/.d.py"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("x")
    base = str(tmp_path)
    rel = lambda paths: [os.path.relpath(p, base) for p in paths or []]  # noqa: E731
    assert rel(glob_paths(base, "*.py")) == ["a.py", "b.py"]
    assert rel(glob_paths(base, ".*.py")) == [".hidden.py"]
    assert rel(glob_paths(base, "*/*.py")) == ["sub/c.py"]
    assert rel(glob_paths(base, "[^a].py")) == ["b.py"]
    assert rel(glob_paths(base, "nothing*")) == []
    assert rel(glob_paths(base, f"{base}/su?/c.py")) == ["sub/c.py"]


def test_glob_paths_gives_up_on_huge_scans(monkeypatch: pytest.MonkeyPatch) -> None:
    read = count_scandir(monkeypatch)
    assert glob_paths("/", "/*/*/*/*/*/*/*/nothing") is None
    # bounded by entries read, not by a walk of the file system (the last directory may overshoot)
    assert sum(read[:-1]) <= MAX_GLOB_ENTRIES
