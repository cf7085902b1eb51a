"""A small disk for storage tests: a tmpfs of a chosen size mounted on a test's folder.

Mounting needs root (or CAP_SYS_ADMIN): elsewhere the test is skipped with the reason.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["fill", "small_disk"]


@contextlib.contextmanager
def small_disk(where: Path, size: str) -> Iterator[Path]:
    """``where`` as a tmpfs of ``size`` (``64m``, ``2g``) for the block; skip when it cannot be mounted."""
    where.mkdir(parents=True, exist_ok=True)
    mount = shutil.which("mount")
    if mount is None or os.geteuid() != 0:
        pytest.skip("a small disk needs `mount` as root (a tmpfs of a chosen size)")
    made = subprocess.run(
        [mount, "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode(errors='replace').strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(disk: Path, leave: int = 0) -> Path:
    """Fill ``disk`` with one file, leaving about ``leave`` bytes free (``0``: to the last byte it
    takes); the file (delete it to free the space)."""
    filler = disk / "filler"
    free = shutil.disk_usage(disk).free
    with filler.open("ab") as out:
        if leave:
            out.write(b"\0" * max(0, free - leave))
            return filler
        with contextlib.suppress(OSError):  # ENOSPC: the disk is full
            while True:
                out.write(b"\0" * (1 << 20))
                out.flush()
    return filler
