"""`jidocode tools list` says how many tools the policy hides and why (issue 13: it printed `[]`)."""

from __future__ import annotations

from jidocode.cli.tools import hidden_note
from jidocode.shared.events.tools import ToolPolicy

EVERY = ["read_file", "write_file", "bash", "web_fetch"]


def _policy(**rules: object) -> ToolPolicy:
    return ToolPolicy.model_validate({"project_id": "p", "root": "/srv/p", **rules})


def test_nothing_hidden_says_nothing() -> None:
    assert hidden_note(EVERY, EVERY, _policy(default="ask"), trusted=True) == []


def test_counts_and_names_the_hidden_tools_with_their_reason() -> None:
    lines = hidden_note(["read_file"], EVERY, _policy(allow=["Read"], deny=["Bash"]), trusted=True)
    assert lines[0].startswith("3 of 4 tools hidden by the policy of /srv/p")
    assert "--all" in lines[0] and "jidocode tools policy /srv/p" in lines[0]
    assert '  write_file, web_fetch: no allow or ask rule names them and "default" is "deny"' in lines
    assert "  bash: denied by the rule Bash" in lines
    assert len(lines) == 3  # trusted: no trust line


def test_a_pattern_deny_rule_is_not_the_reason() -> None:
    # Bash(rm:*) denies some commands only; bash is hidden because nothing allows it.
    lines = hidden_note([], ["bash"], _policy(deny=["Bash(rm:*)"]), trusted=True)
    assert lines[1] == '  bash: no allow or ask rule names them and "default" is "deny"'


def test_an_untrusted_project_is_told_how_to_trust_it() -> None:
    lines = hidden_note([], EVERY, _policy(), trusted=False)
    assert lines[0].startswith("4 of 4 tools hidden")
    assert lines[-1].endswith("`jidocode projects trust /srv/p`")
    assert "untrusted" in lines[-1]
