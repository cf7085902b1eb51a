"""The quality service: check commands in the real sandbox (bubblewrap here, Landlock where asked).

The work dir is under pytest's ``tmp_path`` (the sandbox binds it read-write; the host's
``/tmp`` and home are hidden from the check). ``JIDO_CODE_HOME`` is the test's own (the
``jido_home`` fixture), so the user's settings never choose the sandbox.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jidocode.services.prd._capture import HeadTail
from jidocode.services.prd.git import GitRepo
from jidocode.services.prd.quality import (
    MAX_COMMANDS,
    MAX_OUTPUT_CAP,
    MAX_TIMEOUT_S,
    QualityReport,
    run_checks,
)
from jidocode.shared import sandbox
from jidocode.shared.errors import InvalidInput, NotFound
from tests.security.sandbox_support import processes_with, write_global

PATIENCE_S = 30.0


@pytest.fixture
def work(tmp_path: Path, jido_home: Path) -> Path:
    if not sandbox.detect().bwrap:
        pytest.skip(f"bubblewrap cannot run here: {sandbox.detect().bwrap_problem}")
    root = tmp_path / "work"
    root.mkdir()
    return root


async def _until(what: str, condition: Callable[[], bool]) -> None:
    """Wait (bounded) until ``condition()`` holds: ``/proc`` has no change notification, so it is polled."""

    async def poll() -> None:
        while not condition():  # noqa: ASYNC110
            await asyncio.sleep(0.02)

    try:
        await asyncio.wait_for(poll(), PATIENCE_S)
    except TimeoutError:
        pytest.fail(f"still not true after {PATIENCE_S:g} s: {what}")


# --- the kept output (pure) -------------------------------------------------------------------------


@given(st.lists(st.binary(max_size=300), max_size=20), st.integers(min_value=2, max_value=600))
def test_head_tail_keeps_first_and_last_bytes(chunks: list[bytes], cap: int) -> None:
    kept = HeadTail(cap)
    for chunk in chunks:
        kept.feed(chunk)
    data = b"".join(chunks)
    text, truncated = kept.text()
    assert truncated == (len(data) > cap) == kept.truncated
    if not truncated:
        assert text == data.decode("utf-8", "replace")
    else:
        assert f"{len(data)} bytes in all" in text
        head, _, tail = text.partition("\n[…")
        assert len(head.encode()) <= 3 * (cap - cap // 2)  # a replaced byte may grow to 3
        assert len(tail.encode()) <= 3 * (cap // 2) + 200


def test_head_tail_text_survives_a_seam_in_a_character() -> None:
    kept = HeadTail(10)
    kept.feed(("é" * 20).encode())  # 40 bytes, every cut falls somewhere in a character
    text, truncated = kept.text()
    assert truncated and "�" not in text
    assert text.startswith("éé") and text.endswith("éé")


# --- checks ------------------------------------------------------------------------------------------


async def test_every_check_runs_in_order_and_reports(work: Path) -> None:
    report = await run_checks(str(work), ["echo one; pwd", "echo two >&2; exit 3", "touch made; echo three"])
    assert isinstance(report, QualityReport)
    assert [c.ok for c in report.checks] == [True, False, True]
    assert [c.exit_code for c in report.checks] == [0, 3, 0]
    assert report.checks[0].output == f"one\n{work}\n"
    assert report.checks[1].output == "two\n"  # stderr merged
    assert not report.ok and report.failed == [report.checks[1]]
    assert (work / "made").exists()  # the work dir is writable
    assert all(c.sandbox == "bubblewrap" and c.duration_s > 0 and not c.timed_out for c in report.checks)


async def test_no_checks_is_ok(work: Path) -> None:
    report = await run_checks(str(work), [])
    assert report.ok and report.checks == []


async def test_output_streams_while_the_check_runs(work: Path) -> None:
    seen: list[tuple[str, str]] = []
    command = "echo started; until [ -e go ]; do sleep 0.02; done; echo finished"

    async def on_output(cmd: str, text: str) -> None:
        seen.append((cmd, text))
        if "started" in text:
            (work / "go").touch()  # the check waits for this: only a streamed chunk can release it

    report = await run_checks(str(work), [command], timeout_s=PATIENCE_S, on_output=on_output)
    assert report.ok, report.checks
    assert "".join(t for _, t in seen) == "started\nfinished\n"
    assert {c for c, _ in seen} == {command}


async def test_output_is_capped_head_and_tail(work: Path) -> None:
    streamed: list[str] = []

    async def on_output(_: str, text: str) -> None:
        streamed.append(text)

    report = await run_checks(
        str(work), ["seq 1 20000; echo SUMMARY"], output_cap=1024, on_output=on_output, stream_cap=2000
    )
    check = report.checks[0]
    assert check.ok and check.truncated
    assert check.output.startswith("1\n2\n3\n") and check.output.endswith("20000\nSUMMARY\n")
    assert "bytes of output left out" in check.output
    assert len(check.output.encode()) < 1024 + 200
    joined = "".join(streamed)
    assert joined.startswith("1\n2\n") and "no longer streamed after 2000 bytes" in joined
    assert len(joined.encode()) < 2000 + 200


async def test_timeout_kills_the_whole_tree(work: Path) -> None:
    marker = f"jido-check-{uuid.uuid4().hex[:12]}"
    alive: list[list[int]] = []

    async def on_output(_: str, text: str) -> None:
        if "spawned" in text:
            alive.append(processes_with(marker))

    command = (
        f"(exec -a {marker} sleep 300) & setsid bash -c 'exec -a {marker} sleep 300' & "
        f"until [ $(pgrep -fc {marker}) -ge 2 ]; do sleep 0.02; done; echo spawned; wait"
    )
    report = await run_checks(str(work), [command, "echo after"], timeout_s=1.0, on_output=on_output)
    first, second = report.checks
    assert first.timed_out and not first.ok and first.exit_code is None
    assert "spawned" in first.output and "timed out after 1 s" in first.output
    assert alive and len(alive[0]) >= 2  # the children were running when the output came
    await _until(f"no process of {marker} left", lambda: not processes_with(marker))
    assert second.ok and second.output == "after\n"  # a timed-out check does not stop the next


async def test_a_cancelled_run_stops_its_check(work: Path) -> None:
    marker = f"jido-check-{uuid.uuid4().hex[:12]}"
    started = asyncio.Event()

    async def on_output(_: str, text: str) -> None:
        if "spawned" in text:
            started.set()

    command = f"(exec -a {marker} sleep 300) & echo spawned; wait"
    run = asyncio.create_task(run_checks(str(work), [command, "touch second"], on_output=on_output))
    await asyncio.wait_for(started.wait(), PATIENCE_S)
    assert processes_with(marker)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    await _until(f"no process of {marker} left", lambda: not processes_with(marker))
    assert not (work / "second").exists()


async def test_additional_directories_are_visible(work: Path, tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "lint.sh").write_text("echo linted")
    report = await run_checks(str(work), [f"bash {tools}/lint.sh"], additional_directories=[str(tools)])
    assert report.ok and report.checks[0].output == "linted\n"
    hidden = await run_checks(str(work), [f"bash {tools}/lint.sh"])
    assert not hidden.ok  # without it, the rest of /tmp stays hidden


async def test_checks_cannot_write_outside_nor_read_the_home(
    work: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "secret").write_text("canary-7f3a9c")
    monkeypatch.setenv("HOME", str(home))
    outside = tmp_path / "outside"
    outside.mkdir()
    name = f"x-outside-{uuid.uuid4().hex}"
    report = await run_checks(
        str(work),
        [
            f"touch /tmp/{name} {outside}/x $HOME/x {home}/x ../y; echo wrote",
            f"cat {home}/secret; ls -A $HOME; echo read",
        ],
    )
    assert "wrote" in report.checks[0].output
    assert not Path("/tmp", name).exists() and not (outside / "x").exists()
    assert not (home / "x").exists() and not (tmp_path / "y").exists()
    assert "read" in report.checks[1].output and "canary-7f3a9c" not in report.checks[1].output


async def test_sandbox_refusal_is_a_failed_check(work: Path, jido_home: Path) -> None:
    if not sandbox.detect().landlock_abi:
        pytest.skip("Landlock is not available here")
    write_global(jido_home, {"mode": "landlock"})
    (work / ".jido").mkdir()
    (work / ".jido" / "big.bin").touch()
    os.truncate(work / ".jido" / "big.bin", 17 * 1024 * 1024)  # a protected path too large to keep
    report = await run_checks(str(work), ["touch ran", "echo second"], jido_home=str(jido_home))
    assert not report.ok and len(report.checks) == 2
    for check in report.checks:
        assert not check.ok and check.exit_code is None
        assert "sandbox refused" in check.output and check.sandbox == "protected_too_large"
    assert not (work / "ran").exists()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"commands": ["ok", "  "]}, "#2 is empty"),
        ({"commands": ["x" * 20000]}, "characters long"),
        ({"commands": ["a\0b"]}, "NUL"),
        ({"commands": ["true"] * (MAX_COMMANDS + 1)}, "too many"),
        ({"commands": "make test"}, "not one string"),
        ({"commands": ["true"], "timeout_s": 0}, "timeout_s"),
        ({"commands": ["true"], "timeout_s": MAX_TIMEOUT_S + 1}, "timeout_s"),
        ({"commands": ["true"], "output_cap": 10}, "output_cap"),
        ({"commands": ["true"], "output_cap": MAX_OUTPUT_CAP + 1}, "output_cap"),
        ({"commands": ["true"], "stream_cap": -1}, "stream_cap"),
        ({"commands": ["true"], "additional_directories": ["rel/dir"]}, "not an absolute path"),
        ({"commands": ["true"], "additional_directories": "/opt"}, "list of at most"),
    ],
)
async def test_bad_arguments_refused_before_anything_runs(
    work: Path, kwargs: dict[str, object], match: str
) -> None:
    with pytest.raises(InvalidInput, match=match):
        await run_checks(str(work), **kwargs)  # type: ignore[arg-type]


async def test_missing_work_dir(tmp_path: Path) -> None:
    with pytest.raises(NotFound, match="not a directory"):
        await run_checks(str(tmp_path / "nope"), ["true"])
    assert not os.path.exists(tmp_path / "nope")


async def test_a_broken_on_output_is_raised_after_its_check(work: Path) -> None:
    async def on_output(_: str, __: str) -> None:
        raise RuntimeError("the bus is gone")

    with pytest.raises(RuntimeError, match="the bus is gone"):
        await run_checks(str(work), ["echo x; touch first", "touch second"], on_output=on_output)
    assert (work / "first").exists() and not (work / "second").exists()


@pytest.fixture
def repo(work: Path) -> Path:
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True)
    return work


async def test_a_check_in_a_worktree_leaves_it_a_worktree(repo: Path) -> None:
    work = repo
    git = GitRepo(str(work))
    (work / "a").write_text("a")
    first = await git.commit_all("init")
    assert first is not None
    wt = work / ".daedalus" / "worktrees" / "x"
    await git.add_worktree(str(wt), "prd/x")
    report = await run_checks(str(wt), ["echo story > story.txt; echo 'gitdir: evil' > .git"])
    # the worktree's .git file was put back, and a check that changed it fails
    assert not report.ok and "put back: .git" in report.checks[0].output
    commit = await git.at(str(wt)).commit_all("story")  # git runs in the sandbox of the root
    assert commit is not None and commit.files == ["story.txt"]
    assert await git.at(str(wt)).current_branch() == "prd/x"
    assert await git.current_branch() == "main"
    assert await git.dirty_files() == []
    # git itself works in a check in the worktree once it is shown the repository (read-only)
    common = await git.common_dir()
    assert common == str(work / ".git")
    seen = await run_checks(
        str(wt), ["git log --format=%s", "git commit --allow-empty -qm x"], additional_directories=[common]
    )
    assert seen.checks[0].output == "story\ninit\n"
    assert not seen.checks[1].ok  # … and cannot write to it
    blind = await run_checks(str(wt), ["git log --format=%s"])
    assert not blind.ok and "not a git repository" in blind.checks[0].output
