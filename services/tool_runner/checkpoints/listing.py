"""Which files of the work tree a checkpoint holds: git's own listing, run in the OS sandbox.

One sandboxed run (:func:`jidocode.shared.gitbox.run_sandboxed`) of two ``git ls-files``
listings against the shadow repository (``GIT_DIR``), the project as ``GIT_WORK_TREE`` and an
empty index: every file ``.gitignore`` does not exclude, then the ignored ones (a directory
collapsed to ``dir/``). The shadow repository is the sandbox's only writable place; the project is
only read. The project's ``.git`` is not the repository (its config, hooks and fsmonitor are never
read), and what git still reads from the work tree (``.gitignore`` files) names no program.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from jidocode.shared.errors import JidoError
from jidocode.shared.gitbox import git_env, run_sandboxed

__all__ = ["Listing", "list_files", "parse_listing"]

#: The shell of the sandboxed run (an absolute path: the environment program execs it).
_SHELL: Final = "/bin/sh"
#: Both listings, apart by one more NUL (no file is named with the empty string).
_SCRIPT: Final = (
    'git --no-pager -C "$1" ls-files -z --others --exclude-standard || exit 3; '
    "printf '\\0'; "
    'git --no-pager -C "$1" ls-files -z --others --ignored --exclude-standard --directory || exit 4'
)
_TIMEOUT_S: Final = 120.0


@dataclass(frozen=True)
class Listing:
    """The files to read, and the ignored paths (directories end with ``/``) to name."""

    files: tuple[str, ...]
    ignored: tuple[str, ...]
    #: Directories listed as one entry (a nested repository): never entered.
    nested: tuple[str, ...]


def parse_listing(out: bytes) -> Listing:
    """The :class:`Listing` in the output of :data:`_SCRIPT` (pure)."""
    first, sep, second = out.partition(b"\0\0") if not out.startswith(b"\0") else (b"", b"\0", out[1:])
    if not sep:
        first, second = out, b""
    names = [os.fsdecode(n) for n in first.split(b"\0") if n]
    files = tuple(n for n in names if not n.endswith("/"))
    nested = tuple(n for n in names if n.endswith("/"))
    ignored = tuple(os.fsdecode(n) for n in second.split(b"\0") if n)
    return Listing(files=files, ignored=ignored, nested=nested)


async def list_files(
    repo: str, root: str, *, source_env: Mapping[str, str], jido_home: str | None
) -> Listing:
    """The :class:`Listing` of the work tree ``root`` (raises :class:`JidoError` naming git's error)."""
    scan_index = os.path.join(repo, f"scan-{os.urandom(6).hex()}.index")  # never written: empty
    env = {"GIT_DIR": repo, "GIT_WORK_TREE": root, "GIT_INDEX_FILE": scan_index}
    argv = [*git_env(env=env), _SHELL, "-c", _SCRIPT, "sh", root]
    run = await run_sandboxed(
        argv,
        root=repo,
        read_only=(root,),
        stdin=None,
        timeout_s=_TIMEOUT_S,
        source_env=source_env,
        jido_home=jido_home,
        what="the checkpoint store",
    )
    if run.code != 0:
        raise JidoError(
            f"the checkpoint store could not list the files of {root}: git said {run.err[:500]!r}",
            error_type="checkpoint_failed",
            details={"code": run.code},
        )
    return parse_listing(run.out)
