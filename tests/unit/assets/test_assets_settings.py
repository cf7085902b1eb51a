"""settings.json: the model, the layer merge and the diagnostics."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jidocode.shared.settings import (
    MAX_SETTINGS_BYTES,
    HookSettings,
    Settings,
    deep_merge,
    load_settings,
    merge_layers,
    parse_settings_bytes,
    settings_files,
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("JIDO_LLM_MODEL", "JIDO_LLM_API_BASE", "JIDO_CODE_HOME"):
        monkeypatch.delenv(var, raising=False)


def _write(path: Path, value: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value) if not isinstance(value, str) else value, encoding="utf-8")
    return path


SEED_SETTINGS: dict[str, Any] = {
    "$schema": "https://jidocode.dev/schemas/settings.json",
    "version": "2.0.0",
    "signal_bus": {"name": "jido_code_bus", "middleware": [{"module": "X", "opts": {"level": "debug"}}]},
    "permissions": {
        "allow": ["Bash(git:*)", "Read", "Write", "Edit"],
        "deny": ["Bash(rm -rf:*)"],
        "ask": ["Bash(npm:*)"],
    },
    "hooks": {
        "pre": {
            "enabled": True,
            "signal_type": "skill/pre",
            "bus": ":jido_code_bus",
            "data_template": {"phase": "pre", "skill": "{{skill_name}}"},
        },
        "post": {"enabled": True, "signal_type": "skill/post", "bus": ":jido_code_bus", "data_template": {}},
    },
}


def test_defaults_without_any_file(tmp_path: Path) -> None:
    loaded = load_settings(tmp_path / "proj", jido_home=tmp_path / "home")
    assert loaded.settings == Settings()
    assert loaded.diagnostics == []
    assert loaded.files == []
    assert loaded.settings.permissions.default == "deny"
    assert loaded.settings.tools.output_cap_bytes == 262144
    assert loaded.settings.hooks.pre is None


def test_seed_settings_load(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _write(home / "settings.json", SEED_SETTINGS)
    loaded = load_settings(None, jido_home=home)
    # the seed's Logger middleware does not run (NATS is the one bus): said, not ignored
    assert [(d.key, d.severity) for d in loaded.diagnostics] == [("signal_bus.middleware[0]", "warning")]
    s = loaded.settings
    assert s.version == "2.0.0"
    assert s.permissions.deny == ["Bash(rm -rf:*)"]
    assert s.hooks.pre is not None and s.hooks.pre.signal_type == "skill/pre"
    assert s.hooks.pre.data == {"phase": "pre", "skill": "{{skill_name}}"}
    assert s.signal_bus["name"] == "jido_code_bus"
    assert loaded.files == [str(home / "settings.json")]


def test_project_overrides_global_by_key(tmp_path: Path) -> None:
    home, root = tmp_path / "home", tmp_path / "proj"
    _write(
        home / "settings.json",
        {"llm": {"model": "openai/a", "max_turns": 5}, "permissions": {"allow": ["Read"]}},
    )
    _write(
        root / ".jido_code" / "settings.json", {"llm": {"max_turns": 7}, "permissions": {"allow": ["Edit"]}}
    )
    _write(root / ".jido" / "settings.json", {"llm": {"temperature": 0.5}})
    loaded = load_settings(root, jido_home=home, trusted=True)
    assert loaded.diagnostics == []
    assert loaded.settings.llm.model == "openai/a"
    assert loaded.settings.llm.max_turns == 7
    assert loaded.settings.llm.temperature == 0.5
    assert loaded.settings.permissions.allow == ["Edit"]  # lists are replaced
    assert len(loaded.files) == 3


def test_data_dir_layer_wins_over_jido_code(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    _write(root / ".jido_code" / "settings.json", {"llm": {"model": "a"}})
    _write(root / "data" / "settings.json", {"llm": {"model": "b"}})
    loaded = load_settings(root, jido_home=tmp_path / "home", data_dir="data", trusted=True)
    assert loaded.settings.llm.model == "b"


def test_data_dir_jido_code_read_once(tmp_path: Path) -> None:
    files = settings_files(tmp_path, jido_home=tmp_path / "h", data_dir=".jido_code")
    assert files == [tmp_path / "h" / "settings.json", tmp_path / ".jido_code" / "settings.json"]


def test_jido_code_home_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "elsewhere"
    _write(home / "settings.json", {"llm": {"model": "m"}})
    monkeypatch.setenv("JIDO_CODE_HOME", str(home))
    assert load_settings(None).settings.llm.model == "m"


def test_env_overrides_applied_last(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "proj"
    _write(root / ".jido" / "settings.json", {"llm": {"model": "file", "api_base": "http://file"}})
    monkeypatch.setenv("JIDO_LLM_MODEL", "env/model")
    monkeypatch.setenv("JIDO_LLM_API_BASE", "http://env")
    llm = load_settings(root, jido_home=tmp_path / "home").settings.llm
    assert (llm.model, llm.api_base) == ("env/model", "http://env")


def test_bad_key_falls_back_to_lower_layer(tmp_path: Path) -> None:
    home, root = tmp_path / "home", tmp_path / "proj"
    _write(home / "settings.json", {"tools": {"timeout_s": 10}})
    bad = _write(root / ".jido" / "settings.json", {"tools": {"timeout_s": "soon", "output_cap_bytes": 4096}})
    loaded = load_settings(root, jido_home=home)
    assert loaded.settings.tools.timeout_s == 10
    assert loaded.settings.tools.output_cap_bytes == 4096
    [diag] = loaded.diagnostics
    assert diag.file == str(bad) and diag.key == "tools.timeout_s" and diag.severity == "error"
    assert diag.problem


def test_limit_violations_are_diagnostics(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    _write(
        root / ".jido" / "settings.json",
        {"llm": {"max_turns": 0, "temperature": 9}, "tools": {"max_concurrent_per_project": -1}},
    )
    loaded = load_settings(root, jido_home=tmp_path / "home")
    assert {d.key for d in loaded.diagnostics} == {
        "llm.max_turns",
        "llm.temperature",
        "tools.max_concurrent_per_project",
    }
    assert loaded.settings.llm.max_turns == 20


def test_invalid_json_file_keeps_other_layers(tmp_path: Path) -> None:
    home, root = tmp_path / "home", tmp_path / "proj"
    _write(home / "settings.json", {"llm": {"model": "global"}})
    bad = _write(root / ".jido" / "settings.json", "{not json")
    loaded = load_settings(root, jido_home=home)
    assert loaded.settings.llm.model == "global"
    [diag] = loaded.diagnostics
    assert diag.file == str(bad) and diag.key is None and "invalid JSON" in diag.problem


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        (b"\xff\xfe{}", "UTF-8"),
        (b"[1, 2]", "object"),
        (b'{"llm": {}, "llm": {}}', "duplicate key"),
        (b"[" * 100_000 + b"]" * 100_000, "nested"),
    ],
)
def test_bad_files(raw: bytes, fragment: str) -> None:
    value, diags = parse_settings_bytes(raw, "f.json")
    assert value is None
    assert any(fragment in d.problem for d in diags)


def test_bom_is_a_warning() -> None:
    value, diags = parse_settings_bytes(b'\xef\xbb\xbf{"version": "1"}', "f.json")
    assert value == {"version": "1"}
    assert [d.severity for d in diags] == ["warning"]


def test_size_cap_checked_before_reading(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    path = root / ".jido" / "settings.json"
    path.parent.mkdir(parents=True)
    path.write_bytes(b" " * (MAX_SETTINGS_BYTES + 1))
    loaded = load_settings(root, jido_home=tmp_path / "home")
    assert "larger than" in loaded.diagnostics[0].problem
    value, diags = parse_settings_bytes(b" " * (MAX_SETTINGS_BYTES + 1), "x")
    assert value is None and diags


def test_empty_file_is_empty_layer() -> None:
    assert parse_settings_bytes(b"  \n", "f") == ({}, [])


def test_hooks_merge_and_incomplete_hook_dropped() -> None:
    settings_, diags = merge_layers(
        [
            ("g", {"hooks": {"pre": {"signal_type": "skill/pre", "data": {"a": 1}}}}),
            ("p", {"hooks": {"pre": {"enabled": False}, "post": {"enabled": True}, "mid": {}}}),
        ]
    )
    assert settings_.hooks.pre == HookSettings(enabled=False, signal_type="skill/pre", data={"a": 1})
    assert settings_.hooks.post is None
    keys = {(d.file, d.key, d.severity) for d in diags}
    assert ("p", "hooks.post", "error") in keys
    assert ("p", "hooks.mid", "warning") in keys


def test_hook_null_in_project_disables() -> None:
    s, diags = merge_layers(
        [("g", {"hooks": {"pre": {"signal_type": "x"}}}), ("p", {"hooks": {"pre": None}})]
    )
    assert s.hooks.pre is None and diags == []


def test_sections_must_be_objects_and_unknown_keys_warn() -> None:
    s, diags = merge_layers(
        [("p", {"llm": 3, "hooks": [], "permissions": {"allow": ["Read"], "typo": 1}, "x": 1})]
    )
    assert s.permissions.allow == ["Read"]
    assert {(d.key, d.severity) for d in diags} == {
        ("llm", "error"),
        ("hooks", "error"),
        ("permissions.typo", "warning"),
    }


def test_permissions_default_literal() -> None:
    s, diags = merge_layers([("p", {"permissions": {"default": "allow"}})])
    assert s.permissions.default == "deny" and diags[0].key == "permissions.default"
    s, diags = merge_layers([("p", {"permissions": {"default": "ask"}})])
    assert s.permissions.default == "ask" and diags == []


def test_deep_merge() -> None:
    assert deep_merge({"a": {"b": 1, "c": [1]}, "d": 1}, {"a": {"c": [2]}, "e": 2}) == {
        "a": {"b": 1, "c": [2]},
        "d": 1,
        "e": 2,
    }


def test_models_are_frozen() -> None:
    s = Settings()
    with pytest.raises(Exception):  # noqa: B017 - pydantic raises ValidationError on frozen assignment
        s.data_dir = "x"  # type: ignore[misc]


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=8,
)
_keys = st.sampled_from(
    ["version", "signal_bus", "permissions", "hooks", "llm", "tools", "data_dir", "$schema"]
)


@given(st.lists(st.dictionaries(_keys, _json, max_size=6), max_size=3))
@settings(max_examples=100, deadline=None)
def test_merge_never_raises(layers: list[dict[str, Any]]) -> None:
    s, diags = merge_layers([(f"f{i}", layer) for i, layer in enumerate(layers)])
    assert isinstance(s, Settings)
    assert all(d.file.startswith("f") or d.file == "<merged>" for d in diags)


@given(st.binary(max_size=512))
@settings(max_examples=200, deadline=None)
def test_parse_never_raises(raw: bytes) -> None:
    value, _ = parse_settings_bytes(raw, "f")
    if value is not None:
        merge_layers([("f", value)])


def test_hook_signal_type_must_be_publishable() -> None:
    s, diags = merge_layers([("p", {"hooks": {"pre": {"signal_type": "skill pre!"}}})])
    assert s.hooks.pre is None
    assert [d.key for d in diags] == ["hooks.pre"] and "signal_type" in diags[0].problem
    ok, diags = merge_layers([("p", {"hooks": {"pre": {"signal_type": "skill/pdf_processor/pre"}}})])
    assert ok.hooks.pre is not None and diags == []
