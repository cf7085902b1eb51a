"""Model text as markdown for the console: parsed here, sent as a tree of allowed elements.

The console never parses HTML (decision 0231): the gateway parses an assistant's text with
markdown-it-py (CommonMark plus tables and strikethrough, **raw HTML off**, so ``<script>``
in the text stays text) and sends the result as a tree whose nodes are either text or
``[tag, attrs, children]`` with ``tag`` one of :data:`TAGS` and ``attrs`` only a link's
``href`` (``http``, ``https`` or ``mailto``; any other link is its text alone) and a list's
``start``. ``console.js`` (``Jido.markdown``) builds it with ``createElement`` and text
nodes, checking tags and links again (decision 0314).

A conversation's SSE message of ``conversation.assistant.message`` carries the tree beside
the CloudEvent's members, as ``jidomarkdown`` (:func:`markdown_extension`); the event's own
``data`` is left as it was sent.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from markdown_it import MarkdownIt
    from markdown_it.tree import SyntaxTreeNode

__all__ = [
    "ASSISTANT_MESSAGE",
    "CACHED_TREES",
    "EXTENSION",
    "LINK_SCHEMES",
    "TAGS",
    "MarkdownNode",
    "markdown_extension",
    "markdown_tree",
]

#: The member of an SSE message that holds an assistant text's tree.
EXTENSION: Final = "jidomarkdown"
#: The event whose ``data.text`` is rendered.
ASSISTANT_MESSAGE: Final = "conversation.assistant.message"

#: Every element a tree may hold (``console.js`` keeps the same list).
TAGS: Final = frozenset(
    {
        "a", "blockquote", "br", "code", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "li",
        "ol", "p", "pre", "s", "strong", "table", "tbody", "td", "th", "thead", "tr", "ul",
    }
)  # fmt: skip
#: The schemes a link may have; any other (``javascript:``, ``data:``, relative) is text.
LINK_SCHEMES: Final = frozenset({"http", "https", "mailto"})

#: A tree node: text, or ``[tag, attrs, children]``.
MarkdownNode = str | list[Any]

#: Node types of markdown-it whose element has the same name.
_SAME: Final = {
    "blockquote": "blockquote",
    "bullet_list": "ul",
    "list_item": "li",
    "em": "em",
    "strong": "strong",
    "s": "s",
    "table": "table",
    "thead": "thead",
    "tbody": "tbody",
    "tr": "tr",
    "th": "th",
    "td": "td",
}


@functools.cache
def _parser() -> MarkdownIt:
    from markdown_it import MarkdownIt  # the gateway's only user of it: loaded on first use

    return MarkdownIt("commonmark", {"html": False, "linkify": False}).enable(["table", "strikethrough"])


#: Trees kept for texts parsed lately (each viewer of a conversation replays its messages).
CACHED_TREES: Final = 256


@functools.lru_cache(maxsize=CACHED_TREES)
def markdown_tree(text: str) -> list[MarkdownNode]:
    """The tree of ``text`` read as markdown (pure: the same text, the same tree; the tree is
    shared by the callers of the same text, to read, never to change)."""
    from markdown_it.tree import SyntaxTreeNode

    root = SyntaxTreeNode(_parser().parse(text))
    return _children(root)


def markdown_extension(event: dict[str, Any]) -> dict[str, Any]:
    """What an SSE message adds to an event: the tree of an assistant message's text, else nothing."""
    data = event.get("data")
    if event.get("type") != ASSISTANT_MESSAGE or not isinstance(data, dict):
        return {}
    text = data.get("text")
    return {EXTENSION: markdown_tree(text)} if isinstance(text, str) and text else {}


def _children(node: SyntaxTreeNode) -> list[MarkdownNode]:
    out: list[MarkdownNode] = []
    for child in node.children:
        out.extend(_node(child))
    return out


def _node(node: SyntaxTreeNode) -> list[MarkdownNode]:
    """One markdown-it node as tree nodes (a hidden or unknown wrapper gives its children)."""
    leaf = _leaf(node)
    return leaf if leaf is not None else _container(node)


def _leaf(node: SyntaxTreeNode) -> list[MarkdownNode] | None:
    """A node without children (text, a break, a rule, code) as tree nodes; ``None`` for others."""
    kind = node.type
    if kind in ("text", "html_inline", "html_block"):  # raw HTML is off: any left is text
        return [node.content] if node.content else []
    if kind == "softbreak":
        return ["\n"]
    if kind == "hardbreak":
        return [["br", {}, []]]
    if kind == "hr":
        return [["hr", {}, []]]
    if kind == "code_inline":
        return [["code", {}, [node.content]]]
    if kind in ("fence", "code_block"):
        return [["pre", {}, [["code", {}, [node.content]]]]]
    return None


def _container(node: SyntaxTreeNode) -> list[MarkdownNode]:
    """A node with children as its element; a hidden or unknown wrapper gives its children."""
    kind = node.type
    if kind == "paragraph":
        return _children(node) if node.hidden else [["p", {}, _children(node)]]
    if kind == "heading" and node.tag in TAGS:
        return [[node.tag, {}, _children(node)]]
    if kind == "ordered_list":
        start = node.attrs.get("start")
        return [["ol", {"start": start} if isinstance(start, int) and start != 1 else {}, _children(node)]]
    if kind == "link":
        return _link(str(node.attrs.get("href") or ""), _children(node))
    if kind == "image":  # the page loads nothing from elsewhere: an image is its description
        return _children(node) or [str(node.attrs.get("alt") or "")]
    if kind in _SAME:
        return [[_SAME[kind], {}, _children(node)]]
    return _children(node)


def _link(href: str, children: list[MarkdownNode]) -> list[MarkdownNode]:
    """A link to a web page or a mail address; any other is its text alone."""
    try:
        scheme = urlsplit(href).scheme.lower()
    except ValueError:
        return children
    if scheme not in LINK_SCHEMES:
        return children
    return [["a", {"href": href}, children]]
