"""The built-in tools as the model sees them: input models and specs (no execution).

- :mod:`.inputs`: one pydantic input model per built-in tool
- :mod:`.specs`: the one declaration of each (name, description, models, read/write class,
  permission name, path argument); :func:`builtin_specs` derives the catalog's specs

The code that runs them is the tool runner's (``services/tool_runner/tools/``).
"""

from __future__ import annotations

from .inputs import (
    BashInput,
    EditFileInput,
    GlobInput,
    GrepInput,
    ListDirInput,
    ReadFileInput,
    ToolInput,
    WriteFileInput,
)
from .specs import BUILTIN_SPECS, BuiltinSpec, builtin_specs

__all__ = [
    "BUILTIN_SPECS",
    "BashInput",
    "BuiltinSpec",
    "EditFileInput",
    "GlobInput",
    "GrepInput",
    "ListDirInput",
    "ReadFileInput",
    "ToolInput",
    "WriteFileInput",
    "builtin_specs",
]
