"""Markdown in `jidocode chat`: streamed text cut into finished blocks, control characters removed."""

from __future__ import annotations

import io

from rich.console import Console

from jidocode.cli.chat_markdown import MarkdownBlocks, print_markdown, strip_controls


def _feed_all(chunks: list[str]) -> tuple[list[str], str]:
    blocks = MarkdownBlocks()
    done: list[str] = []
    for chunk in chunks:
        done += blocks.feed(chunk)
    return done, blocks.rest()


def test_a_block_is_out_as_soon_as_its_blank_line_streams() -> None:
    blocks = MarkdownBlocks()
    assert blocks.feed("# Title\n") == []
    assert blocks.feed("\nSome **bold") == ["# Title"]
    assert blocks.feed(" text**\n") == []
    assert blocks.feed("\n") == ["Some **bold text**"]
    assert blocks.rest() == ""


def test_a_code_fence_is_one_block_even_with_blank_lines() -> None:
    text = "Run:\n\n```bash\nnpm test\n\nnpm run lint\n```\n\nDone."
    done, rest = _feed_all([text[i : i + 3] for i in range(0, len(text), 3)])
    assert done == ["Run:", "```bash\nnpm test\n\nnpm run lint\n```"]
    assert rest == "Done."


def test_the_rest_is_the_open_block_and_the_last_line() -> None:
    done, rest = _feed_all(["- one\n- two\n- thr", "ee"])
    assert done == [] and rest == "- one\n- two\n- three"


def test_controls_are_stripped_newlines_and_tabs_kept() -> None:
    assert strip_controls("a\x1b[31mred\x1b]8;;http://x\x07\tb\r\nc\x9b2J") == "a[31mred]8;;http://x\tb\nc2J"


def test_rendered_markdown_carries_no_escape_from_the_model() -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=60, color_system="truecolor")
    print_markdown(console, "**bold** and [a link](http://example.com) \x1b]0;pwned\x07")
    shown = buffer.getvalue()
    assert "bold" in shown and "**" not in shown
    assert "pwned" in shown and "\x1b]0;" not in shown and "\x07" not in shown
    assert "\x1b]8;" not in shown  # no terminal hyperlink
    assert "http://example.com" in shown
