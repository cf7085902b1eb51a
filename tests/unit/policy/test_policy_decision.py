"""Decisions: deny beats ask beats allow, the default, tool filtering."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jidocode.shared.policy import Effect, InvalidRule, Policy, authorize, filter_tools


@pytest.fixture
def root(tmp_path: Path) -> str:
    (tmp_path / "src").mkdir()
    return str(tmp_path)


def test_precedence_deny_ask_allow(root: str) -> None:
    p = Policy.build(root, allow=["Bash(git:*)"], ask=["Bash(git push:*)"], deny=["Bash(git push --force:*)"])
    assert authorize(p, "bash", {"command": "git status"}).effect is Effect.ALLOW
    assert authorize(p, "bash", {"command": "git push"}).effect is Effect.ASK
    assert authorize(p, "bash", {"command": "git push --force"}).effect is Effect.DENY


def test_default_deny_and_ask(root: str) -> None:
    assert authorize(Policy.build(root), "bash", {"command": "ls"}).effect is Effect.DENY
    assert authorize(Policy.build(root, default="ask"), "bash", {"command": "ls"}).effect is Effect.ASK
    with pytest.raises(InvalidRule):
        Policy.build(root, default="allow")


def test_path_rules(root: str) -> None:
    p = Policy.build(root, allow=["Read", "Edit(src/**)"], deny=["Read(secret/**)"])
    assert authorize(p, "read_file", {"path": "a.txt"}).effect is Effect.ALLOW
    assert authorize(p, "read_file", {"path": "secret/k"}).effect is Effect.DENY
    assert authorize(p, "write_file", {"path": "src/x.py"}).effect is Effect.ALLOW
    assert authorize(p, "write_file", {"path": "x.py"}).effect is Effect.DENY
    d = authorize(p, "list_dir", {})
    assert d.effect is Effect.ALLOW and d.path == str(Path(root).resolve())


def test_explicit_allow_lifts_sensitive_default(root: str) -> None:
    assert authorize(Policy.build(root, allow=["Read"]), "read_file", {"path": ".env"}).effect is Effect.DENY
    lifted = Policy.build(root, allow=["Read", "Read(.env)"])
    assert authorize(lifted, "read_file", {"path": ".env"}).effect is Effect.ALLOW


def test_named_tools(root: str) -> None:
    p = Policy.build(root, allow=["mcp__gh"], deny=["mcp__gh__delete_repo"])
    assert authorize(p, "mcp__gh__list", {}).effect is Effect.ALLOW
    assert authorize(p, "mcp__gh__delete_repo", {}).effect is Effect.DENY
    assert authorize(p, "run_workflow", {}).effect is Effect.DENY


def test_filter_tools(root: str) -> None:
    specs = [{"name": n} for n in ("read_file", "write_file", "bash", "grep", "mcp__x__y")]
    p = Policy.build(root, allow=["Read"], deny=["Grep"])
    assert [s["name"] for s in filter_tools(p, specs)] == ["read_file"]
    everything = Policy.build(root, default="ask", deny=["Bash"])
    assert "bash" not in [s["name"] for s in filter_tools(everything, specs)]


def test_summary(root: str) -> None:
    s = Policy.build(root, allow=["Read"]).summary()
    assert s["allow"] == ["Read"] and s["default"] == "deny"


#: Hypothesis tests cannot use function-scoped fixtures; the root need not exist.
_HYP_ROOT = "/nonexistent/jido-hyp-root"

_prog = st.sampled_from(["ls", "cat", "echo", "git", "make", "npm", "rm", "curl"])
_sep = st.sampled_from(["; ", " && ", " || ", " | ", "\n", " & "])


@settings(max_examples=120, deadline=None)
@given(st.lists(st.tuples(_prog, st.sampled_from(["", " x", " -v", " a b"])), min_size=1, max_size=5), _sep)
def test_a_denied_program_anywhere_denies_the_whole(parts: list[tuple[str, str]], sep: str) -> None:
    p = Policy.build(
        _HYP_ROOT, allow=["Bash(ls:*)", "Bash(cat:*)", "Bash(echo:*)", "Bash(git:*)"], deny=["Bash(rm:*)"]
    )
    command = sep.join(prog + arg for prog, arg in parts)
    effect = authorize(p, "bash", {"command": command}).effect
    programs = {prog for prog, _ in parts}
    if "rm" in programs:
        assert effect is Effect.DENY
    elif programs <= {"ls", "cat", "echo", "git"}:
        assert effect is Effect.ALLOW
    else:
        assert effect is Effect.DENY  # make/npm/curl: no rule, default deny


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_never_allowed_without_a_rule(command: str) -> None:
    assert (
        authorize(Policy.build(_HYP_ROOT), "bash", {"command": command}).effect is not Effect.ALLOW
        or command.strip()
        in (
            "",
            ":",
            "true",
            "false",
            "pwd",
            "cd",
            "exit",
            "wait",
        )
        or _only_neutral(command)
    )


def _only_neutral(command: str) -> bool:
    from jidocode.shared.policy import analyze

    a = analyze(command)
    return not a.unprovable and all(c.neutral for c in a.commands)


_quoted_text = st.text(
    alphabet=st.characters(min_codepoint=32, max_codepoint=126, blacklist_characters="'"), max_size=40
)


@settings(max_examples=300, deadline=None)
@given(_quoted_text)
def test_single_quoted_text_never_splits_the_command(text: str) -> None:
    p = Policy.build(_HYP_ROOT, allow=["Bash(echo:*)"])
    decision = authorize(p, "bash", {"command": f"echo '{text}'"})
    if decision.details.get("sandbox") in ("sensitive", "protected"):
        # a quoted name the sandbox guards (``.jks``) is asked about, as one word: still not split
        assert decision.effect is Effect.ASK and f"file {text!r}" in decision.reason, decision.reason
    else:
        assert decision.effect is Effect.ALLOW, (text, decision.reason)
