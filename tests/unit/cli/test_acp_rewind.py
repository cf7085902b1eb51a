"""``/rewind`` in an ACP session, its pure parts (cli/acp_agent/rewind.py): which prompts are a
rewind, and message text shown as plain text (the editor renders the agent's markdown)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from jidocode.cli.acp_agent.rewind import is_rewind, message_list
from jidocode.client import UserMessageRef


def test_only_a_rewind_prompt_is_one() -> None:
    assert is_rewind("/rewind") == ""
    assert is_rewind("  /rewind 2 files ") == "2 files"
    assert (
        is_rewind("/rewinds") is None
        and is_rewind("please /rewind") is None
        and is_rewind("/review x") is None
    )


@given(st.text(max_size=200))
def test_a_message_is_listed_without_markdown_the_editor_would_follow(text: str) -> None:
    listed = message_list([UserMessageRef(id="m1", text=text)])
    line = listed.split("\n\n")[1]
    assert line.startswith("1. ") and "\n" not in line
    body = line[3:]
    # every markdown character is escaped: no link, image, code or emphasis opens
    for index, char in enumerate(body):
        if char in "[]()!`*_<>":
            assert index > 0 and body[index - 1] == "\\", (text, body)


def test_an_image_link_is_text() -> None:
    listed = message_list([UserMessageRef(id="m1", text="see ![x](https://evil.example/?q=secret)")])
    assert "see \\!\\[x\\]\\(https://evil\\.example/?q=secret\\)" in listed
