"""``signal_bus`` and the hooks' ``bus`` (seed 001): what has no effect is reported, never silently dropped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from jidocode.shared.settings import (
    SIGNAL_BUS_NAME,
    hook_bus_problem,
    load_settings,
    merge_layers,
    signal_bus_diagnostics,
)

LOGGER = {"module": "JidoSignal.Bus.Middleware.Logger", "opts": {"level": "debug"}}


def _keys(value: dict[str, Any]) -> list[str | None]:
    _, diags = merge_layers([("f", value)])
    return [d.key for d in diags]


def test_the_seed_bus_name_and_no_middleware_are_silent() -> None:
    assert _keys({"signal_bus": {"name": "jido_code_bus", "middleware": []}}) == []
    assert _keys({"signal_bus": {"name": ":jido_code_bus"}}) == []
    assert _keys({"signal_bus": {}}) == []


def test_the_logger_middleware_is_reported_with_its_level_and_the_alternative() -> None:
    [diag] = signal_bus_diagnostics({"name": SIGNAL_BUS_NAME, "middleware": [LOGGER]}, "g.json")
    assert (diag.file, diag.key, diag.severity) == ("g.json", "signal_bus.middleware[0]", "warning")
    assert "JidoSignal.Bus.Middleware.Logger" in diag.problem
    assert "not supported" in diag.problem and "'debug'" in diag.problem
    assert "jidocode watch" in diag.problem


def test_every_middleware_entry_another_name_and_unknown_keys_are_reported() -> None:
    value = {"signal_bus": {"name": "other_bus", "middleware": [LOGGER, {"module": "X"}, 3], "color": "red"}}
    assert _keys(value) == [
        "signal_bus.name",
        "signal_bus.middleware[0]",
        "signal_bus.middleware[1]",
        "signal_bus.middleware[2]",
        "signal_bus.color",
    ]
    # the section itself is kept as written (nothing reads it)
    merged, _ = merge_layers([("f", value)])
    assert merged.signal_bus["name"] == "other_bus"


def test_malformed_name_and_middleware_are_reported() -> None:
    assert _keys({"signal_bus": {"name": 7, "middleware": "Logger"}}) == [
        "signal_bus.name",
        "signal_bus.middleware",
    ]
    assert _keys({"signal_bus": "x"}) == ["signal_bus"]  # not an object: an error, as before


def test_a_hook_naming_another_bus_is_reported_and_still_published() -> None:
    assert hook_bus_problem(":jido_code_bus") is None
    assert hook_bus_problem("jido_code_bus") is None
    problem = hook_bus_problem(":audit_bus")
    assert problem is not None and "':audit_bus'" in problem and "jido.hook." in problem
    hooks = {
        "pre": {"signal_type": "skill/pre", "bus": ":audit_bus"},
        "post": {"signal_type": "skill/post", "bus": ":jido_code_bus"},
    }
    settings, diags = merge_layers([("f", {"hooks": hooks})])
    assert [(d.key, d.severity) for d in diags] == [("hooks.pre.bus", "warning")]
    assert settings.hooks.pre is not None and settings.hooks.pre.signal_type == "skill/pre"


def test_load_settings_reports_the_file(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "settings.json").write_text(json.dumps({"signal_bus": {"middleware": [LOGGER]}}))
    loaded = load_settings(None, jido_home=home)
    assert [(d.file, d.key) for d in loaded.diagnostics] == [
        (str(home / "settings.json"), "signal_bus.middleware[0]")
    ]


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)


@given(st.dictionaries(st.text(max_size=12), _json, max_size=4))
@hsettings(max_examples=200, deadline=None)
def test_every_key_that_is_not_the_one_bus_is_named(value: dict[str, Any]) -> None:
    diags = signal_bus_diagnostics(value, "f")
    keys = {d.key for d in diags}
    assert all(d.severity == "warning" for d in diags)
    for key, sub in value.items():
        silent = (key == "name" and isinstance(sub, str) and sub.removeprefix(":") == SIGNAL_BUS_NAME) or (
            key == "middleware" and sub == []
        )
        if key == "middleware" and isinstance(sub, list):
            assert keys >= {f"signal_bus.middleware[{i}]" for i in range(len(sub))}
        elif not silent:
            assert f"signal_bus.{key}" in keys


def test_an_untrusted_project_layer_is_only_said_to_be_ignored() -> None:
    project = {
        "signal_bus": {"middleware": [LOGGER]},
        "hooks": {"pre": {"signal_type": "p/pre", "bus": ":x"}},
    }
    _, diags = merge_layers([], project=[("p", project)], trusted=False)
    assert {d.key for d in diags} == {"signal_bus", "hooks.pre"}
    assert all("projects trust" in d.problem for d in diags)
    _, diags = merge_layers([], project=[("p", project)], trusted=True)
    assert [d.key for d in diags] == ["signal_bus.middleware[0]", "hooks.pre.bus"]
