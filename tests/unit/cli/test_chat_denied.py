"""The line `jidocode chat` prints when it denies an ask itself (no terminal, or --approve no)."""

from __future__ import annotations

from jidocode.cli.chat_lines import denied_line
from jidocode.client import ApprovalRequest

REASON = (
    "no rule allows 'npm test'; default is ask (to allow it without asking, "
    'add "Bash(npm test:*)" to permissions.allow in .jido/settings.json)'
)


def test_it_says_why_and_keeps_the_policys_rule() -> None:
    line = denied_line(
        ApprovalRequest(request_id="r", tool="bash", args={"command": "npm test"}, reason=REASON), asked=True
    )
    assert line.startswith("denied bash(command=npm test) (nobody can answer: stdin is not a terminal): ")
    assert 'add "Bash(npm test:*)" to permissions.allow in .jido/settings.json' in line
    no = denied_line(ApprovalRequest(request_id="r", tool="bash", args={}, reason=""), asked=False)
    assert "(--approve no): it needs approval" in no


def test_model_text_cannot_drive_the_terminal() -> None:
    request = ApprovalRequest(
        request_id="r", tool="bash", args={"command": "echo \x1b]0;owned\x07"}, reason="x\x1b[2J"
    )
    assert "\x1b" not in denied_line(request, asked=True) and "\x07" not in denied_line(request, asked=True)
