"""Plain JSON values from pydantic models, for replies and for printing."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

__all__ = ["to_jsonable"]


def to_jsonable(value: Any) -> Any:
    """Pydantic models (and lists/dicts of them) as plain JSON values."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: to_jsonable(v) for k, v in value.items()}
    return value
