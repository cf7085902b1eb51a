"""The PRD's files: layout, atomic saves, link attacks, size caps, errors naming the field."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jidocode.services.prd import files
from jidocode.services.prd.files import (
    PrdPaths,
    append_agent_log,
    append_progress,
    create_prd,
    ensure_gitignored,
    list_prds,
    load_prd,
    render_prd_md,
    save_prd,
)
from jidocode.services.prd.model import Prd, UserStory, json_schema
from jidocode.services.prd.ops import mark_in_progress
from jidocode.shared.errors import Conflict, InvalidInput, NotFound, PayloadTooLarge

from .conftest import doc, story

VALIDATOR = jsonschema.Draft202012Validator(json_schema())
T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def sample(name: str = "auth") -> Prd:
    return Prd.model_validate(
        doc(
            story("US-001", acceptanceCriteria=["login works", "logout works"], description="The form."),
            story("US-002", priority=2),
            name=name,
            title="Auth",
            description="Sign in and out.",
        )
    )


@pytest.fixture
def paths(tmp_path: Path) -> PrdPaths:
    p = PrdPaths(tmp_path, "auth")
    create_prd(p, sample())
    return p


def test_create_lays_out_the_seed_files(paths: PrdPaths) -> None:
    assert sorted(os.listdir(paths.dir)) == ["prd.json", "prd.md", "progress.md"]
    assert paths.progress_md.read_text() == ""
    assert load_prd(paths.prd_json) == sample()
    assert json.loads(paths.prd_json.read_text())["userStories"][0]["acceptanceCriteria"] == [
        "login works",
        "logout works",
    ]
    md = paths.prd_md.read_text()
    assert md == render_prd_md(sample())
    for text in ("# Auth", "Sign in and out.", "### US-001: story US-001", "- [ ] login works", "The form."):
        assert text in md


def test_create_refuses_an_existing_prd_and_a_wrong_name(paths: PrdPaths) -> None:
    with pytest.raises(Conflict, match="already exists"):
        create_prd(paths, sample())
    with pytest.raises(InvalidInput, match="named 'other'"):
        create_prd(PrdPaths(paths.root, "x"), sample("other"))


@pytest.mark.parametrize("name", ["../x", "a/b", "", ".", "a" * 65, "a.b"])
def test_paths_refuse_bad_names(tmp_path: Path, name: str) -> None:
    with pytest.raises(InvalidInput, match="PRD name"):
        PrdPaths(tmp_path, name)


def test_list_prds(tmp_path: Path) -> None:
    assert list_prds(tmp_path) == []
    for name in ("b", "a"):
        create_prd(PrdPaths(tmp_path, name), sample(name))
    (tmp_path / ".daedalus/prds/empty").mkdir()  # no prd.json: not a PRD
    (tmp_path / ".daedalus/prds/bad name").mkdir()
    (tmp_path / ".daedalus/prds/file").write_text("x")
    os.symlink(tmp_path / ".daedalus/prds/a", tmp_path / ".daedalus/prds/link")
    assert list_prds(tmp_path) == ["a", "b"]


def test_save_then_load(paths: PrdPaths) -> None:
    changed = mark_in_progress(sample(), "US-002")
    save_prd(paths.prd_json, changed)
    assert load_prd(paths.prd_json) == changed
    assert sorted(os.listdir(paths.dir)) == ["prd.json", "prd.md", "progress.md"]


def test_failed_save_leaves_the_old_file_and_no_temp(
    paths: PrdPaths, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = paths.prd_json.read_bytes()

    def boom(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "fsync", boom)
    with pytest.raises(OSError, match="No space"):
        save_prd(paths.prd_json, mark_in_progress(sample(), "US-001"))
    monkeypatch.undo()
    assert paths.prd_json.read_bytes() == before
    assert sorted(os.listdir(paths.dir)) == ["prd.json", "prd.md", "progress.md"]


def test_load_errors_name_file_and_field(paths: PrdPaths) -> None:
    raw = json.loads(paths.prd_json.read_text())
    raw["userStories"][1]["title"] = "x" * 201
    paths.prd_json.write_text(json.dumps(raw))
    with pytest.raises(InvalidInput) as info:
        load_prd(paths.prd_json)
    assert info.value.message.startswith(f"{paths.prd_json}: userStories[1].title: ")
    assert "200" in info.value.message
    assert info.value.details["errors"][0]["field"] == "userStories[1].title"


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"{", "invalid JSON"),
        (b"[]", "top level must be a JSON object"),
        (b"\xff", "not valid UTF-8"),
        (json.dumps(doc(story("a", in_progress=True))).encode(), "userStories[0].in_progress: Extra inputs"),
        (
            json.dumps(doc(story("a"), story("a"))).encode(),
            "userStories[1].id: story id 'a' appears more than once",
        ),
    ],
)
def test_bad_files(paths: PrdPaths, content: bytes, words: str) -> None:
    paths.prd_json.write_bytes(content)
    with pytest.raises(InvalidInput, match=r"prd\.json: ") as info:
        load_prd(paths.prd_json)
    assert words in info.value.message


@pytest.mark.timeout(30)
def test_special_files_are_refused_without_hanging(paths: PrdPaths) -> None:
    paths.prd_json.unlink()
    os.mkfifo(paths.prd_json)
    with pytest.raises(InvalidInput, match="not a regular file"):
        load_prd(paths.prd_json)
    paths.progress_md.unlink()
    os.mkfifo(paths.progress_md)
    with pytest.raises(InvalidInput, match="not a regular file"):
        files.read_progress(paths)
    with pytest.raises(InvalidInput, match="not a regular file"):
        append_progress(paths, "x")


def test_byte_order_mark_is_accepted(paths: PrdPaths) -> None:
    paths.prd_json.write_bytes(b"\xef\xbb\xbf" + paths.prd_json.read_bytes())
    assert load_prd(paths.prd_json) == sample()


def test_missing_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFound, match="does not exist"):
        load_prd(PrdPaths(tmp_path, "nope").prd_json)
    with pytest.raises(NotFound, match="project directory"):
        create_prd(PrdPaths(tmp_path / "gone", "auth"), sample())


def test_size_cap(paths: PrdPaths) -> None:
    paths.prd_json.write_bytes(b" " * (files.MAX_PRD_BYTES + 1))
    with pytest.raises(PayloadTooLarge, match="more than the 1048576 bytes"):
        load_prd(paths.prd_json)


def test_save_refuses_a_prd_over_the_cap(paths: PrdPaths, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files, "MAX_PRD_BYTES", 100)
    with pytest.raises(PayloadTooLarge):
        save_prd(paths.prd_json, sample())


@pytest.mark.parametrize(
    "link", [".daedalus", ".daedalus/prds", ".daedalus/prds/auth", ".daedalus/prds/auth/prd.json"]
)
def test_links_are_refused(tmp_path: Path, link: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    create_prd(PrdPaths(outside, "auth"), sample())
    root = tmp_path / "project"
    target = outside / link
    (root / link).parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, root / link)
    paths = PrdPaths(root, "auth")
    before = (outside / ".daedalus/prds/auth/prd.json").read_bytes()
    with pytest.raises(InvalidInput, match="symbolic link"):
        load_prd(paths.prd_json)
    with pytest.raises(InvalidInput, match="symbolic link"):
        save_prd(paths.prd_json, mark_in_progress(sample(), "US-001"))
    if link != ".daedalus/prds/auth/prd.json":  # a linked directory: nothing in it is touched
        with pytest.raises(InvalidInput, match="symbolic link"):
            append_progress(paths, "x")
        with pytest.raises(InvalidInput, match="symbolic link"):
            create_prd(paths, sample())
    else:
        assert (root / link).is_symlink()  # left as it was, not replaced
    assert (outside / ".daedalus/prds/auth/prd.json").read_bytes() == before
    assert (outside / ".daedalus/prds/auth/progress.md").read_text() == ""


def test_appended_files_are_links_refused(paths: PrdPaths, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    os.symlink(victim, paths.agent_log)
    with pytest.raises(InvalidInput, match="symbolic link"):
        append_agent_log(paths, "x")
    assert victim.read_text() == "keep"


def test_append_progress_and_log_have_timestamp_headings(paths: PrdPaths) -> None:
    append_progress(paths, "US-001 passed\n", now=T0)
    append_progress(paths, "US-002 failed", now=T0)
    assert paths.progress_md.read_text() == (
        "\n## 2026-01-02T03:04:05Z\n\nUS-001 passed\n\n## 2026-01-02T03:04:05Z\n\nUS-002 failed\n"
    )
    append_agent_log(paths, "hello", now=T0)
    assert paths.agent_log.read_text() == "--- 2026-01-02T03:04:05Z ---\nhello\n"


def test_agent_log_rotates_past_its_cap(paths: PrdPaths) -> None:
    for i in range(5):
        append_agent_log(paths, f"{i}" * 40, now=T0, max_bytes=150)
    current = paths.agent_log.read_text()
    older = Path(f"{paths.agent_log}.1").read_text()
    assert len(current.encode()) <= 150 and len(older.encode()) <= 150
    assert current.endswith("4" * 40 + "\n")
    assert "3" * 40 in older
    assert not any(str(i) * 40 in current + older for i in (0, 1))  # the oldest generation is gone


def test_entry_cap(paths: PrdPaths) -> None:
    append_progress(paths, "é" * 100, max_entry_bytes=51)
    text = paths.progress_md.read_text()
    assert "é" * 25 in text and "é" * 26 not in text
    assert "cut: entry over 51 bytes" in text


def test_ensure_gitignored(tmp_path: Path) -> None:
    assert ensure_gitignored(tmp_path) is True
    text = (tmp_path / ".daedalus/.gitignore").read_text()
    assert "worktrees/" in text.splitlines()
    (tmp_path / ".daedalus/.gitignore").write_text("mine\n")
    assert ensure_gitignored(tmp_path) is False
    assert (tmp_path / ".daedalus/.gitignore").read_text() == "mine\n"


def test_create_writes_the_gitignore(paths: PrdPaths) -> None:
    assert "worktrees/" in (paths.root / ".daedalus/.gitignore").read_text()


def test_read_progress(paths: PrdPaths, tmp_path: Path) -> None:
    assert files.read_progress(paths) == ""
    for i in range(20):
        append_progress(paths, f"entry {i}", now=T0)
    assert "entry 0\n" in files.read_progress(paths)
    tail = files.read_progress(paths, max_bytes=60)
    assert tail.endswith("entry 19\n")
    assert "entry 0\n" not in tail and len(tail.encode()) <= 60
    assert not tail.startswith("ntry")  # starts at a line
    paths.progress_md.unlink()
    assert files.read_progress(paths) == ""
    victim = tmp_path / "secret"
    victim.write_text("secret")
    os.symlink(victim, paths.progress_md)
    with pytest.raises(InvalidInput, match="symbolic link"):
        files.read_progress(paths)


def test_relative_layout_paths_are_checked_too(paths: PrdPaths, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(paths.root)
    assert load_prd(Path(".daedalus/prds/auth/prd.json")) == sample()
    os.rename(".daedalus/prds/auth", ".daedalus/prds/real")
    os.symlink("real", ".daedalus/prds/auth")
    with pytest.raises(InvalidInput, match="symbolic link"):
        load_prd(Path(".daedalus/prds/auth/prd.json"))


_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=40)


@st.composite
def prds(draw: st.DrawFn) -> Prd:
    n = draw(st.integers(0, 6))
    running = draw(st.one_of(st.none(), st.integers(0, max(n - 1, 0))))
    stories = []
    for i in range(n):
        state = "in_progress" if running == i and n else draw(st.sampled_from(["pending", "passed"]))
        stories.append(
            UserStory(
                id=f"US-{i:03d}",
                title=draw(_text.filter(bool)),
                description=draw(_text),
                acceptance_criteria=draw(st.lists(_text, max_size=3)),
                priority=draw(st.integers(0, 5)),
                passes=state == "passed",
                in_progress=state == "in_progress",
                notes=draw(_text),
                attempts=draw(st.integers(0, 9)),
            )
        )
    return Prd(name="auth", title=draw(_text), description=draw(_text), user_stories=stories)


@settings(max_examples=25, deadline=None)
@given(prds())
def test_any_prd_survives_the_bytes_on_disk(prd: Prd) -> None:
    # the bytes save_prd writes and load_prd parses (the disk round trip is tested above; fsync
    # per example would cost seconds)
    data = files._prd_bytes(prd, Path("prd.json"))
    assert files.parse_prd(data, Path("prd.json")) == prd
    VALIDATOR.validate(json.loads(data))
    md = render_prd_md(prd)
    assert all(f"### {story.id}: " in md for story in prd.user_stories)
