"""SKILL.md parsing: seed 001 frontmatter, the public Agent Skills format, bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jidocode.services.asset_loader.loaders.skill import parse_skill

SEED_001 = Path("/work/shared/seeds/001_12363af2fb24facd.txt")


def seed_skill_md() -> str:
    """The pdf-processor SKILL.md exactly as seed 001 writes it (or a copy when the seed is absent)."""
    if SEED_001.is_file():
        seed = SEED_001.read_text(encoding="utf-8")
        start = seed.index("```yaml\n---\nname: pdf-processor") + len("```yaml\n")
        end = seed.index("- Form filling via action routes") + len("- Form filling via action routes")
        return seed[start:end] + "\n"
    return PDF_SKILL


PDF_SKILL = """---
name: pdf-processor
description: Extract text, tables, and forms from PDF documents.
version: 1.2.0
allowed-tools: Read, Write, Bash(python:*)

jido:
  skill_module: JidoCode.Skills.PdfProcessor

  actions:
    - JidoCode.Actions.ExtractPdfText
    - JidoCode.Actions.ExtractPdfTables
    - JidoCode.Actions.FillPdfForm

  router:
    - "pdf/extract/text": ExtractPdfText
    - "pdf/extract/tables": ExtractPdfTables
    - "pdf/form/fill": FillPdfForm

  hooks:
    pre:
      enabled: true
      signal_type: "skill/pdf_processor/pre"
      bus: ":jido_code_bus"
      data:
        source: "skill_frontmatter"
        skill: "{{skill_name}}"
        route: "{{route}}"
    post:
      enabled: true
      signal_type: "skill/pdf_processor/post"
      bus: ":jido_code_bus"
      data:
        source: "skill_frontmatter"
        skill: "{{skill_name}}"
        route: "{{route}}"
        status: "{{status}}"
---

# PDF Processing Skill

- Form filling via action routes
"""


def _parse(text: str | bytes, folder: str = "pdf-processor", **kw: object):  # type: ignore[no-untyped-def]
    raw = text.encode() if isinstance(text, str) else text
    return parse_skill(raw, path=f"/l/skills/{folder}/SKILL.md", folder=folder, layer="project", **kw)  # type: ignore[arg-type]


def test_seed_skill() -> None:
    skill, diags = _parse(seed_skill_md())
    # Without scripts/ the seed's action modules have no Python equivalent: each is a warning.
    assert [(d.key, d.severity) for d in diags] == [(f"jido.actions[{i}]", "warning") for i in range(3)]
    assert "has no scripts/extract_pdf_text.py in the skill folder" in diags[0].problem
    assert skill is not None
    assert skill.name == "pdf-processor"
    assert skill.version == "1.2.0"
    assert skill.allowed_tools == ["Read", "Write", "Bash(python:*)"]
    assert skill.skill_module == "JidoCode.Skills.PdfProcessor"
    assert [a.name for a in skill.actions] == ["ExtractPdfText", "ExtractPdfTables", "FillPdfForm"]
    assert skill.actions[0].module == "JidoCode.Actions.ExtractPdfText"
    assert [(r.path, r.action) for r in skill.router] == [
        ("pdf/extract/text", "ExtractPdfText"),
        ("pdf/extract/tables", "ExtractPdfTables"),
        ("pdf/form/fill", "FillPdfForm"),
    ]
    assert skill.hooks.pre is not None and skill.hooks.pre.signal_type == "skill/pdf_processor/pre"
    assert skill.hooks.post is not None and skill.hooks.post.data["status"] == "{{status}}"
    assert skill.body.startswith("# PDF Processing Skill")
    action = skill.action_for("pdf/extract/text")
    assert action is not None and action.name == "ExtractPdfText" and action.tool_name == "ExtractPdfText"
    assert skill.action_for("nope") is None


def test_public_agent_skill_with_extra_fields_and_scripts() -> None:
    text = """---
name: webapp-testing
description: Toolkit for interacting with and testing local web applications using Playwright.
license: Complete terms in LICENSE.txt
metadata:
  author: someone
  tags: [testing, web]
---

# Web Application Testing

Run `python scripts/with_server.py --help` first.
"""
    skill, diags = _parse(text, folder="webapp-testing", scripts=["scripts/with_server.py"])
    assert diags == []
    assert skill is not None
    assert skill.extra == {
        "license": "Complete terms in LICENSE.txt",
        "metadata": {"author": "someone", "tags": ["testing", "web"]},
    }
    assert skill.scripts == ["scripts/with_server.py"]
    assert skill.router == [] and skill.hooks.pre is None
    assert "with_server.py" in skill.body


def test_action_objects_with_tool() -> None:
    text = """---
name: lint
description: Lint the code.
jido:
  actions:
    - {name: RunRuff, tool: bash, args: {command: "ruff check {{path}}"}}
  router:
    lint/run: RunRuff
---
"""
    skill, diags = _parse(text, folder="lint")
    assert diags == [] and skill is not None
    action = skill.action_for("lint/run")
    assert (
        action is not None
        and action.tool_name == "bash"
        and action.args == {"command": "ruff check {{path}}"}
    )


def test_hook_disabled_without_signal_type() -> None:
    text = "---\nname: a\ndescription: d\njido:\n  hooks:\n    pre: {enabled: false}\n---\n"
    skill, diags = _parse(text, folder="a")
    assert diags == [] and skill is not None
    assert skill.hooks.pre is not None and skill.hooks.pre.enabled is False


@pytest.mark.parametrize(
    ("text", "folder", "key", "fragment"),
    [
        ("---\nname: 12\ndescription: d\n---\n", "12", "name", "string"),
        ("---\nname: [a]\ndescription: d\n---\n", "a", "name", "string"),
        ("---\nname: Bad_Name\ndescription: d\n---\n", "Bad_Name", "name", "slug"),
        ("---\nname: other\ndescription: d\n---\n", "mine", "name", "folder"),
        ("---\nname: a\ndescription: [x]\n---\n", "a", "description", "string"),
        ("---\nname: a\nname: b\n---\n", "a", "frontmatter", "duplicate"),
        ("---\nname: a\ndescription: d\njido: 3\n---\n", "a", "jido", "mapping"),
        ("no frontmatter at all", "a", None, "frontmatter"),
    ],
)
def test_rejected(text: str, folder: str, key: str | None, fragment: str) -> None:
    skill, diags = _parse(text, folder=folder)
    assert skill is None
    assert any(d.key == key and fragment in d.problem and d.file.endswith("SKILL.md") for d in diags), diags


@pytest.mark.parametrize(
    ("jido", "key"),
    [
        ("router: [{'bad route!': X}]", "jido.router"),
        ("router: [{a: X}, {a: Y}]", "jido.router.a"),
        ("router: [[1]]", "jido.router[0]"),
        ("actions: [3]", "jido.actions[0]"),
        ("actions: [{tool: bash}]", "jido.actions[0]"),
        ("actions: [A]\n  router: {x: B}", "jido.router.x"),
        ("hooks: {pre: {enabled: true}}", "jido.hooks.pre"),
        ("hooks: {mid: {signal_type: x}}", "jido.hooks.mid"),
        ("hooks: {pre: 3}", "jido.hooks.pre"),
    ],
)
def test_jido_block_problems_keep_the_skill(jido: str, key: str) -> None:
    skill, diags = _parse(f"---\nname: a\ndescription: d\njido:\n  {jido}\n---\n", folder="a")
    assert skill is not None
    assert any(d.key == key for d in diags), diags


def test_a_hook_bus_other_than_nats_is_a_warning_not_ignored() -> None:
    one_bus = "hooks: {pre: {signal_type: s/pre, bus: ':jido_code_bus'}}"
    skill, diags = _parse(f"---\nname: a\ndescription: d\njido:\n  {one_bus}\n---\n", folder="a")
    assert skill is not None and diags == []
    other = "hooks: {pre: {signal_type: s/pre, bus: ':elsewhere'}}"
    skill, diags = _parse(f"---\nname: a\ndescription: d\njido:\n  {other}\n---\n", folder="a")
    assert skill is not None and skill.hooks.pre is not None  # the hook still runs, on NATS
    [diag] = diags
    assert (diag.key, diag.severity) == ("jido.hooks.pre.bus", "warning") and "':elsewhere'" in diag.problem


def test_missing_description_is_a_warning() -> None:
    skill, diags = _parse("---\nname: a\n---\nbody", folder="a")
    assert skill is not None and skill.description == ""
    assert [(d.key, d.severity) for d in diags] == [("description", "warning")]


def test_bom_and_numeric_version() -> None:
    skill, diags = _parse(b"\xef\xbb\xbf---\nname: a\ndescription: d\nversion: 2\n---\n", folder="a")
    assert skill is not None and skill.version == "2"
    assert [d.severity for d in diags] == ["warning"]


def test_non_utf8() -> None:
    skill, diags = _parse(b"---\nname: a\xff\n---\n", folder="a")
    assert skill is None and "UTF-8" in diags[0].problem


@given(st.binary(max_size=400))
@settings(max_examples=300, deadline=None)
def test_never_crashes_on_bytes(raw: bytes) -> None:
    _parse(raw, folder="a")


@given(st.text(max_size=300))
@settings(max_examples=300, deadline=None)
def test_never_crashes_on_frontmatter(text: str) -> None:
    _parse(f"---\n{text}\n---\nbody", folder="a")


def test_hook_signal_type_checked() -> None:
    skill, diags = _parse(
        "---\nname: a\ndescription: d\njido:\n  hooks:\n    pre: {signal_type: 'bad type*'}\n---\n",
        folder="a",
    )
    assert skill is not None and skill.hooks.pre is None
    assert diags[0].key == "jido.hooks.pre" and "signal_type" in diags[0].problem
