"""`jidocode tools list` prints a table; `--json` the specs (issue 25, point 7), as a real process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jidocode.shared.config import Config
from tests.integration.tools.support import RunnerFactory, write_settings
from tests.integration.tools.test_tools_cli import jidocode


def _rows(out: str) -> dict[str, list[str]]:
    """The table's rows by tool name: the cells of each row's first line (split on runs of spaces)."""
    rows: dict[str, list[str]] = {}
    for line in out.splitlines()[1:]:
        cells = [c for c in line.strip().split("  ") if c.strip()]
        if cells and cells[0].strip().isidentifier():
            rows[cells[0].strip()] = [c.strip() for c in cells]
    return rows


async def test_list_prints_a_table_of_the_tools_and_the_hidden_ones_on_stderr(
    stack: Config, runners: RunnerFactory, tmp_path: Path
) -> None:
    await runners()
    write_settings(tmp_path, {"permissions": {"allow": ["Read"], "ask": ["Bash(ls:*)"]}})

    code, out, err = await jidocode(stack, "tools", "list", str(tmp_path))
    assert code == 0, err
    with pytest.raises(json.JSONDecodeError):
        json.loads(out)  # a table, not JSON
    header = out.splitlines()[0].split()
    assert header == ["tool", "from", "access", "description"]
    rows = _rows(out)
    assert set(rows) == {"read_file", "list_dir", "glob", "grep", "bash", "web_fetch"}
    assert rows["read_file"][1:3] == ["built-in", "reads"]
    assert rows["bash"][1] == "built-in" and rows["bash"][2].startswith("changes")
    assert "2 of 8 tools hidden" in err and "write_file, edit_file" in err

    code, out, err = await jidocode(stack, "tools", "list", str(tmp_path), "--all")
    assert code == 0, err
    assert out.splitlines()[0].split() == ["tool", "from", "access", "policy", "description"]
    rows = _rows(out)
    assert rows["write_file"][3] == "hidden" and rows["read_file"][3] == "shown"
    assert "hidden by the policy" not in err  # --all lists them: no note


async def test_list_json_prints_the_specs_the_model_sees(
    stack: Config, runners: RunnerFactory, tmp_path: Path
) -> None:
    await runners()
    write_settings(tmp_path, {"permissions": {"allow": ["Read"]}})

    code, out, err = await jidocode(stack, "tools", "list", str(tmp_path), "--json")
    assert code == 0, err
    specs = json.loads(out)
    assert {s["name"] for s in specs} == {"read_file", "list_dir", "glob", "grep", "web_fetch"}
    read = next(s for s in specs if s["name"] == "read_file")
    assert read["input_schema"]["properties"]["path"] and read["safety"]["read_only"] is True

    code, out, _ = await jidocode(stack, "tools", "list", str(tmp_path), "--json", "--all")
    assert code == 0
    assert {"write_file", "bash"} <= {s["name"] for s in json.loads(out)}
