"""No two classes of the tree share the names the issue 27 review found paired.

Each of these names meant two different classes in two packages (the bus command and the
reducer's intent, the catalogue's spec and the LLM port's, …); each now names one, and the
other says which it is.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("shared", "services", "client", "cli")
#: Once paired (the class kept the name lives in ``shared/events``, the conversation service
#: or the SDK); the other of each pair was renamed: ``RunToolIntent``, ``AssetRuntime``,
#: ``LlmToolSpec``, ``LlmTokenUsage``, ``CommandAsset``, ``AssetToolPort``.
ONCE = ("RunTool", "Runtime", "ToolSpec", "LlmTokenUsage", "Command", "ToolPort", "SlashCommand")


def _classes() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for folder in FOLDERS:
        for file in sorted((ROOT / folder).rglob("*.py")):
            if "__pycache__" in file.parts:
                continue
            tree = ast.parse(file.read_text(encoding="utf-8"), filename=str(file))
            for node in tree.body:
                if isinstance(node, ast.ClassDef):
                    found.setdefault(node.name, []).append(file.relative_to(ROOT).as_posix())
    return found


CLASSES = _classes()


@pytest.mark.parametrize("name", ONCE)
def test_the_name_means_one_class(name: str) -> None:
    assert len(CLASSES.get(name, [])) == 1, f"class {name} is defined in {CLASSES.get(name)}"
