"""sed scripts and awk programs: the risky ones are found, the plain ones pass."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jidocode.shared.policy.scripts import awk_risk, sed_risk


@pytest.mark.parametrize(
    "script",
    [
        "p",
        "s/a/b/g",
        "s|/usr|/opt|2p",
        "1,5p;/def/{s/def/fn/g;p}",
        "/^#/d",
        "$!N;P;D",
        "y/abc/xyz/",
        "1~2d",
        "0,/x/s//y/",
        "/start/,/end/{/skip/!p}",
        "a\\\nappended",
        "3i inserted text",
        ":top\ns/aa/a/\nt top",
        "\\,x,d",
        "s/[/]/x/",
        "#n\np",
        "q5",
        "/x/I,+3d",
    ],
)
def test_plain_sed_scripts(script: str) -> None:
    assert sed_risk(script) is None, script


@pytest.mark.parametrize(
    ("script", "fragment"),
    [
        ("1e touch x", "'e'"),
        ("e id", "'e'"),
        ("/x/e id", "'e'"),
        ("$e id", "'e'"),
        ("1,3w /tmp/out", "'w'"),
        ("W out", "'W'"),
        ("1r /etc/passwd", "'r'"),
        ("R /etc/passwd", "'R'"),
        ("s/.*/id/e", "s///e"),
        ("s/x/y/w /tmp/o", "s///w"),
        ("s/x/y/gew o", "s///e"),
        ("p;1!e id", "'e'"),
        ("/a/,/b/{e id\n}", "'e'"),
        ("s/x/y/Z", "not understood"),
        ("k", "not understood"),
        ("s/unterminated", "not understood"),
    ],
)
def test_risky_sed_scripts(script: str, fragment: str) -> None:
    risk = sed_risk(script)
    assert risk is not None and fragment in risk, (script, risk)


def _gnu_sed_sandbox_refuses(script: str) -> bool:
    """Whether GNU sed in --sandbox mode refuses ``script`` for using e, r or w."""
    done = subprocess.run(
        ["sed", "--sandbox", "-n", "-e", script], input=b"x\n", capture_output=True, timeout=5
    )
    return b"sandbox" in done.stderr


_GNU_SED = (
    shutil.which("sed") is not None and not _gnu_sed_sandbox_refuses("p") and _gnu_sed_sandbox_refuses("e")
)


@pytest.mark.skipif(not _GNU_SED, reason="needs GNU sed with --sandbox as the oracle")
@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("aeswWrR/;{}!,$1 \n\\pdy|#:[]xIMqg0")), max_size=24))
def test_what_the_scanner_passes_gnu_sed_would_run_in_its_sandbox(script: str) -> None:
    """GNU sed's --sandbox refuses e, r and w: nothing the scanner calls safe may be refused."""
    if sed_risk(script) is None:
        assert not _gnu_sed_sandbox_refuses(script), script


@pytest.mark.parametrize("program", ["{print $1}", 'BEGIN{FS=","} {s+=$2} END{print s}', "NR==1", "/x/{n++}"])
def test_plain_awk_programs(program: str) -> None:
    assert awk_risk(program) is None


@pytest.mark.parametrize(
    "program",
    [
        'BEGIN{system("id")}',
        '{print | "sh"}',
        '{print > "/tmp/x"}',
        'BEGIN{"id" | getline x}',
        'BEGIN{getline < "/etc/passwd"}',
        '@include "x"',
        'BEGIN{f="system"; @f("id")}',
        'BEGIN{print ENVIRON["NATS_PASSWORD"]}',
    ],
)
def test_risky_awk_programs(program: str) -> None:
    assert awk_risk(program) is not None
