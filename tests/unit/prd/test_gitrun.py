"""Git in the sandbox (decision 0300): the pure parts (pins from a configuration listing, the command
line, protected paths of a checkout, nested repositories in git's listings) and what GitRepo does
with them against real git: the author, the refusal where no sandbox runs, the second wall."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from jidocode.services.prd import gitrun
from jidocode.services.prd.git import (
    DEFAULT_AUTHOR,
    GitRepo,
    gitlinks,
    global_identity,
    untracked_repos,
)
from jidocode.services.prd.gitrun import (
    DRIVER_KEYS,
    ENV_PROGRAM,
    LOOP_PINS,
    driver_pins,
    git_argv,
    protected_changes,
)
from jidocode.shared import sandbox
from jidocode.shared.errors import PermissionDenied
from jidocode.shared.sandbox import Capabilities


def host_git(root: Path, *args: str, env: dict[str, str]) -> str:
    return subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=True, env=env
    ).stdout


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    return {"PATH": os.environ["PATH"], "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1"}


@pytest.fixture
def repo(tmp_path: Path, env: dict[str, str]) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    host_git(root, "init", "-q", "-b", "main", env=env)
    (root / "README").write_text("hello\n")
    host_git(root, "add", "README", env=env)
    host_git(root, "-c", "user.name=T", "-c", "user.email=t@x", "commit", "-qm", "init", env=env)
    return root


# --- pins ------------------------------------------------------------------------------------------


def test_every_driver_a_listing_names_is_pinned_off_whatever_its_keys() -> None:
    listing = b"\0".join(
        [
            b"core.bare",
            b"filter.lfs.process",
            b"filter.a.b.clean",  # a driver named with a dot
            b"filter.x=y.smudge",  # … and with '=' (-c could not pin it)
            b"diff.Pic.textconv",  # the name keeps its case
            b"merge.ours.driver",
            b"FILTER.up.required",  # sections are case-insensitive
            b"diff.external",  # no subsection: a plain key (pinned by GIT_PINS)
            b"user.name",
            b"",
        ]
    )
    pins = dict(driver_pins(listing))
    for name in ("lfs", "a.b", "x=y", "up"):
        assert pins[f"filter.{name}.clean"] == pins[f"filter.{name}.smudge"] == ""
        assert pins[f"filter.{name}.process"] == "" and pins[f"filter.{name}.required"] == "false"
    assert pins["diff.Pic.textconv"] == "cat"
    assert pins["diff.Pic.command"] == dict(sandbox.GIT_PINS)["diff.external"]
    assert pins["merge.ours.driver"] == "false"
    assert not any(k.startswith(("core.", "user.", "diff.external")) for k in pins)
    assert driver_pins(b"") == ()


def test_every_program_key_of_a_driver_section_has_a_pin() -> None:
    assert {k for k, _ in DRIVER_KEYS["filter"]} == {"clean", "smudge", "process", "required"}
    assert {k for k, _ in DRIVER_KEYS["diff"]} == {"textconv", "command"}
    assert {k for k, _ in DRIVER_KEYS["merge"]} == {"driver"}


def test_the_command_line_sets_everything_inside_the_sandbox() -> None:
    argv = git_argv(
        ["status", "-z"], pins=[("filter.x=y.clean", ""), ("a.b", "c")], env={"GIT_AUTHOR_NAME": "A"}
    )
    assert argv[0] == ENV_PROGRAM and argv[-4:] == ["git", "--no-pager", "status", "-z"]
    pairs = dict(a.split("=", 1) for a in argv[1:-4])
    assert pairs["GIT_CONFIG_NOSYSTEM"] == "1" and pairs["GIT_CONFIG_GLOBAL"] == "/dev/null"
    assert pairs["GIT_CONFIG_COUNT"] == "2"
    assert pairs["GIT_CONFIG_KEY_0"] == "filter.x=y.clean" and pairs["GIT_CONFIG_VALUE_0"] == ""
    assert pairs["GIT_AUTHOR_NAME"] == "A" and pairs["GIT_NO_LAZY_FETCH"] == "1"
    with pytest.raises(ValueError, match="environment variable"):
        git_argv(["status"], pins=[], env={"A=B": "x"})


def test_sandbox_and_loop_pins_cover_the_program_keys() -> None:
    keys = {k for k, _ in (*sandbox.GIT_PINS, *LOOP_PINS)}
    assert {
        "core.fsmonitor",
        "core.hooksPath",
        "core.sshCommand",
        "core.alternateRefsCommand",
        "core.attributesFile",
        "gpg.program",
        "gpg.ssh.program",
        "submodule.recurse",
        "diff.ignoreSubmodules",
        "protocol.allow",
    } <= keys
    assert "uploadpack.packObjectsHook" not in keys  # a pin would be the one way to turn it on


# --- protected paths and nested repositories ---------------------------------------------------------


def test_protected_changes_by_components_and_case() -> None:
    rels = sandbox.protected_rels(".jido")
    changed = [
        ".jido/settings.json",
        ".envrc",
        ".mcp.json",
        ".github/workflows/ci.yml",
        ".github/dependabot.yml",  # not a workflow
        ".vscode/tasks.json",
        ".JIDO/settings.json",
        ".envrc.example",  # another name
        "src/.envrc",  # not at the root
        "feature.py",
    ]
    assert protected_changes(changed, rels) == sorted(
        [
            ".JIDO/settings.json",
            ".envrc",
            ".github/workflows/ci.yml",
            ".jido/settings.json",
            ".mcp.json",
            ".vscode/tasks.json",
        ]
    )
    assert protected_changes(["a", "b/c"], rels) == []


def test_nested_repositories_in_git_listings() -> None:
    assert untracked_repos(b"?? sub/\0?? a.txt\0 M b\0?? deep/er/\0") == ["deep/er", "sub"]
    stage = b"\x00".join(
        [b"100644 e69de29 0\ta.txt", b"160000 03e4c97 0\tsub", b"160000 1234567 0\tx y", b""]
    )
    assert gitlinks(stage) == {"sub", "x y"}
    tree = b"\x00".join([b"160000 commit 03e4c97\tsub", b"100644 blob e69\ta", b""])
    assert gitlinks(tree) == {"sub"}  # ls-tree
    assert gitlinks(b"") == set()


# --- against real git ----------------------------------------------------------------------------------


async def test_the_author_is_the_users_global_identity_read_on_the_host(
    repo: Path, env: dict[str, str]
) -> None:
    home = Path(env["HOME"])
    (home / ".gitconfig").write_text("[user]\n\tname = Global User\n\temail = global@x\n")
    assert await global_identity("name", env) == "Global User"
    (repo / "a").write_text("a")
    await GitRepo(str(repo), env=env).commit_all("m")
    author = host_git(repo, "log", "-1", "--format=%an <%ae>|%cn", env=env).strip()
    assert author == "Global User <global@x>|Global User"
    (home / ".gitconfig").unlink()
    (repo / "b").write_text("b")
    await GitRepo(str(repo), env=env).commit_all("m2")
    assert host_git(repo, "log", "-1", "--format=%an <%ae>", env=env).strip() == "{} <{}>".format(
        *DEFAULT_AUTHOR
    )


async def test_git_is_refused_where_no_sandbox_runs(
    repo: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from jidocode.shared.sandbox import _launch

    none = Capabilities(bwrap_problem="not installed", landlock_problem="not in this kernel")
    monkeypatch.setattr(_launch, "detect", lambda: none)
    (repo / "a").write_text("a")
    with pytest.raises(PermissionDenied, match="git is refused") as info:
        await GitRepo(str(repo), env=env).commit_all("m")
    assert info.value.details["sandbox"] == "unavailable"
    assert host_git(repo, "rev-list", "--count", "HEAD", env=env).strip() == "1"


async def test_a_config_program_missed_by_the_pins_cannot_write_outside_the_root(
    repo: Path, env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    evil = repo / "evil.sh"
    evil.write_text(
        f'#!/bin/sh\ntouch "{outside}/ran" && echo wrote-outside > "{repo}/escaped"\necho ran > "{repo}/inside"\ncat\n'
    )
    evil.chmod(0o755)
    host_git(repo, "config", "filter.x.clean", str(evil), env=env)
    (repo / ".gitattributes").write_text("*.txt filter=x\n")
    (repo / "a.txt").write_text("a\n")
    monkeypatch.setattr(gitrun, "driver_pins", lambda listing: ())
    from jidocode.services.prd import git as prd_git

    monkeypatch.setattr(prd_git, "driver_pins", lambda listing: ())
    commit = await GitRepo(str(repo), env=env).commit_all("m")
    assert commit is not None
    assert (repo / "inside").read_text() == "ran\n"  # it ran, in the sandbox …
    assert not (outside / "ran").exists() and not (repo / "escaped").exists()  # … and wrote nothing outside
