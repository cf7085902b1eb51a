"""The pure parts of ``prd finish``: which branch to merge into, the merge message, where a push
may go (a local bare repository only: a network remote is refused naming its host), and the
PRD files set aside for a merge."""

from __future__ import annotations

from pathlib import Path

import pytest

from jidocode.services.prd.finish import (
    merge_into,
    merge_message,
    put_back,
    remote_path,
    root_in_use,
    set_aside,
    validate_remote,
)
from jidocode.services.prd.model import Prd
from jidocode.services.prd.store import LoopRecord, RunOptions
from jidocode.shared.errors import Conflict, InvalidInput, PermissionDenied
from jidocode.shared.events.prd import FinishPrd, LoopInfo

ROOT = "/work/app"


def _record(*, base: str = "", worktree: bool = False) -> LoopRecord:
    info = LoopInfo(project_id="p", prd="auth", state="completed", branch="prd/auth")
    return LoopRecord(info=info, options=RunOptions(worktree=worktree), base_branch=base)


def test_the_branch_to_merge_into() -> None:
    assert merge_into(FinishPrd(name="auth", into="dev"), _record(base="main"), "x") == "dev"
    assert merge_into(FinishPrd(name="auth"), _record(base="main"), "x") == "main"
    assert merge_into(FinishPrd(name="auth"), _record(worktree=True), "trunk") == "trunk"
    for record in (_record(), None, _record(worktree=True)):
        with pytest.raises(InvalidInput, match=r"not known which branch PRD 'auth' started from.*--into"):
            merge_into(FinishPrd(name="auth"), record, "")


def test_the_merge_message_is_one_capped_line() -> None:
    assert merge_message(Prd(name="auth", title="Log in"), "prd/auth") == "Merge PRD auth (prd/auth): Log in"
    assert merge_message(Prd(name="auth"), "b") == "Merge PRD auth (b)"
    long = merge_message(Prd(name="auth", title="x" * 200), "prd/auth")
    assert len(long) == 72 and long.endswith("…")


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("/srv/git/app.git", "/srv/git/app.git"),
        ("../app.git", "/work/app.git"),
        ("file:///srv/git/app%20x.git", "/srv/git/app x.git"),
        ("./a:b.git", "/work/app/a:b.git"),
    ],
)
def test_a_local_remote_is_a_path(url: str, path: str) -> None:
    if path.startswith(ROOT + "/"):
        with pytest.raises(PermissionDenied, match="lies in it"):
            remote_path(url, ROOT)
        return
    assert remote_path(url, ROOT) == path


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("https://github.com/o/r.git", "github.com"),
        ("ssh://git@example.org:22/r.git", "example.org"),
        ("git@example.org:o/r.git", "example.org"),
        ("git://example.org/r.git", "example.org"),
        ("ext::sh -c evil", "ext"),
    ],
)
def test_a_network_remote_is_refused_naming_its_host(url: str, host: str) -> None:
    with pytest.raises(PermissionDenied, match="without network") as refused:
        remote_path(url, ROOT)
    assert refused.value.details["host"] == host


@pytest.mark.parametrize("url", ["/", "/work", ROOT, "file:///work"])
def test_a_remote_holding_the_project_is_refused(url: str) -> None:
    with pytest.raises(PermissionDenied, match="holds the project"):
        remote_path(url, ROOT)


def test_remote_names() -> None:
    assert validate_remote("origin") == "origin"
    for bad in ("-x", "a/b", "..", "a..b", ""):
        with pytest.raises(InvalidInput):
            validate_remote(bad)


def test_files_set_aside_come_back_as_they_were(tmp_path: Path) -> None:
    prd = tmp_path / ".daedalus" / "prds" / "auth"
    prd.mkdir(parents=True)
    (prd / "prd.json").write_bytes(b"live\n")
    kept = set_aside(tmp_path, [".daedalus/prds/auth/prd.json"])
    assert not (prd / "prd.json").exists()
    (prd / "prd.json").write_bytes(b"merged\n")
    put_back(tmp_path, kept)
    assert (prd / "prd.json").read_bytes() == b"live\n"
    (tmp_path / "outside").write_text("x")
    (prd / "progress.md").symlink_to(tmp_path / "outside")
    with pytest.raises(InvalidInput):  # never through a link
        set_aside(tmp_path, [".daedalus/prds/auth/progress.md"])


def test_another_loop_in_the_root_keeps_finish_out() -> None:
    root = Path(ROOT)
    running = LoopInfo(project_id="p", prd="other", state="running", work_dir=ROOT)
    elsewhere = LoopInfo(project_id="p", prd="wt", state="running", work_dir=f"{ROOT}/.daedalus/worktrees/wt")
    done = LoopInfo(project_id="p", prd="old", state="completed", work_dir=ROOT)
    root_in_use([elsewhere, done], root)
    with pytest.raises(Conflict, match="PRD 'other' is running in the project root"):
        root_in_use([elsewhere, running], root)
