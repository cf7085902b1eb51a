"""Builders shared by the PRD core tests."""

from __future__ import annotations

from typing import Any


def story(sid: str, **kw: Any) -> dict[str, Any]:
    """A story as ``prd.json`` spells it."""
    return {"id": sid, "title": f"story {sid}", **kw}


def doc(*stories: dict[str, Any], **kw: Any) -> dict[str, Any]:
    """A whole ``prd.json`` document."""
    return {"version": 1, "name": "auth", "userStories": list(stories), **kw}
