"""A settings file with an error fails closed, naming ``file:line:column`` (decision 0304)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jidocode.cli.doctor import check_settings
from jidocode.shared.errors import InvalidInput, PermissionDenied
from jidocode.shared.policy.loader import PolicyCache, load_policy
from jidocode.shared.sandbox import effective_settings
from jidocode.shared.settings import load_settings, parse_settings_bytes, require_usable

TRAILING_COMMA = '{\n  "permissions": {\n    "deny": ["Read(private.txt)", "Bash"],\n  }\n}\n'


@pytest.fixture
def layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    for var in ("JIDO_LLM_MODEL", "JIDO_LLM_API_BASE", "JIDO_CODE_HOME"):
        monkeypatch.delenv(var, raising=False)
    root, home = tmp_path / "proj", tmp_path / "home"
    (root / ".jido").mkdir(parents=True)
    home.mkdir()
    return root, home


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("raw", "line", "column", "fragment"),
    [
        (TRAILING_COMMA.encode(), 4, 3, "trailing comma before '}'"),
        (b'{"deny": [1, 2,]}', 1, 16, "trailing comma before ']'"),
        (b'{\n  "a": 1\n  "b": 2\n}', 3, 3, "Expecting ',' delimiter"),
        (b'{\n "x": "\xff"}', 2, 8, "not valid UTF-8"),
        (b"\n  [1, 2]", 2, 3, "top level must be a JSON object"),
        (b'{"llm": {},\n "llm": {}}', 2, 2, "duplicate key 'llm'"),
    ],
)
def test_a_file_that_does_not_parse_is_located(raw: bytes, line: int, column: int, fragment: str) -> None:
    value, [diag] = parse_settings_bytes(raw, "s.json")
    assert value is None and diag.severity == "error"
    assert (diag.line, diag.column) == (line, column) and fragment in diag.problem
    assert str(diag).startswith(f"s.json:{line}:{column}: ")


def test_a_bom_does_not_move_the_column() -> None:
    _, [bom, diag] = parse_settings_bytes(b'\xef\xbb\xbf{"a": 1,}', "s.json")
    assert bom.severity == "warning" and (diag.line, diag.column) == (1, 9)


def test_a_key_with_a_wrong_type_is_located_at_the_key(layout: tuple[Path, Path]) -> None:
    root, home = layout
    bad = _write(root / ".jido" / "settings.json", '{\n  "permissions": {\n    "deny": "Bash"\n  }\n}\n')
    loaded = load_settings(root, jido_home=home, trusted=True)
    [diag] = loaded.broken
    assert (diag.file, diag.key, diag.line, diag.column) == (str(bad), "permissions.deny", 3, 5)
    assert diag.where == f"{bad}:3:5"


def test_a_section_that_is_not_an_object_is_located(layout: tuple[Path, Path]) -> None:
    _, home = layout
    _write(home / "settings.json", '{"sandbox": {"mode": "auto"},\n "llm": "gpt"}')
    [diag] = load_settings(None, jido_home=home).broken
    assert (diag.key, diag.line, diag.column) == ("llm", 2, 2)


def test_warnings_and_the_trust_store_do_not_break_the_settings(layout: tuple[Path, Path]) -> None:
    root, home = layout
    _write(root / ".jido" / "settings.json", json.dumps({"permissions": {"allow": ["Bash"]}, "zzz": 1}))
    _write(home / "trusted_projects.json", "{not json")
    loaded = load_settings(root, jido_home=home)
    assert loaded.trusted is False and loaded.diagnostics  # the allow is ignored, the store said broken
    assert loaded.broken == []
    assert require_usable(loaded, refused="x") is loaded.settings


@pytest.mark.parametrize("trusted", [True, False])
def test_the_issue_case_refuses_the_policy_trusted_or_not(layout: tuple[Path, Path], trusted: bool) -> None:
    root, home = layout
    bad = _write(root / ".jido" / "settings.json", TRAILING_COMMA)
    loaded = load_settings(root, jido_home=home, trusted=trusted)
    assert [d.where for d in loaded.broken] == [f"{bad}:4:3"]
    with pytest.raises(InvalidInput) as exc:
        require_usable(loaded, refused="every tool call of this project")
    assert exc.value.message.startswith("every tool call of this project is refused until its settings")
    assert f"{bad}:4:3: invalid JSON: trailing comma" in exc.value.message
    assert exc.value.details["reason"] == "settings_invalid"
    assert exc.value.details["files"] == [str(bad)]


def test_a_broken_global_file_refuses_every_project(layout: tuple[Path, Path], tmp_path: Path) -> None:
    root, home = layout
    other = tmp_path / "other"
    other.mkdir()
    bad = _write(home / "settings.json", '{"permissions": {"deny": ["Bash"]}')
    for project in (root, other):
        with pytest.raises(InvalidInput, match=f"{bad}:1:35: invalid JSON"):
            load_policy(str(project), jido_home=home)


def test_an_invalid_value_outside_permissions_refuses_too(layout: tuple[Path, Path]) -> None:
    root, home = layout
    _write(home / "settings.json", '{"tools": {"timeout_s": -1}}')
    with pytest.raises(InvalidInput, match=r"settings.json:1:12: tools.timeout_s: "):
        load_policy(str(root), jido_home=home)


def test_a_rule_that_does_not_parse_is_located(layout: tuple[Path, Path]) -> None:
    root, home = layout
    bad = _write(root / ".jido" / "settings.json", '{"permissions": {\n "deny": ["Read", "Bash(git:*"]}}')
    with pytest.raises(InvalidInput) as exc:
        load_policy(str(root), jido_home=home)
    assert f"{bad}:2:19: permissions.deny[1]: invalid permission rule 'Bash(git:*'" in exc.value.message
    assert exc.value.details["problems"][0]["line"] == 2


def test_the_cache_refuses_until_the_fix_and_the_next_call_works(layout: tuple[Path, Path]) -> None:
    root, home = layout
    cache = PolicyCache(home)
    cache.get("p1", str(root), ".jido")
    path = _write(root / ".jido" / "settings.json", TRAILING_COMMA)
    for _ in range(2):  # never cached while broken
        with pytest.raises(InvalidInput, match="trailing comma"):
            cache.get("p1", str(root), ".jido")
    path.write_text(TRAILING_COMMA.replace('"Bash"],', '"Bash"]'))
    policy, _ = cache.get("p1", str(root), ".jido")
    assert [r.raw for r in policy.deny] == ["Read(private.txt)", "Bash"]


def test_the_sandbox_mode_is_refused_not_weakened(layout: tuple[Path, Path]) -> None:
    root, home = layout
    _write(home / "settings.json", '{"sandbox": {"mode": "bubblewrap"},}')
    with pytest.raises(PermissionDenied, match="every sandboxed process of this project is refused"):
        effective_settings(str(root), jido_home=str(home))
    (home / "settings.json").write_text('{"sandbox": {"mode": "bubblewrap"}}')
    assert effective_settings(str(root), jido_home=str(home)).mode == "bubblewrap"


def test_doctor_fails_the_settings_check_with_the_errors_first(layout: tuple[Path, Path]) -> None:
    root, home = layout
    _write(home / "settings.json", json.dumps({"signal_bus": {"name": "other"}}))  # a warning
    bad = _write(root / ".jido" / "settings.json", TRAILING_COMMA)
    found = check_settings(str(root), jido_home=home)
    assert found["status"] == "fail" and "every tool call of this project is refused" in found["detail"]
    assert found["lines"][0] == f"error {bad}:4:3: invalid JSON: trailing comma before '}}'"
    assert found["lines"][1].startswith(f"warning {home / 'settings.json'}:1:17 [signal_bus.name]")
    assert [(e["line"], e["column"]) for e in found["errors"]] == [(4, 3)]
    assert check_settings(None, jido_home=home)["status"] == "warn"  # the global file alone is fine
