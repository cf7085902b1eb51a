"""The word-level policy, hardened (issue 11, item 2): each attack of the report as a pure decision.

Every case names the rules it runs under, the command, and the outcomes that
are safe. The project is a real directory (globs, ``cd`` targets and
symlinks are resolved against it); ``$HOME`` is a directory of the test, so
``~`` forms point somewhere known. What these decisions do to a running
system is tested through the bus in ``test_policy_bus.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jidocode.shared.policy import Effect, Policy, authorize
from jidocode.shared.policy.expand import MAX_GLOB_ENTRIES
from tests.helpers import count_scandir

SAFE = (Effect.ASK, Effect.DENY)
DENY = (Effect.DENY,)
ALLOW = (Effect.ALLOW,)

# (id, allow rules, deny rules, command, outcomes)
CASES: list[tuple[str, list[str], list[str], str, tuple[Effect, ...]]] = [
    # --- builtins are not harmless by default --------------------------------------------------
    ("wait-p-subscript", ["Read"], [], "true & wait -n -p 'a[$(id>x)]'", SAFE),
    ("wait-p-under-bash-rules", ["Bash(true:*)", "Bash(wait:*)"], [], "wait -p 'a[$(touch x)]'", SAFE),
    ("read-a", ["Bash(read:*)"], [], "read -a 'a[$(touch x)]' <<< 1", SAFE),
    ("printf-v", ["Bash(printf:*)"], [], "printf -v 'a[$(touch x)]' 1", SAFE),
    ("getopts", ["Bash(getopts:*)"], [], "getopts a 'v[$(touch x)]'", SAFE),
    ("declare", ["Bash(declare:*)"], [], "declare -A m; m[$(touch x)]=1", SAFE),
    ("export", ["Bash(export:*)"], [], "export PATH=.", SAFE),
    ("eval", ["Bash(eval:*)"], [], "eval touch x", SAFE),
    ("source", ["Bash(source:*)"], [], "source ./x.sh", SAFE),
    ("dot", ["Bash(.:*)"], [], ". ./x.sh", SAFE),
    ("trap", ["Read"], [], "trap 'touch x' EXIT", SAFE),
    ("exec-bare", ["Read"], [], "exec 3>x", SAFE),
    ("command-v-needs-rule", ["Read"], [], "command -v git", SAFE),
    ("builtin-wrapper", ["Read"], [], "builtin wait -p v", SAFE),
    ("enable-f", ["Bash(enable:*)"], [], "enable -f ./evil.so x", SAFE),
    ("exit-subscript", ["Read"], [], "exit 'a[$(touch x)]'", SAFE),
    # --- ${…}, arithmetic and subscripts ----------------------------------------------------------
    ("param-default-subst", ["Bash(echo:*)"], [], "echo ${x:-$(touch x)}", SAFE),
    ("param-default-quoted", ["Bash(echo:*)"], [], 'echo "${x:-$(touch x)}"', SAFE),
    ("param-default-backtick", ["Bash(echo:*)"], [], "echo ${x:=`touch x`}", SAFE),
    ("param-prompt-expansion", ["Bash(echo:*)"], [], "x=$'\\x24(touch x)'; echo ${x@P}", SAFE),
    ("param-array-subscript", ["Bash(ls:*)"], [], "x='a[$(touch x)]'; ls ${y[x]}", SAFE),
    ("param-indirection", ["Bash(echo:*)"], [], "x='a[$(touch x)]'; echo ${!x}", SAFE),
    ("param-substring-offset", ["Bash(echo:*)"], [], "echo ${y:x}", SAFE),
    ("param-nested", ["Bash(echo:*)"], [], "echo ${x:-${y:-$(touch x)}}", SAFE),
    ("arith-expansion", ["Bash(echo:*)"], [], "echo $(( a[$(touch x)] ))", SAFE),
    ("arith-command", ["Bash(echo:*)"], [], "(( a[$(touch x)] )); echo", SAFE),
    ("arith-let", ["Bash(echo:*)", "Bash(let:*)"], [], "let 'a[$(touch x)]=1'", SAFE),
    ("test-v", ["Bash(test:*)"], [], "test -v 'a[$(touch x)]'", SAFE),
    ("dbl-bracket-arith", ["Bash(echo:*)"], [], "[[ a[$(touch x)] -eq 1 ]]", SAFE),
    ("assignment-subscript-prefix", ["Bash(ls:*)"], [], "a[$(touch x)]=1 ls", SAFE),
    # --- ~ forms in redirect targets and arguments ------------------------------------------------
    ("tilde-bashrc", ["Bash(echo:*)"], [], "echo x >> ~/.bashrc", SAFE),
    ("tilde-user", ["Bash(echo:*)"], [], "echo x >> ~root/.bashrc", SAFE),
    ("tilde-plus-up", ["Bash(echo:*)"], [], "echo x >> ~+/../escape", SAFE),
    ("tilde-minus", ["Bash(echo:*)"], [], "echo x > ~-/y", SAFE),
    ("tilde-arg-cp", ["Bash(cp:*)"], [], "cp x ~/.profile", SAFE),
    ("tilde-after-equals", ["Bash(dd:*)"], [], "dd if=x of=~/.profile", SAFE),
    # --- cd sequences and loops ---------------------------------------------------------------------
    ("loop-cd-before-redirect", ["Bash(echo:*)"], [], "for i in 1 2; do echo '{}' > settings.json; cd .jido; done", SAFE),
    ("while-cd", ["Bash(echo:*)", "Bash(true:*)"], [], "while true; do echo x > config; cd .git; done", SAFE),
    ("cd-hooks-cp", ["Bash(cp:*)"], [], "cd .git/hooks && cp ../../x pre-commit", DENY),
    ("cd-then-redirect", ["Bash(echo:*)"], [], "cd .git/hooks; echo x > pre-push", DENY),
    ("cd-dynamic", ["Bash(echo:*)", "Bash(git:*)"], [], 'cd "$D" && git init', SAFE),
    ("cd-outside", ["Bash(git:*)"], [], "cd /tmp && git init", SAFE),
    ("cd-up", ["Bash(ls:*)"], [], "cd .. && ls", SAFE),
    ("cd-home", ["Bash(echo:*)"], [], "cd && echo x > .bashrc", SAFE),
    ("pushd", ["Bash(echo:*)"], [], "pushd .git/hooks && echo x > post-merge", DENY),
    # --- recursive copies and options that take a path ------------------------------------------------
    ("cp-r-contents-into-root", ["Bash(cp:*)"], [], "cp -r payload/. .", DENY),
    ("cp-glob-into-root", ["Bash(cp:*)"], [], "cp -r payload/* .", DENY),
    ("rsync-contents-into-root", ["Bash(rsync:*)"], [], "rsync -a payload/ .", DENY),
    ("cp-r-into-new-config-dir", ["Bash(cp:*)"], [], "cp -r payload .jido_code", DENY),
    ("git-log-output", ["Bash(git:*)"], [], "git log --output=/tmp/outside/x", SAFE),
    ("git-log-output-separate", ["Bash(git:*)"], [], "git diff --output /tmp/outside/x", SAFE),
    ("git-archive-output", ["Bash(git:*)"], [], "git archive --output /tmp/outside/x HEAD", SAFE),
    ("git-archive-o", ["Bash(git:*)"], [], "git archive -o /tmp/outside/x HEAD", SAFE),
    ("git-C-outside", ["Bash(git:*)"], [], "git -C /tmp/outside init", SAFE),
    ("git-init-outside", ["Bash(git:*)"], [], "git init /tmp/outside/repo", SAFE),
    ("git-format-patch-o", ["Bash(git:*)"], [], "git format-patch -o /tmp/outside HEAD~1", SAFE),
    ("sort-o", ["Bash(sort:*)"], [], "sort -o /tmp/outside/x a.txt", SAFE),
    ("sort-o-attached", ["Bash(sort:*)"], [], "sort -o/tmp/outside/x a.txt", SAFE),
    ("sort-output-protected", ["Bash(sort:*)"], [], "sort --output=.git/config a.txt", DENY),
    ("unknown-program-output", ["Bash(pandoc:*)"], [], "pandoc --output=/tmp/outside/x a.md", SAFE),
    ("curl-o", ["Bash(curl:*)"], [], "curl -o .mcp.json https://example.com/x", DENY),
    # --- links created in the same call -----------------------------------------------------------------
    ("ln-then-redirect", ["Bash(ln:*)", "Bash(echo:*)"], [], "ln -s /tmp/outside/x l; echo P > l", SAFE),
    ("ln-relative-escape", ["Bash(ln:*)", "Bash(echo:*)"], [], "ln -s ../../../x l", SAFE),
    ("ln-inside-then-redirect", ["Bash(ln:*)", "Bash(echo:*)"], [], "ln -s src l; echo P > l/x", SAFE),
    ("ln-loop-order", ["Bash(ln:*)", "Bash(echo:*)"], [], "for i in 1 2; do echo P > l; ln -sf src l; done", SAFE),
    ("ln-then-cat", ["Bash(ln:*)", "Bash(cat:*)"], [], "ln -s src/a.py l && cat l", SAFE),
    ("mv-link-into-place", ["Bash(mv:*)", "Bash(echo:*)"], [], "mv old new && echo P >> new", SAFE),
    ("git-checkout-then-write", ["Bash(git:*)", "Bash(echo:*)"], [], "git checkout evil && echo P > notes", SAFE),
    ("tar-extract", ["Bash(tar:*)"], [], "tar xf payload.tar", SAFE),
    ("unzip", ["Bash(unzip:*)"], [], "unzip payload.zip", SAFE),
    ("git-update-index-checkout-index", ["Bash(git:*)"], [],
     "git update-index --add --cacheinfo 100644,0123456789abcdef0123456789abcdef01234567,.jido/settings.json"
     " && git checkout-index -a -f", SAFE),
    ("git-apply", ["Bash(git:*)"], [], "git apply evil.patch", SAFE),
    ("patch", ["Bash(patch:*)"], [], "patch -p1 < evil.patch", SAFE),
    # --- programs that run programs ---------------------------------------------------------------------
    ("git-grep-O", ["Bash(git:*)"], [], "git grep -O'touch x' foo", SAFE),
    ("git-grep-open-files", ["Bash(git:*)"], [], "git grep --open-files-in-pager=touch foo", SAFE),
    ("rg-pre", ["Bash(rg:*)"], [], "rg --pre ./x.sh foo", SAFE),
    ("rg-pre-equals", ["Bash(rg:*)"], [], "rg --pre=./x.sh foo", SAFE),
    ("sed-address-e", ["Bash(sed:*)"], [], "sed -n '1e touch x' a.txt", SAFE),
    ("sed-regex-address-e", ["Bash(sed:*)"], [], "sed '/x/e touch y' a.txt", SAFE),
    ("sed-w-outside", ["Bash(sed:*)"], [], "sed '1w /tmp/outside/x' a.txt", SAFE),
    ("sed-range-W", ["Bash(sed:*)"], [], "sed -n '1,$W out' a.txt", SAFE),
    ("sed-s-flag-e", ["Bash(sed:*)"], [], "sed 's/.*/touch x/e' a.txt", SAFE),
    ("sed-r-read", ["Bash(sed:*)"], [], "sed '1r /etc/passwd' a.txt", SAFE),
    ("sed-expression-e", ["Bash(sed:*)"], [], "sed --expression='2e id' a.txt", SAFE),
    ("sed-in-place-protected", ["Bash(sed:*)"], [], "sed -i s/deny/allow/ .jido/settings.json", DENY),
    ("awk-v-system", ["Bash(awk:*)"], [], "awk -v x=1 'BEGIN{system(\"touch x\")}'", SAFE),
    ("awk-F-pipe", ["Bash(awk:*)"], [], "awk -F: '{print | \"sh\"}' a.txt", SAFE),
    ("awk-print-to-file", ["Bash(awk:*)"], [], "awk '{print > \"/tmp/outside/x\"}' a.txt", SAFE),
    ("awk-getline", ["Bash(awk:*)"], [], "awk 'BEGIN{\"id\" | getline}'", SAFE),
    ("awk-f-file", ["Bash(awk:*)"], [], "awk -f prog.awk a.txt", SAFE),
    ("awk-indirect", ["Bash(gawk:*)"], [], "gawk 'BEGIN{f=\"sys\" \"tem\"; @f(\"id\")}'", SAFE),
    ("sh-reads-stdin", ["Bash"], ["Bash(touch:*)"], "echo 'touch x' | sh", DENY),
    ("bash-heredoc", ["Bash"], ["Bash(touch:*)"], "bash <<EOF\ntouch x\nEOF", DENY),
    ("find-exec-denied", ["Bash"], ["Bash(touch:*)"], "find . -name a -exec touch {} ;", DENY),
    # --- reads ------------------------------------------------------------------------------------------
    ("cat-outside", ["Bash(cat:*)"], [], "cat /tmp/outside/secret.txt", SAFE),
    ("cat-proc-ppid-environ", ["Bash(cat:*)"], [], "cat /proc/$PPID/environ", SAFE),
    ("cat-proc-self", ["Bash(cat:*)"], [], "cat /proc/self/environ", SAFE),
    ("cat-tilde-glob-key", ["Bash(cat:*)"], [], "cat ~/.ss?/id_rs?", SAFE),
    ("cat-glob-env", ["Bash(cat:*)"], [], "cat .en?", SAFE),
    ("cat-glob-star-env", ["Bash(cat:*)"], [], "cat .e*", SAFE),
    ("cat-home-var", ["Bash(cat:*)"], [], 'cat "$HOME/.ssh/id_rsa"', SAFE),
    ("cat-command-subst-path", ["Bash(cat:*)", "Bash(echo:*)"], [], "cat $(echo .env)", SAFE),
    ("head-outside", ["Bash(head:*)"], [], "head -n 5 /etc/shadow", SAFE),
    ("grep-outside", ["Bash(grep:*)"], [], "grep -r root /etc", SAFE),
    ("rg-home", ["Bash(rg:*)"], [], "rg token ~", SAFE),
    ("ls-ssh", ["Bash(ls:*)"], [], "ls ~/.ssh", SAFE),
    ("cat-deny-rule", ["Bash(cat:*)"], ["Read(secrets/**)"], "cat secrets/k", DENY),
    ("cat-deny-rule-dir-form", ["Bash(cat:*)"], ["Read(secrets)"], "cat secrets/k", DENY),
    ("cat-deny-rule-dot-form", ["Bash(cat:*)"], ["Read(./secrets/**)"], "cat secrets/k", DENY),
    ("cat-deny-via-glob", ["Bash(cat:*)"], ["Read(secrets/**)"], "cat secre*/k", DENY),
    ("cat-deny-via-dotdot", ["Bash(cat:*)"], ["Read(secrets/**)"], "cat src/../secrets/k", DENY),
    ("cat-deny-via-cd", ["Bash(cat:*)"], ["Read(secrets/**)"], "cd secrets && cat k", DENY),
    ("redirect-read-deny", ["Bash(cat:*)"], ["Read(secrets/**)"], "cat < secrets/k", DENY),
    ("grep-r-deny", ["Bash(grep:*)"], ["Read(secrets/**)"], "grep -r password .", DENY),
    ("rg-default-dir-deny", ["Bash(rg:*)"], ["Read(secrets/**)"], "rg password", DENY),
    ("tar-create-deny", ["Bash(tar:*)"], ["Read(secrets/**)"], "tar cf out.tar .", DENY),
    ("git-show-rev-path-deny", ["Bash(git:*)"], ["Read(secrets/**)"], "git show HEAD:secrets/k", DENY),
    ("cp-out-of-deny", ["Bash(cp:*)"], ["Read(secrets/**)"], "cp secrets/k src/leak", DENY),
    ("write-edit-deny", ["Bash(echo:*)"], ["Edit(src/**)"], "echo x > src/a.py", DENY),
    ("brace-path-deny", ["Bash(cat:*)"], ["Read(secrets/**)"], "cat sec{r,}ets/k", DENY),
    ("brace-command-deny", ["Bash"], ["Bash(touch:*)"], "t{o,}uch x", DENY),
    ("cd-glob-then-read-deny", ["Bash(cat:*)"], ["Read(secrets/**)"], "cd sec*; cat k", DENY),
    ("computed-path-read-deny", ["Bash(cat:*)"], ["Read(secrets/**)"], 'f=secrets/k; cat "$f"', DENY),
    ("computed-redirect-read-deny", ["Bash(cat:*)"], ["Read(secrets/**)"], "f=secrets/k; cat < $f", DENY),
    ("xargs-reader-deny", ["Bash(echo:*)", "Bash(xargs:*)", "Bash(cat:*)"], ["Read(secrets/**)"], "echo secrets/k | xargs cat", DENY),
    ("xargs-writer-dest", ["Bash(echo:*)", "Bash(xargs:*)", "Bash(cp:*)"], [], "echo ~/.bashrc | xargs cp x", SAFE),
    ("computed-redirect-write", ["Bash(echo:*)"], [], "f=.git/hooks/pre-commit; echo x > $f", SAFE),
    ("ln-dot-then-read-deny", ["Bash(ln:*)", "Bash(cat:*)"], ["Read(secrets/**)"], "ln -s . loop; cat loop/secrets/k", DENY),
    ("ln-denied-dir", ["Bash(ln:*)"], ["Read(secrets/**)"], "ln -s secrets s", DENY),
    ("mv-denied-dir-then-read", ["Bash(mv:*)", "Bash(cat:*)"], ["Read(secrets/**)"], "mv secrets s2 && cat s2/k", DENY),
    ("checkout-then-read-with-deny", ["Bash(git:*)", "Bash(cat:*)"], ["Read(secrets/**)"], "git checkout evil && cat notes", DENY),
    ("less-log-file", ["Bash(less:*)"], [], "less -o /tmp/outside/x src/a.py", SAFE),
    ("uniq-second-operand", ["Bash(uniq:*)"], [], "uniq src/a.py .git/config", DENY),
    ("xxd-second-operand", ["Bash(xxd:*)"], [], "xxd -r src/a.py /tmp/outside/x", SAFE),
    # --- a deny is never demoted to an ask ---------------------------------------------------------------
    ("deny-after-dbl-bracket", ["Bash"], ["Bash(touch:*)"], "[[ 1 ]]; touch X", DENY),
    ("deny-after-case", ["Bash"], ["Bash(touch:*)"], "case x in x) :;; esac; touch X", DENY),
    ("deny-in-subst-after-parse-error", ["Bash"], ["Bash(touch:*)"], "echo $(( 1 )) $(touch X)", DENY),
    ("deny-behind-eval", ["Bash"], ["Bash(touch:*)"], "eval 'touch X'", DENY),
    ("deny-flagged-neighbour", ["Bash"], ["Bash(touch:*)"], "git -c core.pager=cat log; tou'ch' X", DENY),
    ("deny-path-after-parse-error", ["Bash"], ["Read(secrets/**)"], "[[ 1 ]]; cat secrets/k", DENY),
    ("deny-protected-after-parse-error", ["Bash"], [], "[[ 1 ]]; echo x > .git/hooks/pre-commit", DENY),
    # --- controls: allowed work still works ---------------------------------------------------------------
    ("ok-git-status", ["Bash(git:*)"], ["Read(secrets/**)"], "git status", ALLOW),
    ("ok-ls-src", ["Bash(ls:*)"], ["Read(secrets/**)"], "ls src", ALLOW),
    ("ok-echo-redirect", ["Bash(echo:*)", "Edit"], [], "echo hi > out.txt", ALLOW),
    ("ok-grep-src", ["Bash(grep:*)"], ["Read(secrets/**)"], "grep foo src", ALLOW),
    ("ok-grep-r-src", ["Bash(grep:*)"], ["Read(secrets/**)"], "grep -rn foo src", ALLOW),
    ("ok-cat-glob", ["Bash(cat:*)"], [], "cat src/*.py", ALLOW),
    ("ok-echo-params", ["Bash(echo:*)"], [], "echo $HOME ${x:-default} ${#x} ${x%.py} ${a[0]} ${x:0:3}", ALLOW),
    ("ok-cd-inside", ["Bash(echo:*)", "Bash(ls:*)"], [], "cd src && ls && echo hi > out.txt", ALLOW),
    ("ok-subshell-cd", ["Bash(echo:*)"], [], "(cd src) && echo hi > out.txt", ALLOW),
    ("ok-wait-set", ["Bash(sleep:*)"], [], "set -e; sleep 1 & wait", ALLOW),
    ("ok-sed-print", ["Bash(sed:*)"], [], "sed -n '1,5p;/def/{s/def/fn/g;p}' src/a.py", ALLOW),
    ("ok-sed-in-place", ["Bash(sed:*)"], [], "sed -i 's/a/b/' src/a.py", ALLOW),
    ("ok-awk", ["Bash(awk:*)"], [], "awk -F, -v n=2 '{print $n}' src/a.py", ALLOW),
    ("ok-git-log-output-inside", ["Bash(git:*)"], [], "git log --output=log.txt", ALLOW),
    ("ok-cp-r-into-subdir", ["Bash(cp:*)"], [], "cp -r payload/. build/", ALLOW),
    ("ok-sort-o-inside", ["Bash(sort:*)"], [], "sort -o sorted.txt src/a.py", ALLOW),
    ("ok-diff-process-subst", ["Bash(diff:*)", "Bash(ls:*)"], [], "diff <(ls src) <(ls payload)", ALLOW),
    ("ok-quoted-denied-words", ["Bash(echo:*)"], ["Bash(touch:*)"], "echo 'a; touch x'", ALLOW),
    ("ok-quoted-heredoc", ["Bash(cat:*)"], [], "cat > src/new.py <<'EOF'\nprint($x)\nEOF", ALLOW),
    ("ok-sed-in-place-glob", ["Bash(sed:*)"], [], "sed -i 's/a/b/g' src/*.py", ALLOW),
    ("ok-test-bracket", ["Bash(mkdir:*)"], [], "[ -d src ] || mkdir src", ALLOW),
    ("ok-read-loop", ["Bash(echo:*)"], [], "while read -r line; do echo $line; done < src/a.py", ALLOW),
    ("ok-git-stash-pull", ["Bash(git:*)"], ["Read(secrets/**)"], "git stash && git pull --rebase && git stash pop", ALLOW),
    ("ok-git-grep-pathspec", ["Bash(git:*)"], ["Read(secrets/**)"], "git grep -n foo -- src", ALLOW),
    ("ok-commit-message-with-path", ["Bash(git:*)"], [], 'git commit -am "fix /etc/passwd parsing"', ALLOW),
]  # fmt: skip


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    for d in ("src", "secrets", ".git/hooks", ".jido", "payload/.jido", "build"):
        (root / d).mkdir(parents=True)
    (root / "src" / "a.py").write_text("def foo():\n    return 1\n")
    (root / "secrets" / "k").write_text("CANARY")
    (root / ".env").write_text("CANARY")
    (root / "payload" / ".jido" / "settings.json").write_text("{}")
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("CANARY")
    return root


def _policy(root: Path, allow: list[str], deny: list[str], ask: tuple[str, ...] = ()) -> Policy:
    return Policy.build(str(root), allow=allow, deny=deny, ask=list(ask), home=str(root.parent / "home"))


def test_there_are_enough_cases() -> None:
    assert len(CASES) >= 100
    assert len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize(("case", "allow", "deny", "command", "expected"), CASES, ids=[c[0] for c in CASES])
def test_shell_case(
    project: Path, case: str, allow: list[str], deny: list[str], command: str, expected: tuple[Effect, ...]
) -> None:
    decision = authorize(_policy(project, allow, deny), "bash", {"command": command})
    assert decision.effect in expected, f"{case}: {decision.effect.value} ({decision.reason})"


def test_read_ask_rule_covers_bash_reads(project: Path) -> None:
    policy = _policy(project, ["Bash(cat:*)", "Bash(grep:*)"], [], ask=("Read(secrets/**)",))
    for command in ("cat secrets/k", "grep -r password .", "cat secrets/*"):
        d = authorize(policy, "bash", {"command": command})
        assert d.effect is Effect.ASK and d.rule == "Read(secrets/**)", (command, d)
    assert authorize(policy, "bash", {"command": "cat src/a.py"}).effect is Effect.ALLOW


def test_glob_over_many_files_is_asked(project: Path) -> None:
    for i in range(300):
        (project / "src" / f"f{i}.txt").write_text("x")
    policy = _policy(project, ["Bash(cat:*)"], [])
    d = authorize(policy, "bash", {"command": "cat src/*"})
    assert d.effect is Effect.ASK and "more than" in d.reason
    assert authorize(policy, "bash", {"command": "cat src/f1*.txt"}).effect is Effect.ALLOW


def test_symlink_already_there_is_resolved(project: Path, tmp_path: Path) -> None:
    (tmp_path / "outside").mkdir()
    (project / "l").symlink_to(tmp_path / "outside")
    policy = _policy(project, ["Bash(echo:*)", "Bash(cat:*)"], [])
    assert authorize(policy, "bash", {"command": "echo x > l/y"}).effect is Effect.ASK
    assert authorize(policy, "bash", {"command": "cat l/y"}).effect is Effect.ASK


# --- properties ------------------------------------------------------------------------------------

_PREFIXES = st.sampled_from(
    [
        "[[ 1 ]]",
        "case x in x) :;; esac",
        "(( 1 ))",
        "echo $((1+2))",
        "f() { :; }",
        "eval x",
        "x=$(id)",
        "echo 'q;'",
        "{ echo; }",
        "(true)",
        "echo ${x:-$(id)}",
        "if true; then :; fi",
        "for i in 1; do :; done",
        "git -c core.pager=cat log",
        "echo $'\\x41'",
        "time ls",
        "cat <<EOF\n$HOME\nEOF",
        "echo {a,b}",
        "ls",
    ]
)
#: An unbalanced quote: bash refuses the whole string, the parser cannot read it.
_LEADS = st.sampled_from(["", "echo 'unterminated; ", 'echo "x; ', "echo $(( ; "])
_SEPARATORS = st.sampled_from([";", "&&", "||", "|", "&", "\n", " ; ", " && "])
_DENIED = st.sampled_from(
    [
        "touch X",
        "/usr/bin/touch X",
        "'touch' X",
        "t\\ouch X",
        "tou''ch X",
        "$(touch X)",
        "`touch X`",
        "(touch X)",
        "{ touch X; }",
        "sudo touch X",
        "env A=1 touch X",
        "nohup touch X",
        "command touch X",
        "xargs touch",
        "timeout 5 touch X",
        "echo x | touch X",
        "sh -c 'touch X'",
        "t{o,}uch X",
        "{touch,X}",
    ]
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lead=_LEADS,
    before=st.lists(st.tuples(_PREFIXES, _SEPARATORS), max_size=3),
    denied=_DENIED,
    after=st.lists(st.tuples(_SEPARATORS, _PREFIXES), max_size=2),
)
def test_a_denied_command_joined_by_any_separator_is_denied(
    project: Path, lead: str, before: list[tuple[str, str]], denied: str, after: list[tuple[str, str]]
) -> None:
    policy = _policy(project, ["Bash"], ["Bash(touch:*)"])
    command = lead + "".join(p + s for p, s in before) + denied + "".join(s + p for s, p in after)
    decision = authorize(policy, "bash", {"command": command})
    assert decision.effect is Effect.DENY, (command, decision.reason)


_NAMES = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True)
_OPERATORS = st.sampled_from(
    ["@P", "@E", "@Q", "@A", "@a", "[x]", "[$(id)]", ":-$(id)", ":=`id`", "/x/$(id)"]
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=_NAMES, op=_OPERATORS, quoted=st.booleans())
def test_no_parameter_operator_that_can_run_code_is_allowed(
    project: Path, name: str, op: str, quoted: bool
) -> None:
    policy = _policy(project, ["Bash(echo:*)"], [])
    word = "${" + name + op + "}"
    command = f'echo "{word}"' if quoted else f"echo {word}"
    assert authorize(policy, "bash", {"command": command}).effect is not Effect.ALLOW, command


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    target=st.sampled_from(
        ["~/.bashrc", "~root/x", "/etc/x", "../x", "~+/../x", ".git/hooks/x", ".jido/settings.json"]
    ),
    via=st.sampled_from(
        ["echo x > {t}", "echo x >> {t}", "cp a {t}", "tee {t} < a", "sort -o {t} a", "dd of={t}"]
    ),
)
def test_writes_outside_or_into_protected_files_are_never_allowed(
    project: Path, target: str, via: str
) -> None:
    policy = _policy(project, ["Bash(echo:*)", "Bash(cp:*)", "Bash(tee:*)", "Bash(sort:*)", "Bash(dd:*)"], [])
    command = via.format(t=target)
    assert authorize(policy, "bash", {"command": command}).effect is not Effect.ALLOW, command


def test_a_glob_over_the_whole_file_system_costs_little(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy = _policy(project, ["Bash(cat:*)"], [])
    read = count_scandir(monkeypatch)
    d = authorize(policy, "bash", {"command": "cat /*/*/*/*/*/*/*/nothing-here"})
    assert d.effect is Effect.ASK
    # a bounded scan, not a walk of the file system: each expansion stops at its entry budget
    assert read and max(read) < MAX_GLOB_ENTRIES and sum(read) <= 4 * MAX_GLOB_ENTRIES


def test_recursive_reads_meet_wildcard_deny_rules_only_where_they_match(project: Path) -> None:
    (project / "src" / "deep").mkdir()
    (project / "src" / "deep" / ".env").write_text("CANARY")
    (project / "lib").mkdir()
    (project / "lib" / "x.py").write_text("x")
    policy = _policy(project, ["Bash(grep:*)", "Bash(find:*)"], ["Read(**/.env)"])
    assert authorize(policy, "bash", {"command": "grep -r foo lib"}).effect is Effect.ALLOW
    for command in ("grep -r foo src", "grep -r foo .", "find src -type f"):
        d = authorize(policy, "bash", {"command": command})
        assert d.effect is Effect.DENY and d.rule == "Read(**/.env)", command
