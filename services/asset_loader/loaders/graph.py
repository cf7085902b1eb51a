"""The skill graph: markdown notes in ``skill_graph/``, linked by ``[[wiki links]]``.

A node's id is its path below ``skill_graph/`` without ``.md`` (``tools/git``);
its title is the frontmatter ``title``/``name``, else the first ``# heading``,
else the file name. Edges come from ``[[Target]]``, ``[[Target|label]]``,
``[[Target#section]]`` in the body and from the frontmatter ``links``/
``related`` lists. A link target resolves by id, then by file name, then by
title (case-insensitive); unresolved targets are kept in
:attr:`GraphSnapshot.dangling`.
"""

from __future__ import annotations

import re
from collections import deque
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field

from jidocode.services.asset_loader.fuzzy import rank_by
from jidocode.services.asset_loader.models import GraphNode
from jidocode.services.asset_loader.text import decode_text, split_frontmatter
from jidocode.shared.errors import NotFound
from jidocode.shared.settings import Diagnostic

__all__ = ["MAX_LINKS_PER_NODE", "WIKI_LINK", "GraphSnapshot", "build_graph", "parse_graph_node"]

WIKI_LINK: Final = re.compile(r"\[\[([^\[\]|#\n]{1,200})(?:#[^\[\]|\n]*)?(?:\|[^\[\]\n]*)?\]\]")
MAX_LINKS_PER_NODE: Final = 1000
_HEADING: Final = re.compile(r"^#\s+(.+?)\s*#*\s*$", re.MULTILINE)


def parse_graph_node(
    raw: bytes, *, path: str, node_id: str, layer: str
) -> tuple[GraphNode | None, list[Diagnostic]]:
    text, diags = decode_text(raw, path)
    if text is None:
        return None, diags
    fm, body, fm_diags = split_frontmatter(text, path)
    diags.extend(fm_diags)
    if fm is None:
        fm = {}
    title: Any = fm.get("title", fm.get("name"))
    if not isinstance(title, str) or not title.strip():
        heading = _HEADING.search(body)
        title = heading.group(1) if heading else node_id.rsplit("/", 1)[-1]
    links: list[str] = []
    for key in ("links", "related"):
        value = fm.get(key)
        if value is None:
            continue
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            diags.append(
                Diagnostic(file=path, key=key, problem="must be a list of note names", severity="warning")
            )
            continue
        for item in value:
            if isinstance(item, str):
                inner = WIKI_LINK.fullmatch(item.strip())
                links.append(inner.group(1).strip() if inner else item.strip())
    links.extend(m.group(1).strip() for m in WIKI_LINK.finditer(body))
    unique = list(dict.fromkeys(link for link in links if link))
    if len(unique) > MAX_LINKS_PER_NODE:
        diags.append(Diagnostic(file=path, problem=f"more than {MAX_LINKS_PER_NODE} links, the rest ignored"))
        unique = unique[:MAX_LINKS_PER_NODE]
    tags_value = fm.get("tags", [])
    tags = [t for t in tags_value if isinstance(t, str)] if isinstance(tags_value, list) else []
    return GraphNode(
        id=node_id, title=title.strip(), path=path, layer=layer, tags=tags, links=unique, body=body
    ), diags


class GraphSnapshot(BaseModel):
    """An immutable graph with adjacency precomputed for fast queries."""

    model_config = ConfigDict(frozen=True)

    nodes: dict[str, GraphNode] = Field(default_factory=dict)
    out_edges: dict[str, list[str]] = Field(default_factory=dict)
    in_edges: dict[str, list[str]] = Field(default_factory=dict)
    dangling: dict[str, list[str]] = Field(default_factory=dict)

    def node(self, node_id: str) -> GraphNode:
        """The node ``node_id`` names (an id, file name or title); ``NotFound`` otherwise."""

        node = self.nodes.get(node_id) or self.nodes.get(self.resolve(node_id) or "")
        if node is None:
            raise NotFound(f"no skill graph node {node_id!r}", details={"node": node_id})
        return node

    def resolve(self, name: str) -> str | None:
        """The id a link text or name refers to, or ``None``."""
        if name in self.nodes:
            return name
        low = name.strip().lower()
        for node in self.nodes.values():
            if node.id.lower() == low:
                return str(node.id)
        for node in self.nodes.values():
            if node.id.rsplit("/", 1)[-1].lower() == low:
                return str(node.id)
        for node in self.nodes.values():
            if node.title.lower() == low:
                return str(node.id)
        return None

    def neighbours(self, node_id: str) -> list[str]:
        """Nodes linked from or to ``node_id``, outgoing first."""
        node = self.node(node_id)
        return list(dict.fromkeys([*self.out_edges.get(node.id, []), *self.in_edges.get(node.id, [])]))

    def links(self, node_id: str) -> list[str]:
        return list(self.out_edges.get(self.node(node_id).id, []))

    def backlinks(self, node_id: str) -> list[str]:
        return list(self.in_edges.get(self.node(node_id).id, []))

    def search(self, query: str, limit: int = 20) -> list[tuple[str, float]]:
        hits = rank_by(
            query, ((n.id, f"{n.id} {n.title}", n.body[:4000]) for n in self.nodes.values()), limit=limit
        )
        return [(node_id, round(s, 3)) for node_id, s in hits]

    def shortest_path(self, source: str, target: str, *, directed: bool = True) -> list[str] | None:
        """The fewest-hop path ``source`` → ``target`` (following links, or either way)."""
        start, goal = self.node(source).id, self.node(target).id
        previous: dict[str, str | None] = {start: None}
        queue = deque([start])
        while queue:
            current = queue.popleft()
            if current == goal:
                path: list[str] = []
                step: str | None = current
                while step is not None:
                    path.append(step)
                    step = previous[step]
                return path[::-1]
            nexts = self.out_edges.get(current, [])
            if not directed:
                nexts = [*nexts, *self.in_edges.get(current, [])]
            for nxt in nexts:
                if nxt not in previous:
                    previous[nxt] = current
                    queue.append(nxt)
        return None


def build_graph(nodes: list[GraphNode]) -> GraphSnapshot:
    """Resolve every link and index both directions."""
    by_id = {n.id: n for n in nodes}
    exact = {n.id.lower(): n.id for n in nodes}
    stems: dict[str, str] = {}
    titles: dict[str, str] = {}
    for n in nodes:
        stems.setdefault(n.id.rsplit("/", 1)[-1].lower(), n.id)
        titles.setdefault(n.title.lower(), n.id)
    out_edges: dict[str, list[str]] = {}
    in_edges: dict[str, list[str]] = {n.id: [] for n in nodes}
    dangling: dict[str, list[str]] = {}
    for n in nodes:
        targets: list[str] = []
        for link in n.links:
            low = link.lower().removesuffix(".md")
            target = exact.get(low) or stems.get(low) or titles.get(low)
            if target is None:
                dangling.setdefault(n.id, []).append(link)
            elif target != n.id and target not in targets:
                targets.append(target)
        out_edges[n.id] = targets
        for t in targets:
            in_edges[t].append(n.id)
    return GraphSnapshot(nodes=by_id, out_edges=out_edges, in_edges=in_edges, dangling=dangling)
