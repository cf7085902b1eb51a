"""Read rules mean what they say, in every tool; grep and glob never show what a rule hides.

The rule forms of docs/security.md (``Read(./x)``, ``Read(//abs)``,
``Read(~/x)``, a bare directory) are tested against the file tools and bash;
grep and glob run for real (in-process, on a real tree) and are judged by the
canary strings and names in their results. The regex cases run a pattern
with catastrophic backtracking and check that it ends as a ``timeout`` within
the call's limit while the event loop keeps serving other calls.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from jidocode.services.tool_runner.executor import Limits, execute, run_authorized
from jidocode.services.tool_runner.tools import search
from jidocode.shared.policy import Effect, Policy, authorize, parse_rule

CANARY = "CANARY-7d1f"
ENV_CANARY = "CANARY-ENV-55aa"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    (root / "secrets").mkdir()
    (root / "src" / "app.py").write_text("password = read_env()\n")
    (root / "secrets" / "k").write_text(f"password = {CANARY}\n")
    (root / ".env").write_text(f"password={ENV_CANARY}\n")
    return root


def _policy(root: Path, **rules: list[str]) -> Policy:
    return Policy.build(
        str(root),
        allow=rules.get("allow", ["Read", "Bash(cat:*)", "Bash(grep:*)"]),
        deny=rules.get("deny", []),
        ask=rules.get("ask", []),
        additional_directories=rules.get("dirs", []),
        home=str(root.parent / "home"),
    )


def _text(result: object) -> str:
    return json.dumps(result.model_dump() if hasattr(result, "model_dump") else result, default=str)


# --- rule forms ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "rule",
    ["Read(secrets/**)", "Read(./secrets/**)", "Read(secrets)", "Read(secrets/)", "Read(src/../secrets/**)"],
)
async def test_relative_forms_deny_the_file_everywhere(tree: Path, rule: str) -> None:
    policy = _policy(tree, deny=[rule])
    read = await execute(policy, "read_file", {"path": "secrets/k"})
    assert read.error is not None and read.error.type == "permission_denied"
    shell = await execute(policy, "bash", {"command": "cat secrets/k"})
    assert shell.error is not None and CANARY not in _text(shell)
    found = await execute(policy, "grep", {"pattern": "password"})
    assert found.ok and CANARY not in _text(found)
    assert [m["path"] for m in found.data["matches"]] == ["src/app.py"]


async def test_absolute_forms_match_absolute_paths(tree: Path, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "token").write_text(CANARY)
    (shared / "readme").write_text("fine")
    for rule in (f"Read(/{shared}/token)", f"Read({shared}/token)"):  # //abs and /abs
        assert parse_rule(rule).pattern is not None
        policy = _policy(tree, deny=[rule], dirs=[str(shared)])
        denied = await execute(policy, "read_file", {"path": str(shared / "token")})
        assert denied.error is not None and CANARY not in _text(denied), rule
        allowed = await execute(policy, "read_file", {"path": str(shared / "readme")})
        assert allowed.ok and allowed.data["content"] == "fine"


async def test_home_form_matches_under_home(tree: Path, tmp_path: Path) -> None:
    notes = tmp_path / "home" / "notes"
    notes.mkdir(parents=True)
    (notes / "private.md").write_text(CANARY)
    (notes / "public.md").write_text("hello")
    policy = _policy(tree, deny=["Read(~/notes/private.md)"], dirs=["~/notes"])
    denied = await execute(policy, "read_file", {"path": str(notes / "private.md")})
    assert denied.error is not None and CANARY not in _text(denied)
    assert (await execute(policy, "read_file", {"path": str(notes / "public.md")})).ok


def test_an_allow_rule_naming_a_directory_does_not_reach_below(tree: Path) -> None:
    policy = _policy(tree, allow=["Edit(src)"])
    assert authorize(policy, "write_file", {"path": "src/x.py"}).effect is Effect.DENY
    assert authorize(policy, "write_file", {"path": "src/x.py"}).rule is None


def test_ask_rule_naming_a_directory_covers_below(tree: Path) -> None:
    policy = _policy(tree, ask=["Read(secrets)"])
    d = authorize(policy, "read_file", {"path": "secrets/k"})
    assert d.effect is Effect.ASK and d.rule == "Read(secrets)"


# --- grep and glob hide what the rules hide --------------------------------------------------------


async def test_grep_under_ask_withholds_the_files_and_says_so(tree: Path) -> None:
    policy = _policy(tree, ask=["Read(secrets/**)"])
    found = await execute(policy, "grep", {"pattern": "password"})
    assert found.ok
    assert CANARY not in _text(found)
    assert [m["path"] for m in found.data["matches"]] == ["src/app.py"]
    assert found.data["withheld"] == ["secrets/k"] and found.data["withheld_count"] == 1
    assert "read_file" in found.data["note"]


async def test_grep_approved_for_the_ask_path_searches_it(tree: Path) -> None:
    policy = _policy(tree, ask=["Read(secrets/**)"])
    args = {"pattern": "password", "path": "secrets"}
    decision = authorize(policy, "grep", args)
    assert decision.effect is Effect.ASK
    approved = await run_authorized(policy, "grep", args, decision, Limits())
    assert CANARY in _text(approved)  # the human said yes to exactly this


async def test_grep_never_shows_sensitive_files(tree: Path) -> None:
    found = await execute(_policy(tree), "grep", {"pattern": "password", "path": "."})
    assert found.ok and ENV_CANARY not in _text(found)
    assert {m["path"] for m in found.data["matches"]} == {"src/app.py", "secrets/k"}


@pytest.mark.parametrize("kind", ["deny", "ask"])
async def test_glob_does_not_list_hidden_files(tree: Path, kind: str) -> None:
    policy = _policy(tree, **{kind: ["Read(secrets/**)"]})
    found = await execute(policy, "glob", {"pattern": "**/*"})
    assert found.ok
    assert "src/app.py" in found.data["matches"]
    assert not any(m.startswith("secrets") for m in found.data["matches"])
    assert ("withheld_count" in found.data) is (kind == "ask")


# --- regex availability ----------------------------------------------------------------------------

CATASTROPHIC = "(a|aa)+$"


async def test_catastrophic_regex_is_a_timeout_within_the_limit(tree: Path) -> None:
    (tree / "src" / "slow.txt").write_text("a" * 80 + "b\n")
    # the wait's deadline: the 1 s limit plus room for two busy cores, far from the exponential run
    result = await asyncio.wait_for(
        execute(_policy(tree), "grep", {"pattern": CATASTROPHIC}, limits=Limits(timeout_s=1)), 4.0
    )
    assert result.error is not None and result.error.type == "timeout", result
    assert "1 s" in result.error.message


async def test_event_loop_is_served_while_a_regex_runs(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tree / "src" / "slow.txt").write_text("a" * 80 + "b\n")
    matching = threading.Event()
    original = search._Deadline.search

    def spy(self: search._Deadline, rx: Any, text: str) -> bool:
        if text.startswith("aaaa"):
            matching.set()  # the catastrophic line is being matched from now on
        return original(self, rx, text)

    monkeypatch.setattr(search._Deadline, "search", spy)
    policy = _policy(tree)
    grep = asyncio.create_task(execute(policy, "grep", {"pattern": CATASTROPHIC}, limits=Limits(timeout_s=3)))
    assert await asyncio.to_thread(matching.wait, 5)
    read = await asyncio.wait_for(execute(policy, "read_file", {"path": "src/app.py"}), 2.5)
    assert read.ok and "read_env" in read.data["content"]
    assert not grep.done()  # served while the regex was still running
    assert (await grep).error is not None


async def test_nested_quantifier_that_re_would_hang_on_finishes(tree: Path) -> None:
    (tree / "src" / "slow.txt").write_text("a" * 40 + "b\n")
    result = await execute(_policy(tree), "grep", {"pattern": "(a+)+$"}, limits=Limits(timeout_s=5))
    assert result.ok and result.data["matches"] == []


async def test_invalid_regex_is_invalid_input(tree: Path) -> None:
    result = await execute(_policy(tree), "grep", {"pattern": "("})
    assert result.error is not None and result.error.type == "invalid_input"
