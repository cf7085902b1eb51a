"""The bubblewrap command line of one call (pure: every fact about the disk is an argument)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Final, Literal

__all__ = ["Mount", "bwrap_argv"]

#: Order of mounts at the same depth: what hides comes first, then what the command writes,
#: then what it may only read (a read-only bind over a writable parent must come after it).
_RANK: Final[dict[str, int]] = {"tmpfs": 0, "dir": 0, "symlink": 0, "hide-file": 1, "rw": 2, "ro": 3}


@dataclass(frozen=True, slots=True)
class Mount:
    """One mount of the sandbox at ``dest``.

    ``tmpfs``: an empty directory; ``dir``: a directory created in a tmpfs;
    ``symlink``: a symbolic link to ``target`` (``/bin -> usr/bin``);
    ``hide-file``: ``/dev/null`` over a file; ``rw`` / ``ro``: a bind of
    ``dest`` itself (or of ``source`` when given: the egress proxy's socket), or of the open
    directory ``fd`` when given (the source is then pinned: a symlink swapped in after the check
    cannot redirect it).
    """

    kind: Literal["tmpfs", "dir", "symlink", "hide-file", "rw", "ro"]
    dest: str
    fd: int | None = None
    target: str = ""
    source: str = ""

    def args(self) -> list[str]:
        if self.kind == "symlink":
            return ["--symlink", self.target, self.dest]
        if self.kind in ("tmpfs", "dir"):
            return [f"--{self.kind}", self.dest]
        if self.kind == "hide-file":
            return ["--ro-bind", "/dev/null", self.dest]
        flag = "--bind" if self.kind == "rw" else "--ro-bind"
        if self.fd is not None:
            return [f"{flag}-fd", str(self.fd), self.dest]
        return [flag, self.source or self.dest, self.dest]


def _order(m: Mount) -> tuple[int, int]:
    # ancestors before descendants: a mount hides whatever an earlier one put below it
    return (len(PurePosixPath(m.dest).parts), _RANK[m.kind])


def bwrap_argv(
    argv: Sequence[str],
    *,
    root: str,
    mounts: Sequence[Mount],
    env: Mapping[str, str],
    network: bool = False,
    bwrap: str = "bwrap",
    disable_userns: bool = True,
    info_fd: int | None = None,
    chdir: str | None = None,
) -> list[str]:
    """``bwrap …  -- argv``: new user, mount, pid, ipc, uts, cgroup and (unless ``network``) net namespaces.

    The root filesystem is an empty tmpfs, made read-only once everything is
    mounted: the command sees only what ``mounts`` bind (the system's
    toolchain, the additional directories; never another project);
    ``/dev``, ``/proc``, ``/tmp`` and ``/run`` are the sandbox's own; ``root``
    is bound read-write; ``mounts`` (system directories, home, hidden paths,
    pinned and protected paths) follow, ancestors first.
    Capabilities are dropped (bubblewrap run by root would keep them inside its
    user namespace, enough to unmount a protected path) and, where bubblewrap
    supports it, no further user namespace can be created inside. The command
    runs in a session of its own and dies with bubblewrap; when it exits, the
    pid namespace ends and every process it left behind is killed. With
    ``info_fd``, bubblewrap writes there the pid of the namespace's first
    process (``child-pid``), whose death ends the namespace: see
    :class:`jidocode.shared.sandbox.Namespace`.
    """
    out = [bwrap]
    if info_fd is not None:
        out += ["--info-fd", str(info_fd)]
    out.append("--unshare-all")
    if network:
        out.append("--share-net")
    out += ["--unshare-user"]
    if disable_userns:
        out.append("--disable-userns")
    out += ["--cap-drop", "ALL", "--die-with-parent", "--new-session"]
    out += ["--dev", "/dev", "--proc", "/proc"]
    layers = [Mount("tmpfs", "/tmp"), Mount("tmpfs", "/run"), Mount("rw", root), *mounts]
    for mount in sorted(layers, key=_order):
        out += mount.args()
    if network:
        # a resolv.conf that points into /run (systemd-resolved) keeps working
        out += ["--ro-bind-try", "/run/systemd/resolve", "/run/systemd/resolve"]
    # the empty root itself: nothing may be created beside the mounts
    out += ["--remount-ro", "/"]
    out += ["--chdir", chdir or root, "--clearenv"]
    for key, value in env.items():
        out += ["--setenv", key, value]
    out += ["--", *argv]
    return out
