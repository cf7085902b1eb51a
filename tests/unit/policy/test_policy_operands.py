"""Which words of a command name files, and how (the tables of shared/policy/operands.py)."""

from __future__ import annotations

import shlex

import pytest

from jidocode.shared.policy.operands import ALL, operands


def uses(command: str) -> list[tuple[str, str]]:
    return [(u.text, u.kind) for u in operands(tuple(shlex.split(command))).uses]


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("cat a b", [("a", "read"), ("b", "read")]),
        ("head -n 5 a", [("a", "read")]),
        ("head -5 a", [("a", "read")]),
        ("grep -e x a", [("a", "read")]),
        ("grep pattern a", [("a", "read")]),
        ("grep -rn pattern", [(".", "read_tree")]),
        ("grep -f pats.txt a", [("pats.txt", "read"), ("a", "read")]),
        ("rg pattern", [(".", "read_tree")]),
        ("rg -g '*.py' pattern src", [("src", "read_tree")]),
        ("sort -o out -k 2 -t / in", [("out", "write"), ("in", "read")]),
        ("sort -oout in", [("out", "write"), ("in", "read")]),
        ("cut -d / -f 2 a", [("a", "read")]),
        ("ls", [(".", "read")]),
        ("ls -R src", [("src", "read_tree")]),
        ("find src -name '*.py'", [("src", "read_tree")]),
        ("find -L . -newer x", [(".", "read_tree")]),
        ("sed -n 1p a", [("a", "read")]),
        ("sed -i s/a/b/ a", [("a", "write")]),
        ("sed -e p -e q a b", [("a", "read"), ("b", "read")]),
        ("awk -v x=1 -F: '{print}' a n=2", [("a", "read")]),
        ("dd if=a of=b", [("a", "read"), ("b", "write")]),
        ("tee -a log", [("log", "write")]),
        ("touch -r ref new", [("ref", "read"), ("new", "write")]),
        ("chmod +x run.sh", [("run.sh", "write")]),
        ("git -C sub status", [("sub", "cwd")]),
        ("git log --output=o.txt", [("o.txt", "write")]),
        ("git diff --output o.txt", [("o.txt", "write")]),
        ("git archive -o a.tar HEAD", [("a.tar", "write"), ("HEAD", "mention")]),
        ("git show HEAD:secrets/k", [("secrets/k", "read")]),
        ("git grep foo", [(".", "read_tree")]),
        ("git init there", [("there", "write")]),
        ("git diff --no-index a b", [("a", "read"), ("b", "read")]),
        ("git add .", [(".", "mention")]),
        ("tar cf out.tar src", [("out.tar", "write"), ("src", "read_tree")]),
        ("tar -xf in.tar -C dst", [("in.tar", "read"), ("dst", "write")]),
        ("curl -o page.html https://x", [("page.html", "write")]),
        ("curl -d @body.json https://x", [("body.json", "read")]),
        ("wget -O f https://x", [("f", "write")]),
        ("pandoc --output=/o a.md", [("/o", "write"), ("a.md", "mention")]),
        ("python3 tool.py --in=x", [("tool.py", "mention"), ("x", "mention")]),
        ("echo /etc/passwd", []),
    ],
)
def test_uses(command: str, expected: list[tuple[str, str]]) -> None:
    assert uses(command) == expected


def test_copy_into_a_directory() -> None:
    op = operands(("cp", "-r", "payload/.", "."))
    assert op.transfer is not None
    assert op.transfer.dest == (3, ".") and op.transfer.into_dir is True and op.transfer.recursive
    assert op.transfer.makes_links  # cp -r copies symlinks as symlinks


def test_ln_marks_its_sources_as_link_targets() -> None:
    op = operands(("ln", "-s", "/outside/x", "l"))
    assert [(u.text, u.kind) for u in op.uses] == [("/outside/x", "link")]
    assert op.transfer is not None and op.transfer.dest == (3, "l") and op.transfer.into_dir is None


@pytest.mark.parametrize(
    "command", ["git checkout main", "git reset --hard", "git stash pop", "tar xf a.tar", "unzip a.zip"]
)
def test_tree_writers_taint_everything(command: str) -> None:
    assert (0, ALL) in operands(tuple(command.split())).links
