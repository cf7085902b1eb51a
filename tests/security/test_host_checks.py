"""A PRD quality check is project content too: one that changes a protected path is stopped at
once, the path put back, and the check fails (issue 24, finding 12; decision 0307).

Before, the check ran to its end with the planted ``core.fsmonitor`` in ``.git/config`` (the
user's own ``git status`` meanwhile ran it on the host) and passed: the guard's note was only
appended to its output. Judged on the host: the config's bytes, and a marker the check would
write after the change if it were not stopped.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from jidocode.services.prd.quality import run_checks
from tests.security.sandbox_support import MODES, make_project, skip_unless, write_global

#: Seconds the check goes on after its change when nobody stops it (its timeout is longer).
LONG_S = 20


@pytest.mark.parametrize("mode", MODES)
async def test_a_check_that_plants_an_fsmonitor_is_stopped_and_fails(mode: str, tmp_path: Path) -> None:
    skip_unless(mode)
    jido_home = tmp_path / "jido_home"
    write_global(jido_home, {"mode": mode})
    root = make_project(tmp_path / "project")
    config = (root / ".git" / "config").read_bytes()
    # under bubblewrap .git/config is a read-only bind: the append fails and the chain stops;
    # under Landlock it lands, and the guard must put it back and stop the check at once
    check = (
        f"printf '[core]\\n\\tfsmonitor = touch {tmp_path}/canary\\n' >> .git/config && "
        f"sleep {LONG_S} && touch went-on"
    )
    report = await run_checks(str(root), [check], timeout_s=LONG_S * 3, jido_home=str(jido_home))
    outcome = report.checks[0]
    assert not report.ok and not outcome.ok
    if mode == "landlock":
        assert "put back: .git/config" in outcome.output and "the check fails" in outcome.output
    assert (root / ".git" / "config").read_bytes() == config
    assert not (root / "went-on").exists(), "the check was not stopped when it changed .git/config"
    assert not (tmp_path / "canary").exists()


@pytest.mark.parametrize("mode", MODES)
async def test_a_check_that_changes_nothing_protected_still_passes(mode: str, tmp_path: Path) -> None:
    skip_unless(mode)
    jido_home = tmp_path / "jido_home"
    write_global(jido_home, {"mode": mode})
    root = make_project(tmp_path / "project")
    report = await run_checks(
        str(root), ["echo built > out.txt && git status --short"], jido_home=str(jido_home)
    )
    assert report.ok and (root / "out.txt").read_text() == "built\n"
