"""Model text as a markdown tree for the console (services/gateway/markdown.py): only the allowed
elements, links only to web pages and mail addresses, raw HTML as text."""

from __future__ import annotations

from typing import Any

import pytest

from jidocode.services.gateway.markdown import TAGS, markdown_extension, markdown_tree


def _elements(tree: list[Any]) -> list[list[Any]]:
    """Every element of a tree, depth first."""
    found: list[list[Any]] = []
    for node in tree:
        if isinstance(node, list):
            found.append(node)
            found.extend(_elements(node[2]))
    return found


def test_common_markdown_becomes_elements() -> None:
    tree = markdown_tree("# T\n\n*a* **b** `c` ~~d~~\n\n- x\n- y\n\n5. five\n\n```py\n<b>\n```\n\n> q\n\n---")
    assert tree == [
        ["h1", {}, ["T"]],
        [
            "p",
            {},
            [["em", {}, ["a"]], " ", ["strong", {}, ["b"]], " ", ["code", {}, ["c"]], " ", ["s", {}, ["d"]]],
        ],
        ["ul", {}, [["li", {}, ["x"]], ["li", {}, ["y"]]]],
        ["ol", {"start": 5}, [["li", {}, ["five"]]]],
        ["pre", {}, [["code", {}, ["<b>\n"]]]],
        ["blockquote", {}, [["p", {}, ["q"]]]],
        ["hr", {}, []],
    ]


def test_a_table_keeps_its_cells() -> None:
    [table] = markdown_tree("| a | b |\n|---|--:|\n| 1 | 2 |")
    assert table == [
        "table",
        {},
        [
            ["thead", {}, [["tr", {}, [["th", {}, ["a"]], ["th", {}, ["b"]]]]]],
            ["tbody", {}, [["tr", {}, [["td", {}, ["1"]], ["td", {}, ["2"]]]]]],
        ],
    ]


@pytest.mark.parametrize(
    "text",
    [
        '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2"><b>bold?</b>',
        "<iframe src=https://example.com></iframe>\n\n<div onclick=alert(1)>x</div>",
        "[a](javascript:alert(1)) [b](JaVaScRiPt:alert(1)) [c](data:text/html,<script>x</script>) "
        "[d](vbscript:x) [e](/api/projects) <javascript:alert(1)> ![i](javascript:alert(1))",
        "<a href='javascript:alert(1)'>x</a>",
    ],
)
def test_hostile_text_gives_no_element_beyond_the_allowed_and_no_bad_link(text: str) -> None:
    elements = _elements(markdown_tree(text))
    assert all(tag in TAGS for tag, _, _ in elements)
    for tag, attrs, _ in elements:
        assert set(attrs) <= ({"href"} if tag == "a" else {"start"} if tag == "ol" else set())
        if tag == "a":
            assert attrs["href"].startswith(("http://", "https://", "mailto:"))


def test_raw_html_stays_its_text() -> None:
    text = '<script>alert(1)</script><img src=x onerror="alert(2)">'
    assert markdown_tree(text) == [["p", {}, [text]]]


def test_web_and_mail_links_stay_links() -> None:
    [para] = markdown_tree("[site](https://example.com/a?b=1) <mailto:me@example.com>")
    links = [n for n in para[2] if isinstance(n, list)]
    assert links == [
        ["a", {"href": "https://example.com/a?b=1"}, ["site"]],
        ["a", {"href": "mailto:me@example.com"}, ["mailto:me@example.com"]],
    ]


def test_an_image_is_its_description() -> None:
    assert markdown_tree("![a cat](https://example.com/cat.png)") == [["p", {}, ["a cat"]]]


def test_only_an_assistant_message_gets_a_tree() -> None:
    message = {"type": "conversation.assistant.message", "data": {"text": "**hi**"}}
    assert markdown_extension(message) == {"jidomarkdown": [["p", {}, [["strong", {}, ["hi"]]]]]}
    assert markdown_extension({"type": "conversation.user.message", "data": {"text": "**hi**"}}) == {}
    assert markdown_extension({"type": "conversation.assistant.message", "data": {"text": ""}}) == {}
    assert markdown_extension({"type": "conversation.assistant.message", "data": "x"}) == {}


def test_the_console_allows_the_same_tags() -> None:
    from jidocode.services.gateway.console.pages import STATIC_DIR

    script = (STATIC_DIR / "console.js").read_text()
    start = script.index("const MARKDOWN_TAGS = new Set([")
    listed = script[start : script.index("]);", start)]
    assert {tag for tag in TAGS if f'"{tag}"' in listed} == TAGS
    assert listed.count('"') == 2 * len(TAGS)
