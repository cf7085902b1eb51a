"""Validation of what ``start_project`` is given: a root directory and a data dir name."""

from __future__ import annotations

import os
from pathlib import PurePosixPath

from jidocode.shared.errors import InvalidInput, NotFound

__all__ = ["validate_data_dir", "validate_root"]


def validate_root(root_path: str) -> str:
    """The realpath of ``root_path`` if it is an existing directory; a clear error otherwise.

    The engine runs in its own process and working directory, so relative
    paths are refused: the client resolves them first.
    """
    if not isinstance(root_path, str) or not root_path.strip():
        raise InvalidInput(
            "root_path is empty: give the project's directory", details={"root_path": root_path}
        )
    if "\x00" in root_path:
        raise InvalidInput("root_path contains a NUL byte", details={"root_path": root_path})
    if not os.path.isabs(root_path):
        raise InvalidInput(
            f"root_path {root_path!r} is relative: send an absolute path", details={"root_path": root_path}
        )
    real = os.path.realpath(root_path)
    if not os.path.exists(real):
        raise NotFound(f"project root {root_path!r} does not exist", details={"root_path": root_path})
    if not os.path.isdir(real):
        raise InvalidInput(
            f"project root {root_path!r} is a file, not a directory",
            details={"root_path": root_path, "realpath": real},
        )
    if real == "/":
        raise InvalidInput("the filesystem root cannot be a project", details={"root_path": root_path})
    return real


def validate_data_dir(data_dir: str) -> str:
    """A data dir is one relative path inside the root, ``.jido`` by default."""
    pure = PurePosixPath(data_dir)
    if not data_dir or pure.is_absolute() or ".." in pure.parts or "\x00" in data_dir:
        raise InvalidInput(
            f"data_dir {data_dir!r} must be a relative path inside the project root",
            details={"data_dir": data_dir},
        )
    return str(pure)
