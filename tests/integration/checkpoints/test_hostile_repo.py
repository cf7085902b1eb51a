"""A hostile project cannot make the checkpointing git run anything or write outside the data home.

The project is a git repository whose ``.git/config`` names programs (``core.fsmonitor``, a
filter and a diff driver that ``.gitattributes`` applies to every file, hooks for everything),
each of which would leave a canary in the shadow repository (the one place the sandboxed git may
write); ``.gitattributes`` also asks for end-of-line and ``$Id$`` conversions. Links point out
of the project. The tool runner's recorder records a checkpoint (its listing runs in each OS
sandbox), the project is changed, a directory swapped for a link to a folder outside, and the
checkpoint restored: no canary anywhere, the bytes stored as they were, links stored and put back
as links, nothing written through them.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from jidocode.services.tool_runner.checkpoints.recorder import Checkpoints
from jidocode.shared import sandbox
from jidocode.shared.events.engine import ProjectInfo
from jidocode.shared.events.tools import ToolCallMeta
from tests.security.sandbox_support import MODES, skip_unless

from .test_checkpoints_system import tree_of

HOOKS = (
    "pre-commit",
    "post-commit",
    "post-checkout",
    "post-index-change",
    "reference-transaction",
    "fsmonitor-watchman",
)


def _hostile(root: Path, outside: Path, canaries: tuple[Path, ...]) -> None:
    """Make ``root`` a hostile repository whose programs touch ``canaries/canary-<what>``."""
    subprocess.run(
        ["git", "init", "-q", str(root)], check=True, env={**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null"}
    )
    program = root / ".git" / "evil.sh"
    touches = " ".join(f'"{c}/canary-$1"' for c in canaries)
    program.write_text(f"#!/bin/sh\ntouch {touches} 2>/dev/null\ncat\n")
    program.chmod(0o755)
    with (root / ".git" / "config").open("a") as config:
        config.write(
            f"[core]\n\tfsmonitor = {program} fsmonitor\n\thooksPath = {root / '.git' / 'hooks'}\n"
            f'[filter "evil"]\n\tclean = {program} clean\n\tsmudge = {program} smudge\n\trequired = true\n'
            f'[diff "evil"]\n\ttextconv = {program} textconv\n'
        )
    (root / ".git" / "hooks").mkdir(exist_ok=True)
    for hook in HOOKS:
        (root / ".git" / "hooks" / hook).symlink_to(program)
    (root / ".gitattributes").write_text("* filter=evil diff=evil text eol=crlf ident\n")
    (root / "crlf.txt").write_bytes(b"line\r\nother\n$Id$\n")
    (root / "src").mkdir()
    (root / "src" / "a.py").write_text("a\n")
    (root / "passwd").symlink_to("/etc/passwd")
    (root / "escape").symlink_to(outside)
    (outside / "secret.txt").write_text("outside\n")


@pytest.mark.parametrize("mode", MODES)
async def test_a_hostile_repository_runs_nothing_and_links_stay_links(
    mode: str, tmp_path: Path, jido_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    skip_unless(mode)
    monkeypatch.setenv(sandbox.MODE_ENV, mode)
    root, outside, data = tmp_path / "proj", tmp_path / "outside", tmp_path.parent / f"{tmp_path.name}-data"
    root.mkdir()
    outside.mkdir()
    store = data / "checkpoints" / "p1.git"  # the one place the sandboxed git may write
    _hostile(root, outside, (store, tmp_path))
    before, outside_before = tree_of(root), tree_of(outside)
    checkpoints = Checkpoints(data / "checkpoints", jido_home=jido_home)
    info = ProjectInfo(project_id="p1", root_path=str(root), started_at="now")
    meta = ToolCallMeta(request_id="r1", conversation_id="c1", turn_id="m1", turn_label="go")
    try:
        assert await checkpoints.before(meta, info) is None
        (listed,) = (await checkpoints.listed(info, "c1")).checkpoints
        assert listed.files == 5  # .gitattributes crlf.txt src/a.py passwd escape; .git never

        (root / "crlf.txt").write_text("changed\n")
        (root / "passwd").unlink()
        (root / "src" / "a.py").unlink()
        (root / "src").rmdir()
        (root / "src").symlink_to(outside)  # a directory swapped for a link out of the project
        checkpoints.after(meta, info)
        done = await checkpoints.restore(info, listed.id, None, False)
    finally:
        await checkpoints.aclose()

    assert done.kept == [] and "src/a.py" in done.restored
    assert {k: v for k, v in tree_of(root).items() if not k.startswith(".git/")} == {
        k: v for k, v in before.items() if not k.startswith(".git/")
    }
    assert (root / "crlf.txt").read_bytes() == b"line\r\nother\n$Id$\n"  # no filter, no conversion
    assert os.readlink(root / "passwd") == "/etc/passwd" and os.readlink(root / "escape") == str(outside)
    assert not (root / "src").is_symlink() and (root / "src").is_dir()
    assert tree_of(outside) == outside_before  # nothing written through a link
    canaries = [p for top in (data, tmp_path, jido_home) for p in top.rglob("canary-*")]
    assert canaries == []


@pytest.mark.sandbox
async def test_old_checkpoints_expire_by_count_per_conversation(tmp_path: Path, jido_home: Path) -> None:
    (jido_home / "settings.json").write_text('{"checkpoints": {"max_per_conversation": 2}}')
    root = tmp_path / "proj"
    root.mkdir()
    checkpoints = Checkpoints(
        tmp_path.parent / f"{tmp_path.name}-data", jido_home=jido_home, expire_every_s=0
    )
    info = ProjectInfo(project_id="p1", root_path=str(root), started_at="now")
    try:
        for n in range(4):
            (root / "f.txt").write_text(str(n))
            meta = ToolCallMeta(request_id=f"r{n}", conversation_id="c1", turn_id=f"m{n}", turn_label=str(n))
            assert await checkpoints.before(meta, info) is None
        listed = (await checkpoints.listed(info, None)).checkpoints
    finally:
        await checkpoints.aclose()
    assert [c.label for c in listed] == ["2", "3"]
