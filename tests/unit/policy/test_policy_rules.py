"""Permission rule parsing and matching."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jidocode.shared.policy import InvalidRule, parse_rule, parse_rules


@pytest.mark.parametrize(
    ("raw", "kind", "tools", "words", "prefix"),
    [
        ("Bash(git:*)", "bash", {"bash"}, ("git",), True),
        ("Bash(npm test)", "bash", {"bash"}, ("npm", "test"), False),
        ("Bash(rm -rf:*)", "bash", {"bash"}, ("rm", "-rf"), True),
        ("Bash", "bash", {"bash"}, (), False),
        ("Read", "path", {"read_file", "list_dir", "glob", "grep"}, (), False),
        ("Edit(src/**)", "path", {"write_file", "edit_file"}, (), False),
        ("Read(~/.ssh/**)", "path", {"read_file", "list_dir", "glob", "grep"}, (), False),
        ("Grep", "path", {"grep"}, (), False),
    ],
)
def test_parse_valid(raw: str, kind: str, tools: set[str], words: tuple[str, ...], prefix: bool) -> None:
    rule = parse_rule(raw)
    assert rule.kind == kind
    assert rule.tools == frozenset(tools)
    assert rule.words == words
    assert rule.prefix is prefix


def test_mcp_and_asset_names() -> None:
    assert parse_rule("mcp__github__create_issue").covers_tool("mcp__github__create_issue")
    server = parse_rule("mcp__github")
    assert server.covers_tool("mcp__github__anything")
    assert not server.covers_tool("mcp__githubx__y")
    assert parse_rule("run_workflow").covers_tool("run_workflow")


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ("Bash(git:*", "unbalanced"),
        ("", "empty rule"),
        ("Bash()", "empty pattern"),
        ("Bash(:*)", "no command"),
        ("Bash(git:*:*)", "':*' may only end"),
        ("Bash(git * main)", "'*' is only allowed"),
        ("Bash(git; rm)", "plain words"),
        ("Bash(echo $HOME)", "plain words"),
        ("mcp__x(foo)", "takes no pattern"),
        ("1Bash", "expected Tool"),
        ("Read(~root/x)", "only ~/"),
        ("Read([ab])", "only *, ** and ?"),
        ("Bash((x))", "parentheses inside"),
        ("foo__bar", "only MCP tool names"),
        (42, "is a string"),
    ],
)
def test_parse_invalid(raw: object, problem: str) -> None:
    with pytest.raises(
        InvalidRule, match=problem.replace("*", r"\*").replace("(", r"\(").replace("?", r"\?")
    ):
        parse_rule(raw)


def test_parse_rules_names_every_bad_entry() -> None:
    with pytest.raises(InvalidRule) as exc:
        parse_rules(["Read", "Bash(", "Bash()"], what="permissions.allow")
    assert "Bash(" in str(exc.value) and "Bash()" in str(exc.value)


def test_bash_matching_exact_prefix_and_loose() -> None:
    exact = parse_rule("Bash(npm test)")
    assert exact.matches_command(("npm", "test"))
    assert not exact.matches_command(("npm", "test", "--watch"))
    prefix = parse_rule("Bash(git:*)")
    assert prefix.matches_command(("git",))
    assert prefix.matches_command(("git", "status"))
    assert not prefix.matches_command(("gitk",))
    assert not prefix.matches_command(("./git", "status"))
    assert prefix.matches_command(("/usr/bin/git", "status"), loose=True)


def test_path_matching() -> None:
    root, home = "/proj", "/home/u"
    src = parse_rule("Edit(src/**)")
    assert src.matches_path("/proj/src/a/b.py", root=root, home=home)
    assert src.matches_path("/proj/src", root=root, home=home)
    assert not src.matches_path("/proj/srcx/a.py", root=root, home=home)
    ssh = parse_rule("Read(~/.ssh/**)")
    assert ssh.matches_path("/home/u/.ssh/id_rsa", root=root, home=home)
    one = parse_rule("Read(*.md)")
    assert one.matches_path("/proj/README.md", root=root, home=home)
    assert not one.matches_path("/proj/docs/x.md", root=root, home=home)


@given(st.text(max_size=60))
def test_parser_never_crashes(raw: str) -> None:
    try:
        rule = parse_rule(raw)
    except InvalidRule:
        return
    assert rule.raw == raw.strip()


@given(st.lists(st.from_regex(r"[a-z][a-z0-9-]{0,8}", fullmatch=True), min_size=1, max_size=4))
def test_prefix_rule_matches_its_own_words_and_extensions(words: list[str]) -> None:
    rule = parse_rule(f"Bash({' '.join(words)}:*)")
    assert rule.matches_command(tuple(words))
    assert rule.matches_command((*words, "--more"))
    assert not rule.matches_command((*words[:-1], words[-1] + "x"))


ROOT, HOME = "/r/proj", "/h/user"


@pytest.mark.parametrize(
    ("pattern", "anchored"),
    [
        ("src/**", "/r/proj/src/**"),
        ("./src/**", "/r/proj/src/**"),
        ("./", "/r/proj/"),
        ("src/../secrets/", "/r/proj/secrets/"),
        ("/etc/hosts", "/etc/hosts"),
        ("//etc/hosts", "/etc/hosts"),
        ("///etc//hosts", "/etc/hosts"),
        ("~/.ssh/**", "/h/user/.ssh/**"),
        ("~", "/h/user"),
    ],
)
def test_every_anchor_form(pattern: str, anchored: str) -> None:
    from jidocode.shared.policy.rules import anchor_pattern

    assert anchor_pattern(pattern, ROOT, HOME) == anchored


@pytest.mark.parametrize(
    ("rule", "path", "plain", "below"),
    [
        ("Read(./secrets/**)", "/r/proj/secrets/k", True, True),
        ("Read(//etc/hosts)", "/etc/hosts", True, True),
        ("Read(~/x)", "/h/user/x", True, True),
        ("Read(secrets)", "/r/proj/secrets/k", False, True),
        ("Read(secrets)", "/r/proj/secrets", True, True),
        ("Read(secrets)", "/r/proj/secretsx/k", False, False),
        ("Read(*.key)", "/r/proj/a.key", True, True),
        ("Read(*.key)", "/r/proj/sub/a.key", False, False),
    ],
)
def test_rule_forms_match_what_they_say(rule: str, path: str, plain: bool, below: bool) -> None:
    r = parse_rule(rule)
    assert r.matches_path(path, root=ROOT, home=HOME) is plain
    assert r.matches_path(path, root=ROOT, home=HOME, below=True) is below


@pytest.mark.parametrize(
    ("rule", "directory", "may"),
    [
        ("Read(secrets/**)", "/r/proj", True),
        ("Read(secrets/**)", "/r/proj/secrets/sub", True),
        ("Read(secrets/**)", "/r/proj/src", False),
        ("Read(**/*.pem)", "/r/proj/src", True),
        ("Read(//etc/**)", "/r/proj", False),
        ("Read(//etc/**)", "/", True),
    ],
)
def test_may_match_under(rule: str, directory: str, may: bool) -> None:
    assert parse_rule(rule).may_match_under(directory, root=ROOT, home=HOME) is may
