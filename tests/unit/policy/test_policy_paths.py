"""The path sandbox: realpath, component comparison, sensitive and protected files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jidocode.shared.policy import PathSandbox, is_within


@pytest.fixture
def root(tmp_path: Path) -> Path:
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "src").mkdir()
    (proj / "src" / "a.py").write_text("x")
    return proj


def test_is_within_compares_components() -> None:
    assert is_within("/proj/a", "/proj")
    assert is_within("/proj", "/proj")
    assert not is_within("/proj-evil/a", "/proj")
    assert not is_within("/pro", "/proj")


def test_relative_and_absolute_inside(root: Path) -> None:
    box = PathSandbox.create(str(root))
    assert box.check("src/a.py", "read").ok
    assert box.check(str(root / "src" / "a.py"), "read").ok
    assert box.check("new/file.txt", "write").ok


@pytest.mark.parametrize("path", ["../x", "/etc/passwd", "src/../../x", "~/.bashrc"])
def test_outside(root: Path, path: str) -> None:
    box = PathSandbox.create(str(root))
    check = box.check(path, "read")
    if path.startswith("~"):
        # "~" is not expanded: it is a file named "~" inside the root
        assert check.ok
    else:
        assert not check.ok and check.reason == "outside_root"


def test_sibling_with_common_prefix(root: Path) -> None:
    evil = root.parent / (root.name + "-evil")
    evil.mkdir()
    box = PathSandbox.create(str(root))
    check = box.check(str(evil / "x"), "read")
    assert check.reason == "outside_root"


def test_symlink_out_is_outside(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "secret"
    outside.mkdir()
    os.symlink(outside, root / "link")
    box = PathSandbox.create(str(root))
    assert box.check("link/x", "read").reason == "outside_root"
    assert box.check("link/x", "write").reason == "outside_root"


def test_additional_directories(root: Path, tmp_path: Path) -> None:
    extra = tmp_path / "shared"
    extra.mkdir()
    box = PathSandbox.create(str(root), additional_directories=[str(extra)])
    assert box.check(str(extra / "f"), "read").ok
    assert box.check(str(extra / "f"), "read").base == str(extra.resolve())


@pytest.mark.parametrize(
    "name",
    [
        ".env",
        ".env.local",
        "server.pem",
        "id_rsa",
        "id_ed25519.pub",
        ".ssh/config",
        "deploy/tls.key",
        ".npmrc",
    ],
)
def test_sensitive_denied(root: Path, name: str) -> None:
    box = PathSandbox.create(str(root))
    assert box.check(name, "read").reason == "sensitive"
    assert box.check(name, "read", allow_sensitive=True).ok


@pytest.mark.parametrize("name", [".env.example", "environment.py", "pem.txt"])
def test_not_sensitive(root: Path, name: str) -> None:
    assert PathSandbox.create(str(root)).check(name, "read").ok


@pytest.mark.parametrize(
    "name",
    [
        ".git/hooks/pre-commit",
        ".git/config",
        ".git",
        "sub/.git/config",
        ".jido/settings.json",
        ".jido/settings.local.json",
        ".jido_code/settings.json",
        ".jido_code/skills/x.md",
        ".mcp.json",
        ".gitmodules",
    ],
)
def test_protected_for_write_only(root: Path, name: str) -> None:
    box = PathSandbox.create(str(root))
    assert box.check(name, "write").reason == "protected"
    assert box.check(name, "read").ok


def test_other_settings_json_is_writable(root: Path) -> None:
    assert PathSandbox.create(str(root)).check("app/settings.json", "write").ok


def test_global_home_protected(root: Path, tmp_path: Path) -> None:
    home = tmp_path / "jh"
    home.mkdir()
    box = PathSandbox.create(str(root), additional_directories=[str(home)], jido_home=str(home))
    # hidden (decision 0303): neither read nor written, whatever additional_directories say
    assert box.check(str(home / "skills" / "x.md"), "write").reason == "hidden"
    assert box.check(str(home / "skills" / "x.md"), "read").reason == "hidden"
    # and protected still, should a caller give no hidden list
    bare = PathSandbox.create(str(root), additional_directories=[str(home)], jido_home=str(home), hidden=())
    assert bare.check(str(home / "skills" / "x.md"), "write").reason == "protected"


@pytest.mark.parametrize("bad", ["a\x00b", "a\u202eb", "a\u200bb", "x\ny", ""])
def test_invalid_characters(root: Path, bad: str) -> None:
    assert PathSandbox.create(str(root)).check(bad, "read").reason == "invalid"


_segments = st.lists(st.sampled_from(["..", ".", "a", "b", "src", "", "x.txt"]), min_size=1, max_size=8)


@settings(max_examples=200, deadline=None)
@given(_segments, st.booleans())
def test_every_ok_path_is_inside(
    tmp_path_factory: pytest.TempPathFactory, parts: list[str], absolute: bool
) -> None:
    root = tmp_path_factory.getbasetemp() / "hyp-root"
    root.mkdir(exist_ok=True)
    box = PathSandbox.create(str(root))
    raw = "/".join(parts)
    if absolute:
        raw = str(root) + "/" + raw
    if not raw:
        return
    check = box.check(raw, "write")
    if check.ok:
        assert is_within(check.path, box.root)
    else:
        assert check.reason in ("outside_root", "invalid", "protected", "sensitive")
