"""The layers of the code: who may import whom, and no import cycles between files.

Every ``.py`` under ``shared/``, ``services/``, ``client/`` and ``cli/`` is
parsed with :mod:`ast`; every import (at the top, inside functions, under
``TYPE_CHECKING``; absolute and relative) is resolved to the ``jidocode.*``
module it loads. The rules:

=========================  ====================================================
importer                   may import (of ``jidocode.*``)
=========================  ====================================================
``shared/``                ``jidocode.shared`` only
``client/``                ``jidocode.shared``, ``jidocode.client``
``services/<a>/``          ``jidocode.shared``, ``jidocode.services.<a>``
``services/*.py``          ``jidocode.shared`` (``registry`` loads services by name)
``cli/``                   anything (it runs the services: ``services.registry``)
=========================  ====================================================

So no service imports another service, the CLI or the SDK; neither ``shared``
nor the SDK imports a service or the CLI. And the file-level import graph has
no cycle. Only explicit imports are edges: importing ``pkg.sub`` also runs
``pkg/__init__.py``, but that implicit edge is not counted, so a package
``__init__`` re-exporting its submodules is fine; a submodule importing its
own package back (``from . import name`` of a name the ``__init__`` defines
by importing that submodule) is a cycle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Folder -> import name (setup.py maps them so).
FOLDERS: dict[str, str] = {
    "shared": "jidocode.shared",
    "services": "jidocode.services",
    "client": "jidocode.client",
    "cli": "jidocode.cli",
}


@dataclass(frozen=True)
class Module:
    name: str  # jidocode.services.engine.registry
    path: str  # services/engine/registry.py (relative to the repository)
    is_package: bool  # an __init__.py


@dataclass(frozen=True)
class Edge:
    importer: str  # module name
    target: str  # module name (a file of the tree)
    path: str  # the importer's file
    line: int
    statement: str  # the import as written

    def where(self) -> str:
        return f"{self.path}:{self.line} `{self.statement}`"


# -- reading the tree -------------------------------------------------------------------


def module_of(rel: Path) -> Module:
    """The module a file under one of :data:`FOLDERS` is imported as."""
    parts = list(rel.with_suffix("").parts)
    prefix = FOLDERS[parts[0]].split(".")
    is_package = parts[-1] == "__init__"
    if is_package:
        parts = parts[:-1]
    return Module(".".join(prefix + parts[1:]), rel.as_posix(), is_package)


def discover(root: Path = ROOT) -> dict[str, tuple[Module, str]]:
    """Every module of the tree: name -> (module, source)."""
    found: dict[str, tuple[Module, str]] = {}
    for folder in FOLDERS:
        for file in sorted((root / folder).rglob("*.py")):
            if "__pycache__" in file.parts:
                continue
            module = module_of(file.relative_to(root))
            found[module.name] = (module, file.read_text(encoding="utf-8"))
    return found


def _owner(name: str, known: Iterable[str]) -> str | None:
    """The module of the tree that ``name`` (a module or a name inside one) lives in."""
    names = set(known)
    while name:
        if name in names:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(module: Module, source: str, known: Iterable[str]) -> list[Edge]:
    """The ``jidocode.*`` imports of ``module``, resolved to modules of the tree.

    ``from pkg import sub`` targets ``pkg.sub`` when that is a module, else
    ``pkg`` (a name its ``__init__`` defines). A target outside the tree (a
    module that does not exist) is kept as written, so a rule can still see it.
    """
    names = set(known)
    tree = ast.parse(source, filename=module.path)
    package = module.name if module.is_package else module.name.rpartition(".")[0]
    edges: list[Edge] = []

    def add(target: str, node: ast.stmt) -> None:
        if target != "jidocode" and not target.startswith("jidocode."):
            return
        resolved = _owner(target, names) or target
        if any(e.target == resolved and e.line == node.lineno for e in edges):
            return  # ``from m import a, b``: one edge
        statement = ast.get_source_segment(source, node) or ast.unparse(node)
        edges.append(Edge(module.name, resolved, module.path, node.lineno, " ".join(statement.split())))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                if node.level - 1 >= len(base_parts):
                    raise AssertionError(f"{module.path}:{node.lineno}: relative import beyond the top")
                base = ".".join(base_parts[: len(base_parts) - (node.level - 1)])
                if node.module:
                    base = f"{base}.{node.module}"
            else:
                base = node.module or ""
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                add(candidate if candidate in names else base, node)
    return edges


def all_edges(modules: Mapping[str, tuple[Module, str]]) -> list[Edge]:
    return [edge for module, source in modules.values() for edge in imports_of(module, source, modules)]


# -- the rules ------------------------------------------------------------------------


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def allowed_prefixes(importer: str) -> tuple[str, ...] | None:
    """What ``importer`` may import of ``jidocode.*``; ``None``: anything."""
    if _within(importer, "jidocode.cli"):
        return None
    if _within(importer, "jidocode.shared"):
        return ("jidocode.shared",)
    if _within(importer, "jidocode.client"):
        return ("jidocode.shared", "jidocode.client")
    if _within(importer, "jidocode.services"):
        parts = importer.split(".")
        if len(parts) >= 4 and parts[2] == "mcp_gateway":  # a protocol adapter: a client of the system
            return ("jidocode.shared", "jidocode.client", ".".join(parts[:3]))
        if len(parts) >= 4 and parts[2] == "gateway":  # it serves the MCP library at /projects/<p>/mcp
            return ("jidocode.shared", "jidocode.services.mcp_gateway", ".".join(parts[:3]))
        if len(parts) >= 4:  # jidocode.services.<a>.<module>
            return ("jidocode.shared", ".".join(parts[:3]))
        return ("jidocode.shared", importer)  # services/__init__.py, services/registry.py
    raise AssertionError(f"{importer} is in no layer")


def _what(target: str) -> str:
    if _within(target, "jidocode.cli"):
        return "the CLI"
    if _within(target, "jidocode.client"):
        return "the client SDK"
    if _within(target, "jidocode.services"):
        parts = target.split(".")
        return f"the service {parts[2]!r}" if len(parts) >= 4 else "the services' registry"
    return target


def layer_violations(edges: Iterable[Edge]) -> list[str]:
    out: list[str] = []
    for edge in edges:
        allowed = allowed_prefixes(edge.importer)
        if allowed is None or any(_within(edge.target, p) for p in allowed):
            continue
        out.append(
            f"{edge.where()} imports {edge.target} ({_what(edge.target)}); "
            f"{edge.importer} may import only {', '.join(allowed)}"
        )
    return out


def import_cycles(edges: Iterable[Edge]) -> list[list[Edge]]:
    """One cycle (as its edges) per strongly connected component with a cycle (Tarjan)."""
    graph: dict[str, dict[str, Edge]] = {}
    for edge in edges:
        graph.setdefault(edge.importer, {}).setdefault(edge.target, edge)
        graph.setdefault(edge.target, {})
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0

    for start in sorted(graph):
        if start in index:
            continue
        # iterative Tarjan: (node, iterator over its successors)
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = counter
                    counter += 1
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph[succ]))))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph[node]:
                    components.append(sorted(component))

    cycles: list[list[Edge]] = []
    for component in components:
        members = set(component)
        first = component[0]
        # shortest way back to ``first`` inside the component (breadth first)
        came_from: dict[str, Edge] = {}
        frontier = [first]
        found: Edge | None = None
        while frontier and found is None:
            nxt: list[str] = []
            for node in frontier:
                for succ, edge in sorted(graph[node].items()):
                    if succ == first:
                        found = edge
                        break
                    if succ in members and succ not in came_from:
                        came_from[succ] = edge
                        nxt.append(succ)
                if found is not None:
                    break
            frontier = nxt
        assert found is not None
        path = [found]
        while path[0].importer != first:
            path.insert(0, came_from[path[0].importer])
        cycles.append(path)
    return cycles


def describe_cycle(cycle: list[Edge]) -> str:
    chain = " -> ".join([e.importer for e in cycle] + [cycle[0].importer])
    return chain + "\n" + "\n".join(f"    {e.where()}" for e in cycle)


# -- the tree as it is ---------------------------------------------------------------


@pytest.fixture(scope="module")
def tree() -> dict[str, tuple[Module, str]]:
    return discover()


@pytest.fixture(scope="module")
def edges(tree: dict[str, tuple[Module, str]]) -> list[Edge]:
    return all_edges(tree)


def test_the_walk_sees_the_whole_tree(tree: dict[str, tuple[Module, str]], edges: list[Edge]) -> None:
    assert {
        "jidocode.shared.bus",
        "jidocode.services.registry",
        "jidocode.client",
        "jidocode.cli.main",
    } <= set(tree)
    assert any(e.importer == "jidocode.cli.serve" and e.target == "jidocode.services.registry" for e in edges)
    assert len(edges) > 300


def test_every_import_respects_the_layers(edges: list[Edge]) -> None:
    problems = layer_violations(edges)
    assert not problems, "imports across layers:\n" + "\n".join(problems)


def test_no_import_cycles_between_files(edges: list[Edge]) -> None:
    cycles = import_cycles(edges)
    assert not cycles, "import cycles:\n" + "\n".join(describe_cycle(c) for c in cycles)


def test_every_import_of_the_tree_names_a_module_that_exists(
    tree: dict[str, tuple[Module, str]], edges: list[Edge]
) -> None:
    """A typo'd or stale import path would escape the rules above."""
    missing = [f"{e.where()} -> {e.target}" for e in edges if e.target not in tree]
    assert not missing, "imports of modules that do not exist:\n" + "\n".join(missing)


# -- the checker can fail -------------------------------------------------------------


def _synthetic(files: dict[str, str]) -> list[Edge]:
    modules = {m.name: (m, src) for m, src in ((module_of(Path(p)), s) for p, s in files.items())}
    return all_edges(modules)


def test_the_checker_finds_every_kind_of_violation() -> None:
    edges = _synthetic(
        {
            "services/__init__.py": "",
            "services/a/__init__.py": "",
            "services/a/x.py": (
                "from typing import TYPE_CHECKING\n"
                "from ..b import y\n"  # relative, into another service
                "if TYPE_CHECKING:\n"
                "    from jidocode.cli.serve import run_service\n"
                "def f():\n"
                "    import jidocode.client\n"
            ),
            "services/b/__init__.py": "",
            "services/b/y.py": "from jidocode.services.a.x import f\n",
            "shared/__init__.py": "",
            "shared/z.py": "from jidocode.services.a import x\n",
            "client/__init__.py": "from jidocode.services.b import g\nfrom jidocode.shared import bus\n",
            "cli/__init__.py": "",
            "cli/main.py": "from jidocode.services.a import x\n",
        }
    )
    problems = layer_violations(edges)
    assert len(problems) == 6, problems
    joined = "\n".join(problems)
    assert "services/a/x.py:2 `from ..b import y` imports jidocode.services.b.y (the service 'b')" in joined
    assert "services/a/x.py:4 `from jidocode.cli.serve import run_service` imports" in joined
    assert "services/a/x.py:6 `import jidocode.client` imports jidocode.client (the client SDK)" in joined
    assert "services/b/y.py:1" in joined and "shared/z.py:1" in joined and "client/__init__.py:1" in joined
    assert "cli/main.py" not in joined  # the CLI may import services
    [cycle] = import_cycles(edges)
    assert {e.importer for e in cycle} == {"jidocode.services.a.x", "jidocode.services.b.y"}
    assert "services/b/y.py:1 `from jidocode.services.a.x import f`" in describe_cycle(cycle)


def test_a_package_init_reexporting_is_fine_but_importing_it_back_is_a_cycle() -> None:
    fine = _synthetic(
        {
            "shared/__init__.py": "",
            "shared/p/__init__.py": "from .a import A\nfrom .b import B\n",
            "shared/p/a.py": "from .b import B\n",  # a sibling, directly
            "shared/p/b.py": "B = 1\n",
        }
    )
    assert import_cycles(fine) == [] and layer_violations(fine) == []
    back = _synthetic(
        {
            "shared/__init__.py": "",
            "shared/p/__init__.py": "from .a import A\nfrom .b import B\n",
            "shared/p/a.py": "from . import B\n",  # the package, which imports a
            "shared/p/b.py": "B = 1\n",
        }
    )
    [cycle] = import_cycles(back)
    assert [e.where() for e in cycle] == [
        "shared/p/__init__.py:1 `from .a import A`",
        "shared/p/a.py:1 `from . import B`",
    ]


def test_relative_imports_resolve_like_python() -> None:
    [edge] = _synthetic(
        {
            "services/conversation/llm/__init__.py": "",
            "services/conversation/llm/adapter.py": "from ..ports import LlmPort\n",
            "services/conversation/ports.py": "",
        }
    )
    assert (edge.importer, edge.target) == (
        "jidocode.services.conversation.llm.adapter",
        "jidocode.services.conversation.ports",
    )
    [edge] = _synthetic(
        {
            "services/conversation/llm/__init__.py": "from .. import ports\n",
            "services/conversation/ports.py": "",
        }
    )
    assert edge.target == "jidocode.services.conversation.ports"
