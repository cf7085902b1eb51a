"""Asset names: one rule for skills, commands and workflows."""

from __future__ import annotations

import pytest

from jidocode.services.asset_loader.text import is_slug, name_problem


@pytest.mark.parametrize("bad", ["pdf\n", "Pdf", "pdf--x", "-pdf", "", "a" * 65, "pdf x", "pdf_x"])
def test_not_slugs(bad: str) -> None:
    assert not is_slug(bad)
    assert "not a slug" in (name_problem(bad, bad, "folder") or "")


def test_name_rules() -> None:
    assert name_problem("pdf-tools", "pdf-tools", "folder") is None
    assert name_problem(3, "x", "folder") == "name must be a string, got int"
    assert name_problem("pdf", "other", "file name") == "name 'pdf' does not match its file name 'other'"
