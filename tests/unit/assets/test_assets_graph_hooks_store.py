"""Skill graph queries, hook resolution (seed 001), generations and the store."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jidocode.services.asset_loader.generation import Generation, load_generation
from jidocode.services.asset_loader.hooks import hook_signal, interpolate, resolve_hook
from jidocode.services.asset_loader.layout import ensure_layout, layers, paths
from jidocode.services.asset_loader.loaders.graph import build_graph, parse_graph_node
from jidocode.services.asset_loader.loaders.skill import parse_skill
from jidocode.services.asset_loader.models import Skill
from jidocode.services.asset_loader.store import AssetStore
from jidocode.shared.errors import InvalidInput, NotFound
from jidocode.shared.settings import HookSettings, HooksSettings
from jidocode.shared.trust import trust_project


def _node(node_id: str, text: str):  # type: ignore[no-untyped-def]
    node, _ = parse_graph_node(text.encode(), path=f"/g/{node_id}.md", node_id=node_id, layer="project")
    assert node is not None
    return node


def test_graph_queries() -> None:
    graph = build_graph(
        [
            _node("git", "# Git basics\nSee [[Rebase|rebasing]] and [[tools/bisect#usage]] and [[missing]]."),
            _node(
                "rebase", "---\ntitle: Rebase\nlinks: [conflicts]\ntags: [vcs]\n---\nInteractive rebasing."
            ),
            _node("conflicts", "---\nrelated: '[[git]]'\n---\nResolving merge conflicts."),
            _node("tools/bisect", "Find the commit that broke things."),
            _node("alone", "nothing"),
        ]
    )
    assert graph.out_edges["git"] == ["rebase", "tools/bisect"]
    assert graph.dangling == {"git": ["missing"]}
    assert graph.backlinks("rebase") == ["git"]
    assert graph.neighbours("git") == ["rebase", "tools/bisect", "conflicts"]
    assert graph.nodes["git"].title == "Git basics" and graph.nodes["rebase"].tags == ["vcs"]
    assert graph.shortest_path("git", "conflicts") == ["git", "rebase", "conflicts"]
    assert graph.shortest_path("tools/bisect", "git") is None
    assert graph.shortest_path("tools/bisect", "git", directed=False) == ["tools/bisect", "git"]
    assert graph.shortest_path("git", "git") == ["git"]
    assert graph.resolve("BISECT") == "tools/bisect" and graph.resolve("Git Basics") == "git"
    assert graph.search("rebse")[0][0] == "rebase"
    assert graph.search("conflicts merge")[0][0] == "conflicts"
    with pytest.raises(NotFound):
        graph.neighbours("nope")


@given(st.binary(max_size=300))
@settings(max_examples=200, deadline=None)
def test_graph_node_never_crashes(raw: bytes) -> None:
    parse_graph_node(raw, path="/g/x.md", node_id="x", layer="project")


def _skill(hooks: str = "") -> Skill:
    text = f"---\nname: s\ndescription: d\njido:\n  router: {{a/b: X}}\n{hooks}---\n"
    skill, diags = parse_skill(text.encode(), path="/s/SKILL.md", folder="s", layer="project")
    assert skill is not None, diags
    return skill


GLOBAL = HooksSettings(
    pre=HookSettings(
        signal_type="skill/pre", data={"phase": "pre", "skill": "{{skill_name}}", "at": "{{timestamp}}"}
    ),
    post=HookSettings(
        signal_type="skill/post", data={"status": "{{status}}", "msg": "{{skill_name}} -> {{status}}"}
    ),
)


def test_hooks_none_configured_means_no_signal() -> None:
    assert hook_signal("pre", _skill(), "a/b", HooksSettings(), timestamp="t") is None
    assert hook_signal("post", _skill(), "a/b", HooksSettings(), timestamp="t", status="ok") is None


def test_global_hooks_interpolated() -> None:
    pre = hook_signal("pre", _skill(), "a/b", GLOBAL, timestamp="T")
    assert pre is not None and pre.signal_type == "skill/pre" and pre.bus == ":jido_code_bus"
    assert pre.data == {
        "phase": "pre",
        "skill": "s",
        "at": "T",
        "skill_name": "s",
        "route": "a/b",
        "timestamp": "T",
    }
    post = hook_signal("post", _skill(), "a/b", GLOBAL, timestamp="T", status="error")
    assert post is not None and post.data["status"] == "error" and post.data["msg"] == "s -> error"
    assert post.source == "/hooks/skill/post"


def test_frontmatter_overrides_and_disables() -> None:
    skill = _skill(
        "  hooks:\n    pre: {signal_type: mine/pre, data: {r: '{{route}}'}}\n    post: {enabled: false}\n"
    )
    pre = hook_signal("pre", skill, "a/b", GLOBAL, timestamp="T")
    assert pre is not None and pre.signal_type == "mine/pre" and pre.data["r"] == "a/b"
    assert hook_signal("post", skill, "a/b", GLOBAL, timestamp="T", status="ok") is None
    assert resolve_hook("post", skill, GLOBAL) is None


def test_global_disabled() -> None:
    off = HooksSettings(pre=HookSettings(signal_type="x", enabled=False))
    assert hook_signal("pre", _skill(), "a/b", off, timestamp="T") is None


def test_interpolate_nested() -> None:
    assert interpolate(
        {"a": ["{{ route }}", {"b": "x{{status}}y"}], "n": 1}, {"route": "r", "status": None}
    ) == {
        "a": ["r", {"b": "xy"}],
        "n": 1,
    }


# --- layout, generations, store -------------------------------------------------


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_layout(tmp_path: Path) -> None:
    layout = ensure_layout(tmp_path)
    for name in ("skills", "commands", "workflows", "skill_graph", "state"):
        assert (tmp_path / ".jido" / name).is_dir()
    assert layout == paths(tmp_path)
    ensure_layout(tmp_path)  # idempotent
    with pytest.raises(InvalidInput):
        paths(tmp_path, "../x")
    assert [str(layer.path) for layer in layers(tmp_path, jido_home=tmp_path / "h")] == [
        str(tmp_path / "h"),
        str(tmp_path / ".claude"),
        str(tmp_path / ".jido_code"),
        str(tmp_path / ".jido"),
    ]
    assert len(layers(None, jido_home=tmp_path)) == 1


def _project(tmp_path: Path) -> tuple[Path, Path]:
    home, root = tmp_path / "home", tmp_path / "proj"
    _write(home / "skills" / "shared" / "SKILL.md", "---\nname: shared\ndescription: from global\n---\n")
    _write(home / "skills" / "only-global" / "SKILL.md", "---\nname: only-global\ndescription: g\n---\n")
    _write(
        root / ".jido" / "skills" / "shared" / "SKILL.md",
        "---\nname: shared\ndescription: from project\n---\n",
    )
    _write(
        root / ".jido_code" / "skills" / "legacy" / "SKILL.md",
        "---\nname: legacy\ndescription: seed 001 dir\n---\n",
    )
    _write(root / ".jido" / "skills" / "broken" / "SKILL.md", "---\nname: [x\n---\n")
    _write(root / ".jido" / "skills" / "wrong" / "SKILL.md", "---\nname: right\ndescription: d\n---\n")
    _write(root / ".jido" / "skills" / "empty" / "notes.txt", "no skill here")
    _write(root / ".jido" / "commands" / "hello.md", "---\ndescription: Say hello\n---\nHello $ARGUMENTS")
    _write(root / ".jido" / "workflows" / "a.yaml", "steps: [{workflow: b}]")
    _write(root / ".jido" / "workflows" / "b.yaml", "steps: [{workflow: a}]")
    _write(
        root / ".jido" / "workflows" / "ok.md",
        "---\nsteps: [{command: hello, args: world}, {skill: nope, route: x}]\n---\n",
    )
    _write(root / ".jido" / "skill_graph" / "x.md", "links to [[y]]")
    _write(root / ".jido" / "skill_graph" / "sub" / "y.md", "# Why")
    _write(root / ".jido" / "JIDO.md", "project memory")
    _write(root / ".jido" / "settings.json", '{"llm": {"model": "m"}}')
    trust_project(root, home=home)
    return home, root


def test_generation_layers_and_diagnostics(tmp_path: Path) -> None:
    home, root = _project(tmp_path)
    gen = load_generation(root, jido_home=home, number=3)
    assert sorted(gen.skills) == ["legacy", "only-global", "shared"]
    assert gen.skills["shared"].description == "from project" and gen.skills["shared"].layer == "project"
    assert gen.skills["only-global"].layer == "global"
    assert list(gen.commands) == ["hello"] and list(gen.workflows) == ["ok"]
    assert gen.counts == {"skill": 3, "command": 1, "workflow": 1, "graph_node": 2}
    assert gen.graph.out_edges["x"] == ["sub/y"]
    assert gen.memory == [(str(root / ".jido" / "JIDO.md"), "project memory")]
    assert gen.settings.llm.model == "m" and gen.number == 3
    by_file = {d.file: d for d in gen.diagnostics}
    assert "invalid YAML" in by_file[str(root / ".jido" / "skills" / "broken" / "SKILL.md")].problem
    assert "folder" in by_file[str(root / ".jido" / "skills" / "wrong" / "SKILL.md")].problem
    assert "without SKILL.md" in by_file[str(root / ".jido" / "skills" / "empty")].problem
    assert "cycle" in by_file[str(root / ".jido" / "workflows" / "a.yaml")].problem
    assert "unknown skill" in by_file[str(root / ".jido" / "workflows" / "ok.md")].problem


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_symlink_outside_layer(tmp_path: Path) -> None:
    home, root = tmp_path / "home", tmp_path / "proj"
    _write(tmp_path / "outside" / "SKILL.md", "---\nname: evil\ndescription: d\n---\n")
    (root / ".jido" / "skills" / "evil").mkdir(parents=True)
    os.symlink(tmp_path / "outside" / "SKILL.md", root / ".jido" / "skills" / "evil" / "SKILL.md")
    _write(tmp_path / "outside2" / "note.md", "secret")
    (root / ".jido" / "commands").mkdir(parents=True)
    os.symlink(tmp_path / "outside2" / "note.md", root / ".jido" / "commands" / "leak.md")
    gen = load_generation(root, jido_home=home)
    assert gen.skills == {} and gen.commands == {}
    assert sum("outside its layer" in d.problem for d in gen.diagnostics) == 2


def test_oversized_file_not_read(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    _write(root / ".jido" / "commands" / "big.md", "x" * (600 * 1024))
    gen = load_generation(root, jido_home=tmp_path / "home")
    assert gen.commands == {} and "larger than" in gen.diagnostics[0].problem


def test_store_swap_get_list_search(tmp_path: Path) -> None:
    home, root = _project(tmp_path)
    store = AssetStore()
    assert store.list() == []
    old = store.swap(load_generation(root, jido_home=home, number=1))
    assert old == Generation()
    assert store.current.number == 1
    assert store.get("skill", "shared")["description"] == "from project"
    assert [a["name"] for a in store.list("skill")] == ["legacy", "only-global", "shared"]
    assert {a["type"] for a in store.list()} == {"skill", "command", "workflow"}
    assert store.search("shraed", "skill")[0]["name"] == "shared"  # typo tolerant
    assert store.search("hello")[0]["type"] == "command"
    assert store.search("seed dir", "skill")[0]["name"] == "legacy"  # description words
    with pytest.raises(NotFound):
        store.get("skill", "nope")
    with pytest.raises(InvalidInput):
        store.list("widget")
    with pytest.raises(InvalidInput):
        store.search("x", limit=0)


def test_nested_data_dir(tmp_path: Path) -> None:
    layout = ensure_layout(tmp_path, "var/jido")
    assert layout.skills == tmp_path / "var" / "jido" / "skills" and layout.skills.is_dir()
    for bad in ("", "/abs", "a/../b", ".", "a b"):
        with pytest.raises(InvalidInput):
            paths(tmp_path, bad)


_KINDS = st.sampled_from(["skill", "command", "workflow", "graph", "memory"])


@given(st.lists(st.tuples(_KINDS, st.sampled_from(["a", "b", "x-y"]), st.binary(max_size=200)), max_size=8))
@settings(max_examples=150, deadline=None)
def test_compile_generation_never_raises(files: list[tuple[str, str, bytes]]) -> None:
    from jidocode.services.asset_loader.discover import SourceFile
    from jidocode.services.asset_loader.generation import clear_parse_cache, compile_generation

    clear_parse_cache()
    sources = [
        SourceFile(kind=kind, layer="project", path=f"/p/{kind}/{i}/{stem}", stem=stem, raw=raw)  # type: ignore[arg-type]
        for i, (kind, stem, raw) in enumerate(files)
    ]
    gen = compile_generation(sources)
    assert all(d.file.startswith("/p/") for d in gen.diagnostics)


async def test_watcher_reports_asset_changes(tmp_path: Path) -> None:
    import asyncio

    from jidocode.services.asset_loader.layout import Layer
    from jidocode.services.asset_loader.watcher import AssetFilter, watch_layers

    layer_dir = tmp_path / ".jido"
    ensure_layout(tmp_path)
    changed: list[set[tuple[object, str]]] = []
    got = asyncio.Event()

    async def on_change(changes: set[tuple[object, str]]) -> None:
        changed.append(changes)
        got.set()

    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(
        watch_layers([Layer(name="project", path=layer_dir)], on_change, stop, debounce_ms=20, ready=ready)
    )
    try:
        await asyncio.wait_for(ready.wait(), 10)
        _write(layer_dir / "commands" / "hi.md", "Hi")
        await asyncio.wait_for(got.wait(), 10)
        assert any(path.endswith("commands/hi.md") for batch in changed for _, path in batch)
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)

    from watchfiles import Change

    flt = AssetFilter([layer_dir])
    base = str(layer_dir)
    assert flt(Change.modified, f"{base}/skills/a/SKILL.md")
    assert flt(Change.modified, f"{base}/settings.json")
    assert flt(Change.added, f"{base}/JIDO.md")
    assert not flt(Change.modified, f"{base}/state/conv.json")
    assert not flt(Change.modified, f"{base}/skills/a/.SKILL.md.swp")
    assert not flt(Change.modified, f"{tmp_path}/src/main.py")


async def test_watcher_without_folders_waits_for_stop(tmp_path: Path) -> None:
    import asyncio

    from jidocode.services.asset_loader.layout import Layer
    from jidocode.services.asset_loader.watcher import watch_layers

    async def never(_: set[tuple[object, str]]) -> None:
        raise AssertionError("no change expected")

    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(
        watch_layers([Layer(name="global", path=tmp_path / "missing")], never, stop, ready=ready)
    )
    await asyncio.wait_for(ready.wait(), 5)
    stop.set()
    await asyncio.wait_for(task, 5)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifo_is_not_read(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    (root / ".jido" / "skill_graph").mkdir(parents=True)
    os.mkfifo(root / ".jido" / "skill_graph" / "pipe.md")
    _write(root / ".jido" / "skill_graph" / "ok.md", "fine")
    gen = load_generation(root, jido_home=tmp_path / "home")
    assert list(gen.graph.nodes) == ["ok"]
    assert "not a regular file" in gen.diagnostics[0].problem
