"""The crude split used for deny rules when a string would otherwise be asked."""

from __future__ import annotations

from pathlib import Path

import pytest

from jidocode.shared.policy import Effect, Policy
from jidocode.shared.policy.fallback import fallback_decision, segments


def test_segments_split_on_every_separator_and_strip_quotes() -> None:
    text = "a 'b';c&&d||e|f&g\nh $(i j) `k` <(l) { m; } (n) t\"o\"uch x"
    assert list(segments(text)) == [
        ("a", "b"),
        ("c",),
        ("d",),
        ("e",),
        ("f",),
        ("g",),
        ("h",),
        ("i", "j"),
        ("k",),
        ("l",),
        ("m",),
        ("n",),
        ("touch", "x"),
    ]


def test_line_continuations_are_joined() -> None:
    assert list(segments("tou\\\nch x")) == [("touch", "x")]


def test_braces_are_expanded() -> None:
    assert list(segments("t{o,}uch x; {touch,y} z; f{1..3}")) == [
        ("touch", "tuch", "x"),
        ("touch", "y", "z"),
        ("f1", "f2", "f3"),
    ]


@pytest.fixture
def policy(tmp_path: Path) -> Policy:
    (tmp_path / ".git").mkdir()
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "k").write_text("x")
    return Policy.build(str(tmp_path), allow=["Bash"], deny=["Bash(rm -rf:*)", "Read(secrets/**)"])


@pytest.mark.parametrize(
    "command",
    [
        "[[ 1 ]]; rm -rf /",
        "x; sudo rm -rf /",
        "x; /bin/rm -rf /",
        "x; 'rm' '-rf' /",
        "x; echo $(rm -rf /)",
        "[[ 1 ]] && cat secrets/k",
        "[[ 1 ]] && cat <secrets/k",
        "[[ 1 ]]; echo x >.git/config",
        "[[ 1 ]]; cp x .git/hooks/pre-commit",
        "[[ 1 ]]; {rm,-rf} /",
        "[[ 1 ]]; cat {secrets,x}/k",
        "[[ 1 ]]; cat sec{r,}ets/k",
        "[[ 1 ]]; cat secr*/k",
        "[[ 1 ]]; echo x > .git/{config,y}",
    ],
)
def test_denied(policy: Policy, command: str) -> None:
    d = fallback_decision(policy, command)
    assert d is not None and d.effect is Effect.DENY, command


@pytest.mark.parametrize("command", ["[[ 1 ]]; rm -r x", "[[ 1 ]]; cat src/x", "[[ 1 ]]; echo x > out"])
def test_not_denied(policy: Policy, command: str) -> None:
    assert fallback_decision(policy, command) is None
