"""Built-in tools through the in-process executor (authorize → validate → run → ToolResult)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jidocode.services.tool_runner.executor import MAX_RESULT_BYTES, Limits, execute, fit_result
from jidocode.services.tool_runner.tools import BUILTINS
from jidocode.services.tool_runner.tools.bash import scrubbed_env
from jidocode.shared.events.tools import ToolResult
from jidocode.shared.policy import Policy
from jidocode.shared.tools import BUILTIN_SPECS, builtin_specs


@pytest.fixture
def root(tmp_path: Path) -> Path:
    proj = tmp_path / "proj"
    (proj / "src").mkdir(parents=True)
    (proj / "src" / "a.py").write_text("def f():\n    return 1\n\n\ndef g():\n    return 1\n")
    (proj / "README.md").write_text("hello\nworld\n")
    return proj


@pytest.fixture
def policy(root: Path) -> Policy:
    return Policy.build(
        str(root),
        allow=[
            "Read",
            "Edit",
            "Bash(echo:*)",
            "Bash(printf:*)",
            "Bash(sleep:*)",
            "Bash(env)",
            "Bash(pwd)",
            "Bash(exit:*)",
        ],
    )


async def run(policy: Policy, name: str, args: dict[str, Any], **limits: Any) -> ToolResult:
    return await execute(policy, name, args, limits=Limits(**limits) if limits else None)


def test_specs_have_json_schema() -> None:
    specs = builtin_specs()
    assert {s["name"] for s in specs} == {
        "read_file",
        "write_file",
        "edit_file",
        "list_dir",
        "glob",
        "grep",
        "bash",
        "web_fetch",
    }
    for s in specs:
        assert s["description"] and s["input_schema"]["type"] == "object"
    assert "path" in BUILTINS["read_file"].spec()["input_schema"]["required"]


def test_the_runner_runs_exactly_the_shared_specs() -> None:
    """The catalog (shared specs) and the runner's tools are the same list, in the same order."""
    assert [t.definition for t in BUILTINS.values()] == list(BUILTIN_SPECS)
    assert [t.spec() for t in BUILTINS.values()] == builtin_specs()


async def test_read_file_line_range(policy: Policy) -> None:
    r = await run(policy, "read_file", {"path": "README.md", "offset": 2, "limit": 5})
    assert r.ok and r.data["content"] == "world\n" and r.data["total_lines"] == 2 and r.data["end_line"] == 2


async def test_read_missing_and_directory(policy: Policy) -> None:
    missing = await run(policy, "read_file", {"path": "nope.txt"})
    assert missing.error is not None and missing.error.type == "not_found"
    directory = await run(policy, "read_file", {"path": "src"})
    assert directory.error is not None and directory.error.type == "invalid_input"


async def test_read_output_cap_marks_truncation(policy: Policy, root: Path) -> None:
    (root / "big.txt").write_text("x" * 5000)
    r = await run(policy, "read_file", {"path": "big.txt"}, output_cap=1024)
    assert r.ok and r.data["truncated"] and "truncated" in r.data["content"]
    assert r.logs == ["output truncated"]


async def test_write_creates_parents_and_keeps_mode(policy: Policy, root: Path) -> None:
    r = await run(policy, "write_file", {"path": "new/dir/f.txt", "content": "hi"})
    assert r.ok and r.data["created"] is True
    assert (root / "new" / "dir" / "f.txt").read_text() == "hi"
    (root / "x.sh").write_text("old")
    (root / "x.sh").chmod(0o755)
    r2 = await run(policy, "write_file", {"path": "x.sh", "content": "new"})
    assert r2.ok and r2.data["created"] is False
    assert (root / "x.sh").stat().st_mode & 0o777 == 0o755


async def test_edit_exact_unique(policy: Policy, root: Path) -> None:
    ok = await run(policy, "edit_file", {"path": "src/a.py", "old_string": "def g", "new_string": "def h"})
    assert ok.ok and "def h" in (root / "src" / "a.py").read_text()
    missing = await run(policy, "edit_file", {"path": "src/a.py", "old_string": "zzz", "new_string": "y"})
    assert missing.error is not None and "not found" in missing.error.message
    twice = await run(
        policy, "edit_file", {"path": "src/a.py", "old_string": "return 1", "new_string": "return 2"}
    )
    assert twice.error is not None and "occurs 2 times" in twice.error.message
    every = await run(
        policy,
        "edit_file",
        {"path": "src/a.py", "old_string": "return 1", "new_string": "return 2", "replace_all": True},
    )
    assert every.ok and every.data["replacements"] == 2


async def test_list_dir_glob_grep(policy: Policy, root: Path) -> None:
    (root / ".env").write_text("TOKEN=secret\n")
    listing = await run(policy, "list_dir", {})
    assert {e["name"] for e in listing.data["entries"]} >= {"src", "README.md"}
    found = await run(policy, "glob", {"pattern": "**/*.py"})
    assert found.data["matches"] == ["src/a.py"]
    hits = await run(policy, "grep", {"pattern": r"return \d", "glob": "*.py"})
    assert [(m["path"], m["line"]) for m in hits.data["matches"]] == [("src/a.py", 2), ("src/a.py", 6)]
    secret = await run(policy, "grep", {"pattern": "TOKEN"})
    assert secret.data["matches"] == []  # .env is sensitive: never searched
    bad = await run(policy, "grep", {"pattern": "("})
    assert bad.error is not None and bad.error.type == "invalid_input"


async def test_unknown_arguments_are_refused(policy: Policy) -> None:
    r = await run(policy, "read_file", {"path": "README.md", "sudo": True})
    assert r.error is not None and r.error.type == "invalid_input"


async def test_bash_runs_in_root_with_scrubbed_env(
    policy: Policy, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SECRET_API_KEY", "leak-me")
    pwd = await run(policy, "bash", {"command": "pwd"})
    assert pwd.data["output"].strip() == str(root.resolve())
    env = await run(policy, "bash", {"command": "env"})
    assert "leak-me" not in env.data["output"]
    assert "GIT_CONFIG_VALUE_0=explicit" in env.data["output"]


def test_scrubbed_env_allowlist() -> None:
    env = scrubbed_env({"PATH": "/bin", "AWS_SECRET_ACCESS_KEY": "x", "HOME": "/h", "LD_PRELOAD": "y"})
    assert env["PATH"] == "/bin" and env["HOME"] == "/h"
    assert "AWS_SECRET_ACCESS_KEY" not in env and "LD_PRELOAD" not in env


async def test_bash_exit_code_and_output_cap(policy: Policy) -> None:
    failed = await run(policy, "bash", {"command": "exit 3"})
    assert failed.ok and failed.data["exit_code"] == 3
    big = await run(policy, "bash", {"command": "printf 'x%.0s' $(seq 1 5000)"}, output_cap=1024)
    # seq is not allowed: the whole command is refused, nothing runs
    assert big.error is not None and big.error.type == "permission_denied"
    capped = await run(policy, "bash", {"command": "printf '%05000d' 0"}, output_cap=1024)
    assert capped.data["truncated"] and capped.data["output_bytes"] == 5000


async def test_bash_timeout(policy: Policy) -> None:
    r = await run(policy, "bash", {"command": "sleep 30"}, timeout_s=0.3)
    assert r.error is not None and r.error.type == "timeout"


async def test_model_cannot_raise_the_timeout(policy: Policy) -> None:
    r = await run(policy, "bash", {"command": "sleep 30", "timeout_s": 3600}, timeout_s=0.3)
    assert r.error is not None and r.error.type == "timeout"


def test_fit_result_shrinks_strings_and_lists() -> None:
    # 200 KB of \x01 is 1.2 MB as JSON: more than a NATS message
    data, cut = fit_result({"output": "\x01" * 200_000, "truncated": False}, 64 * 1024)
    assert cut and data["truncated"] is True
    assert len(json.dumps(data)) <= 64 * 1024
    lists, cut = fit_result({"matches": [{"text": "x" * 100}] * 10_000}, 32 * 1024)
    assert cut and len(json.dumps(lists)) <= 32 * 1024 and lists["matches"]


async def test_bash_control_bytes_fit(root: Path) -> None:
    p = Policy.build(str(root), allow=["Bash(head:*)"])
    (root / "ctl.bin").write_bytes(b"\x01" * 300_000)
    r = await run(p, "bash", {"command": "head -c 300000 ctl.bin"}, output_cap=256 * 1024)
    assert r.ok and r.data["truncated"]
    assert len(r.model_dump_json()) <= MAX_RESULT_BYTES
