"""Shell analysis: which commands bash would run, and what cannot be proven safe."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jidocode.shared.policy import analyze


def argvs(command: str) -> list[tuple[str, ...]]:
    a = analyze(command)
    assert not a.unprovable, a.unprovable
    return [c.argv for c in a.commands]


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("git status", [("git", "status")]),
        ("a; b && c || d | e", [("a",), ("b",), ("c",), ("d",), ("e",)]),
        ("a\nb", [("a",), ("b",)]),
        ("echo $(id)", [("id",), ("echo", "$(id)")]),
        ("echo `whoami`", [("whoami",), ("echo", "`whoami`")]),
        ("diff <(ls a) <(ls b)", [("ls", "a"), ("ls", "b"), ("diff", "<(ls a)", "<(ls b)")]),
        ("if true; then rm x; fi", [("true",), ("rm", "x")]),
        ("for f in a b; do cat f; done", [("cat", "f")]),
        ("(cd sub && make)", [("cd", "sub"), ("make",)]),
        ("{ ls; }", [("ls",)]),
        ("ls &", [("ls",)]),
        ("! grep x y", [("grep", "x", "y")]),
    ],
)
def test_commands_found(command: str, expected: list[tuple[str, ...]]) -> None:
    assert argvs(command) == expected


@pytest.mark.parametrize(
    ("command", "inner"),
    [
        ("timeout 5 rm x", ("rm", "x")),
        ("timeout -s KILL 5 rm x", ("rm", "x")),
        ("nice -n 10 rm x", ("rm", "x")),
        ("nohup rm x", ("rm", "x")),
        ("env rm x", ("rm", "x")),
        ("env -i rm x", ("rm", "x")),
        ("xargs rm", ("rm",)),
        ("xargs -n 1 -I {} rm {}", ("rm", "{}")),
        ("sh -c 'rm x'", ("rm", "x")),
        ("bash -ec 'rm x'", ("rm", "x")),
        ("stdbuf -o L rm x", ("rm", "x")),
        ("command rm x", ("rm", "x")),
        ("exec rm x", ("rm", "x")),
    ],
)
def test_wrappers_unwrapped(command: str, inner: tuple[str, ...]) -> None:
    assert inner in argvs(command)


def test_sudo_keeps_both() -> None:
    found = argvs("sudo -u bob rm x")
    assert ("sudo", "-u", "bob", "rm", "x") in found and ("rm", "x") in found


def test_xargs_marks_open_args() -> None:
    (cmd,) = [c for c in analyze("xargs rm").commands if c.argv[0] == "rm"]
    assert cmd.open_args


def test_quoting_keeps_one_word() -> None:
    assert argvs("echo 'a;b' \"c && d\" e\\;f") == [("echo", "a;b", "c && d", "e;f")]


@pytest.mark.parametrize(
    "command",
    [
        "eval ls",
        "source x.sh",
        ". x.sh",
        "f() { ls; }; f",
        "cat <<EOF\n$HOME\nEOF",
        "echo $((1+2))",
        "((x=1))",
        "case x in a) ls;; esac",
        "time ls",
        "$CMD arg",
        "$(echo rm) x",
        "{rm,-rf,x}",
        "echo {a,b}",
        "env -S 'rm x'",
        'sh -c "$X"',
        "alias ls=rm",
        "export PATH=/tmp",
        "hash -p /tmp/evil git",
        "ls |",
        "echo $[1+1]",
        "echo a\u202eb",
        "$'\\x72m' x",
        "sudo -s",
    ],
)
def test_unprovable(command: str) -> None:
    assert analyze(command).unprovable, command


@pytest.mark.parametrize(
    ("command", "fragment"),
    [
        ("git -c core.fsmonitor=evil status", "git option -c"),
        ("git -ccore.pager=evil log", "git option -c"),
        ("git --git-dir=x status", "--git-dir"),
        ("git clone --upload-pack=evil x", "--upload-pack"),
        ("git rebase -x 'make' main", "runs a command"),
        ("git config core.pager evil", "git config"),
        ("git submodule foreach rm", "foreach"),
        ("find . -exec rm {} ;", "find -exec"),
        ("find . -delete", "find -delete"),
        ("rsync -e evil a b", "rsync option -e"),
        ("tar --to-command=evil -xf a.tar", "--to-command"),
        ("ssh -oProxyCommand=evil host", "ssh option -o"),
        ("awk 'BEGIN{system(\"id\")}'", "awk program"),
        ("sed 's/a/b/e' f", "sed script"),
        ("make SHELL=/tmp/evil", "make variable SHELL"),
        ("LD_PRELOAD=/tmp/x.so ls", "LD_PRELOAD"),
        ("GIT_SSH_COMMAND=evil git fetch", "GIT_SSH_COMMAND"),
        ("env PAGER=evil git log", "PAGER"),
        ("PATH=/tmp ls", "PATH"),
        ("git log $REF", "computed at run time"),
        ("find * -name x", "expanded from file names"),
        ("npm --script-shell=evil test", "npm option --script-shell"),
        ("sort --compress-program=evil x", "sort option"),
        ("printf -v 'a[$(id)]' x", "printf -v"),
    ],
)
def test_flags(command: str, fragment: str) -> None:
    flags = [f for c in analyze(command).commands for f in c.flags]
    assert any(fragment in f for f in flags), (command, flags)


def test_safe_env_prefix_not_flagged() -> None:
    (cmd,) = analyze("LANG=C NO_COLOR=1 ls").commands
    assert cmd.flags == () and cmd.assignments == ("LANG=C", "NO_COLOR=1")


def test_redirects() -> None:
    a = analyze("echo x > out.txt 2>&1 < in.txt 2>/dev/null")
    assert [(r.op, r.target, r.write) for r in a.redirects] == [
        (">", "out.txt", True),
        ("<", "in.txt", False),
    ]


def test_redirect_after_cd_is_marked() -> None:
    a = analyze("cd .git/hooks && echo x > pre-commit")
    assert a.redirects[0].after_cd


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab ;|&$()`'\"\\<>{}*\n=-")), max_size=30))
def test_analyze_never_raises(command: str) -> None:
    result = analyze(command)
    assert result.commands or result.unprovable or not command.strip() or result.redirects == ()


_word = st.from_regex(r"[a-z][a-z0-9]{0,5}", fullmatch=True)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.lists(_word, min_size=1, max_size=3), min_size=1, max_size=5),
    st.sampled_from([";", "&&", "||", "|", "\n"]),
)
def test_every_chained_command_is_found(commands: list[list[str]], sep: str) -> None:
    text = f" {sep} ".join(" ".join(c) for c in commands)
    a = analyze(text)
    if a.unprovable:  # a generated word may be a reserved word (if, do …) or a builtin we refuse
        return
    found = [c.argv for c in a.commands]
    for c in commands:
        assert tuple(c) in found


# --- words, parameters, builtins and the working directory -----------------------------------------


def test_words_say_what_bash_expands() -> None:
    (cmd,) = analyze("cat $x '*.py' *.py ~/a '~/b' a=~/c --o=~/d").commands
    kinds = [(w.dynamic, w.glob, w.tilde) for w in cmd.words[1:]]
    assert kinds == [
        (True, False, False),
        (False, False, False),
        (False, True, False),
        (False, False, True),
        (False, False, False),
        (False, False, True),
        (False, False, False),
    ]


@pytest.mark.parametrize(
    "word",
    ["${x}", "${#x}", "${x:-a b}", "${x%.py}", "${x//a/b}", "${x^^}", "${a[0]}", "${a[@]}", "${x:1:2}", "$1"],
)
def test_plain_parameter_expansions_are_followed(word: str) -> None:
    assert not analyze(f"echo {word}").unprovable


@pytest.mark.parametrize(
    "word",
    ["${x:-$(id)}", "${x@P}", "${!x}", "${a[i]}", "${x:y}", "${x:-`id`}", "${x/a/$(id)}", "${x:-${y}}"],
)
def test_parameter_expansions_that_can_run_code_are_unprovable(word: str) -> None:
    assert analyze(f"echo {word}").unprovable, word


@pytest.mark.parametrize(
    ("command", "neutral"),
    [
        ("true", True),
        ("cd src", True),
        ("wait", True),
        ("wait -n %1", True),
        ("wait -p v", False),
        ("exit 1", True),
        ("exit $x", False),
        ("set -euo pipefail", True),
        ("set -- a", False),
        ("pwd -P", True),
        ("command -v git", False),
        ("echo hi", False),
        ("read -r x y", True),
        ("read -a x", False),
        ("read 'a[$(id)]'", False),
        ("test -f x", True),
        ("[ -d x ]", True),
        ("test -v x", False),
    ],
)
def test_only_inert_builtins_need_no_rule(command: str, neutral: bool) -> None:
    (cmd,) = analyze(command).commands
    assert cmd.neutral is neutral, command


@pytest.mark.parametrize(
    ("command", "cwd"),
    [
        ("ls", (".",)),
        ("cd src && ls", (".", "src")),
        ("cd src; cd ../lib; ls", (".", "src", "../lib", "lib")),
        ("(cd src) && ls", (".",)),
        ("cd src | true; ls", (".",)),
        ("echo $(cd src); ls", (".",)),
        ('cd "$d"; ls', None),
        ("cd; ls", None),
        ("cd -; ls", None),
        ("popd; ls", None),
        ("for i in 1; do cd src; done; ls", None),
    ],
)
def test_the_working_directory_is_followed(command: str, cwd: tuple[str, ...] | None) -> None:
    last = analyze(command).commands[-1]
    assert last.argv == ("ls",)
    assert last.cwd == cwd


def test_a_loop_with_cd_loses_the_directory_from_its_start() -> None:
    a = analyze("for i in 1 2; do echo x > f; cd .jido; done")
    assert a.redirects[0].cwd is None


def test_sh_c_inherits_the_directory() -> None:
    a = analyze("cd .git/hooks && sh -c 'echo x > pre-commit'")
    assert a.redirects[0].cwd == (".", ".git/hooks")


def test_shells_reading_stdin_are_unprovable() -> None:
    assert analyze("echo id | sh").unprovable
    assert analyze("bash script.sh").unprovable
    assert not analyze("bash -c 'ls'").unprovable


def test_computed_redirect_targets_are_recorded_as_dynamic() -> None:
    a = analyze("ls > $OUT; cat < *.txt")
    assert not a.unprovable
    assert [(r.op, r.target, r.dynamic) for r in a.redirects] == [(">", "$OUT", True), ("<", "*.txt", True)]
