"""One sandboxed launch: the command line, environment and clean-up of a call (the I/O around the plans)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import stat
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Final

from jidocode.shared.errors import PermissionDenied

from ._bwrap import Mount, bwrap_argv
from ._detect import Capabilities, detect
from ._egress import SOCKET_INSIDE, Egress, bridge_argv, bridge_python, proxy_env
from ._env import sandbox_env
from ._guard import GUARD, Ticket, TooLarge
from ._launcher import spec_argv
from ._mode import Choice, choose, effective_settings
from ._paths import (
    PROC_READABLE,
    hidden_at,
    link_files,
    protected_rels,
    read_cover,
    readable_files,
    runtime_hidden,
    system_readable,
    within,
)

__all__ = ["LAUNCHER", "Launch", "prepare"]

#: The Landlock launcher, run as a script by the interpreter of this process.
LAUNCHER: Final = str(Path(__file__).with_name("_launcher.py"))
#: Device files a Landlock-sandboxed command may write.
_DEV_RW: Final = ("/dev/null", "/dev/zero", "/dev/full", "/dev/tty")
#: Device files a Landlock-sandboxed command may read.
_DEV_READ: Final = ("/dev/urandom", "/dev/random")
_PATH_FLAGS: Final = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class Launch:
    """What to start for one call, and what to undo after it (:meth:`close`, always)."""

    choice: Choice
    argv: list[str]
    env: dict[str, str]
    cwd: str
    #: Descriptors the child must inherit (the pinned sources of bubblewrap's binds).
    pass_fds: tuple[int, ...] = ()
    root: str = ""
    guarded: bool = False
    scratch: str | None = None
    #: Protected paths the guard had to put back, while the call ran or after it.
    repaired: list[str] = field(default_factory=list)
    #: Under bubblewrap: the read end of its ``--info-fd`` (see :class:`Namespace`).
    info_fd: int | None = None
    #: This call's part in the guard's snapshot of the root (set by :func:`prepare`).
    ticket: Ticket | None = None
    _pidfd: int | None = field(default=None, repr=False)

    @property
    def mode(self) -> str:
        return self.choice.mode

    @property
    def graceful_stop(self) -> bool:
        """Stop with SIGTERM first: the Landlock launcher then kills what the command left behind."""
        return self.choice.mode == "landlock"

    def attach(self, proc: asyncio.subprocess.Process) -> None:
        """Let the guard stop the started ``proc`` as soon as a protected path changes while it runs.

        Through a pidfd (a recycled pid is never signalled): the Landlock launcher gets SIGTERM
        and kills everything under it; bubblewrap gets SIGKILL, and its sandbox dies with it.
        """
        if self.ticket is None:
            return
        try:
            pidfd = os.pidfd_open(proc.pid)
        except OSError:
            return  # already gone
        sig = signal.SIGTERM if self.mode == "landlock" else signal.SIGKILL
        self._pidfd = pidfd

        def stop() -> None:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(pidfd, sig)

        self.ticket.attach(stop)

    async def close(self) -> list[str]:
        """Repair the protected paths, close the descriptors, remove the scratch dir; the repaired paths.

        The guard goes first: a ``.git`` the command moved into its scratch dir is brought back
        before that dir is removed.
        """
        try:
            if self.guarded:
                self.guarded = False
                if self.ticket is not None:
                    self.ticket.detach()
                # shielded: a cancelled call still puts the protected paths back
                self.repaired = await asyncio.shield(GUARD.leave(self.root, self.ticket))
        finally:
            pidfd, self._pidfd = self._pidfd, None
            for fd in (*self.pass_fds, *(() if pidfd is None else (pidfd,))):
                with contextlib.suppress(OSError):
                    os.close(fd)
            self.pass_fds = ()
            if self.info_fd is not None:
                info_fd, self.info_fd = self.info_fd, None
                with contextlib.suppress(OSError):
                    os.close(info_fd)
            if self.scratch is not None:
                scratch, self.scratch = self.scratch, None
                await asyncio.to_thread(shutil.rmtree, scratch, True)
        return self.repaired


def _home(env: Mapping[str, str]) -> str | None:
    home = env.get("HOME") or os.path.expanduser("~")
    return os.path.realpath(home) if home and os.path.isabs(home) else None


def _open_chain(root: str, rel: str) -> tuple[list[tuple[str, int]], int | None]:
    """O_PATH descriptors of the real directories from ``root`` to ``rel``'s parent, and of ``rel`` itself.

    Stops at the first component that is missing or a symlink (the leaf's
    descriptor is then ``None``). The caller owns every descriptor returned.
    """
    fds: list[tuple[str, int]] = []
    parts = PurePosixPath(rel).parts
    cur = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    path = root
    try:
        for i, name in enumerate(parts):
            try:
                st = os.stat(name, dir_fd=cur, follow_symlinks=False)
            except OSError:
                return fds, None
            if stat.S_ISLNK(st.st_mode):
                return fds, None
            last = i == len(parts) - 1
            if not last and not stat.S_ISDIR(st.st_mode):
                return fds, None
            fd = os.open(name, _PATH_FLAGS, dir_fd=cur)
            path = os.path.join(path, name)
            if last:
                return fds, fd
            fds.append((path, fd))
            # the new one first: ``cur`` is never a number already closed (a second close
            # would close whatever another thread was given under it since)
            old, cur = cur, os.dup(fd)
            os.close(old)
    except BaseException:
        for _, fd in fds:
            os.close(fd)
        raise
    finally:
        os.close(cur)
    return fds, None


def _visible_extras(root: str, hidden: Sequence[str], extra_ro: Sequence[str]) -> list[str]:
    """The additional directories the command reads: existing, outside the root, not in a hidden path."""
    return [
        d for d in extra_ro if os.path.isdir(d) and not within(d, root) and hidden_at(d, hidden, root) is None
    ]


def _system_mounts(system: Sequence[str]) -> list[Mount]:
    """Read-only binds of the system directories; ``/bin -> usr/bin`` stays a symlink inside."""
    real_dirs = [p for p in system if not os.path.islink(p)]
    out: list[Mount] = []
    for path in system:
        if os.path.islink(path) and any(within(os.path.realpath(path), d) for d in real_dirs):
            out.append(Mount("symlink", path, target=os.readlink(path)))
        elif os.path.isdir(path):
            out.append(Mount("ro", path))  # a link elsewhere: its target's content, bound here
    return out


def _bwrap_mounts(
    root: str,
    rels: Sequence[str],
    home: str | None,
    hidden: Sequence[str],
    extra_ro: Sequence[str],
    system: Sequence[str] = (),
) -> tuple[list[Mount], list[int], str]:
    """The mounts of a bubblewrap call (and the descriptors they pin), and the sandbox's HOME.

    Only ``system``, ``root`` and the additional directories ``extra_ro`` are
    bound; a ``hidden`` path under any of them is covered again (an empty
    tmpfs, or ``/dev/null`` over a file).
    """
    extras = _visible_extras(root, hidden, extra_ro)
    # an additional directory that holds a system one ("/") binds it already
    mounts = _system_mounts([p for p in system if not any(within(p, d) for d in extras)])
    fds: list[int] = []
    try:
        _protected_mounts(root, rels, mounts, fds)
        sandbox_home = _home_mount(home, mounts)
        shown = (root, *extras, *(m.dest for m in mounts if m.kind == "ro" and m.fd is None))
        mounts += _hidden_mounts(hidden, shown)
        mounts += [Mount("ro", d) for d in extras]
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return mounts, fds, sandbox_home


def _protected_mounts(root: str, rels: Sequence[str], mounts: list[Mount], fds: list[int]) -> None:
    """Add the read-only binds of the protected paths to ``mounts``, and the descriptors they pin to ``fds``.

    Every real directory on the way to one becomes a read-write mount point (it cannot be
    renamed or replaced then); a protected path reached through a symlink is bound where it leads.
    """
    pinned: set[str] = set()
    for rel in rels:
        chain, leaf = _open_chain(root, rel)
        for path, fd in chain:
            if path in pinned:
                os.close(fd)
                continue
            pinned.add(path)
            fds.append(fd)
            mounts.append(Mount("rw", path, fd))
        dest = os.path.join(root, rel)
        if leaf is not None:
            fds.append(leaf)
            mounts.append(Mount("ro", dest, leaf))
            continue
        real = os.path.realpath(dest)
        if real != dest and within(real, root) and os.path.exists(real):
            mounts.append(Mount("ro", real))  # reached through a symlink: bind where it leads


def _home_mount(home: str | None, mounts: list[Mount]) -> str:
    """Add the sandbox's empty home to ``mounts`` (a tmpfs over the user's, else ``/tmp/home``); its path."""
    if home and home != "/" and os.path.isdir(home):
        mounts.append(Mount("tmpfs", home))
        return home
    mounts.append(Mount("dir", "/tmp/home"))
    return "/tmp/home"


def _hidden_mounts(hidden: Sequence[str], shown: Sequence[str]) -> list[Mount]:
    """The covers of the ``hidden`` paths that lie under a bound one (``shown``): nothing to cover elsewhere."""
    out: list[Mount] = []
    for path in hidden:
        if not any(within(path, v) for v in shown):
            continue
        if os.path.isdir(path):
            out.append(Mount("tmpfs", path))
        elif os.path.exists(path):
            out.append(Mount("hide-file", path))
    return out


def _landlock_spec(
    root: str,
    hidden: Sequence[str],
    scratch: str,
    extra_ro: Sequence[str],
    caps: Capabilities,
    network: bool,
    home: str | None = None,
) -> dict[str, Any]:
    """The Landlock rules: read the system directories and the additional ones (minus the hidden paths).

    Landlock cannot take a subtree out of a grant, so each readable tree is
    replaced by the siblings of the hidden paths under it (:func:`read_cover`).
    As under bubblewrap (whose empty home covers it), an additional directory
    above the ``home`` (``/``) does not open the home; one in it does.
    """
    read = [path for top in system_readable() for path in read_cover(hidden, top=top)]
    for top in _visible_extras(root, hidden, extra_ro):
        above_home = home is not None and within(home, top) and home != top
        read += read_cover([*hidden, home] if above_home and home else hidden, top=top)
    read += [p for p in (*PROC_READABLE, *_DEV_READ) if os.path.exists(p)]
    if network and os.path.isdir("/run/systemd/resolve"):
        read.append("/run/systemd/resolve")  # a resolv.conf that points into /run keeps working
    return {
        "abi": caps.landlock_abi,
        "read": read,
        "write": [root, scratch],
        "files_rw": [p for p in _DEV_RW if os.path.exists(p)],
        "network": network,
        "parent": os.getpid(),
    }


def _plan(
    argv: Sequence[str],
    choice: Choice,
    caps: Capabilities,
    *,
    root: str,
    data_dir: str,
    jido_home: str | None,
    additional_directories: Sequence[str],
    source_env: Mapping[str, str],
    cwd: str | None = None,
    egress: Egress | None = None,
    read_files: Sequence[str] = (),
) -> Launch:
    workdir = cwd or root
    if choice.mode == "off":
        own_home = source_env.get("HOME") or os.path.expanduser("~")
        env = sandbox_env(source_env, home=own_home, tmpdir=source_env.get("TMPDIR") or tempfile.gettempdir())
        return Launch(choice=choice, argv=list(argv), env=env, cwd=workdir, root=root)
    hidden = runtime_hidden(source_env, jido_home=jido_home)
    where = _Where(
        root=root,
        workdir=workdir,
        home=_home(source_env),
        hidden=hidden,
        extra_ro=additional_directories,
        # the proxy only where the settings keep the full network closed
        egress=None if choice.network else egress,
        read_files=readable_files(read_files, hidden, root),
    )
    if choice.mode == "bubblewrap":
        return _plan_bwrap(argv, choice, caps, where, protected_rels(data_dir), source_env)
    return _plan_landlock(argv, choice, caps, where, source_env)


@dataclass(frozen=True)
class _Where:
    """What a sandboxed launch sees: its root, where it starts, the home, hidden paths, the
    additional directories and the egress proxy it may reach."""

    root: str
    workdir: str
    home: str | None
    hidden: tuple[str, ...]
    extra_ro: Sequence[str]
    egress: Egress | None
    #: Single files readable at their own path: ``(path as given, the file it leads to)``.
    read_files: tuple[tuple[str, str], ...] = ()

    def env(self, source_env: Mapping[str, str], home: str, tmpdir: str) -> dict[str, str]:
        """The command's environment: PATH keeps only what it sees (system, root, additional
        directories); the proxy's variables when it has one."""
        visible = (*system_readable(), self.root, *self.extra_ro)
        env = sandbox_env(source_env, home=home, tmpdir=tmpdir, hidden=("/",), visible=visible)
        if self.egress is not None:
            env.update(proxy_env(self.egress))
        return env


def _egress_mounts(egress: Egress | None, mounts: list[Mount]) -> str | None:
    """Add the proxy's socket (and the bridge's interpreter, if hidden) to ``mounts``; the
    bridge's interpreter (``None``: no proxy)."""
    if egress is None:
        return None
    python, prefix = bridge_python()
    mounts.append(Mount("ro", SOCKET_INSIDE, source=egress.socket))
    if prefix is not None:
        mounts.append(Mount("ro", prefix))
    return python


def _plan_bwrap(
    argv: Sequence[str],
    choice: Choice,
    caps: Capabilities,
    where: _Where,
    rels: Sequence[str],
    source_env: Mapping[str, str],
) -> Launch:
    root = where.root
    mounts, fds, sandbox_home = _bwrap_mounts(
        root, rels, where.home, where.hidden, where.extra_ro, system_readable()
    )
    info_r, info_w = os.pipe()
    try:
        mounts += [Mount("ro", path, source=real) for path, real in where.read_files]
        python = _egress_mounts(where.egress, mounts)
        if python is not None and where.egress is not None:
            argv = bridge_argv(python, where.egress, list(argv))
        env = where.env(source_env, sandbox_home, "/tmp")
        full = bwrap_argv(
            argv,
            root=root,
            mounts=mounts,
            env=env,
            network=choice.network,
            bwrap=caps.bwrap or "bwrap",
            disable_userns=caps.bwrap_disable_userns,
            info_fd=info_w,
            chdir=where.workdir,
        )
        # bubblewrap's own environment is scrubbed too (--clearenv sets the command's)
        return Launch(
            choice=choice,
            argv=full,
            env=env,
            cwd=where.workdir,
            pass_fds=(*fds, info_w),
            root=root,
            guarded=True,
            info_fd=info_r,
        )
    except BaseException:
        for fd in (*fds, info_r, info_w):
            os.close(fd)
        raise


def _plan_landlock(
    argv: Sequence[str], choice: Choice, caps: Capabilities, where: _Where, source_env: Mapping[str, str]
) -> Launch:
    scratch = tempfile.mkdtemp(prefix="jidocode-sandbox-")
    try:
        os.mkdir(os.path.join(scratch, "home"), 0o700)
        os.mkdir(os.path.join(scratch, "tmp"), 0o700)
        spec = _landlock_spec(
            where.root, where.hidden, scratch, where.extra_ro, caps, choice.network, where.home
        )
        spec["read"] += [real for _, real in where.read_files]
        link_files(where.read_files, where.home, os.path.join(scratch, "home"))
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    if where.egress is not None:
        spec["connect_port"] = where.egress.port
    env = where.env(source_env, os.path.join(scratch, "home"), os.path.join(scratch, "tmp"))
    full = [sys.executable, "-I", "-S", LAUNCHER, *spec_argv(spec), "--", *argv]
    return Launch(
        choice=choice, argv=full, env=env, cwd=where.workdir, root=where.root, guarded=True, scratch=scratch
    )


async def prepare(
    argv: Sequence[str],
    *,
    root: str,
    data_dir: str = ".jido",
    jido_home: str | None = None,
    additional_directories: Sequence[str] = (),
    source_env: Mapping[str, str] | None = None,
    caps: Capabilities | None = None,
    cwd: str | None = None,
    watch: bool = True,
    egress: Egress | None = None,
    read_files: Sequence[str] = (),
) -> Launch:
    """The launch of ``argv`` in the project ``root`` under the sandbox its settings and this machine give.

    ``egress``: the proxy the command may reach, and nothing else (:mod:`._egress`); ``None``:
    no network. The full network of the user's global ``sandbox.network`` wins over it.
    ``read_files``: single files also readable, read-only, at their own path (a provider CLI's
    login; see :func:`~._paths.readable_files`).

    ``watch=False``: the protected paths are repaired only when the launch closes, not while it
    runs (a stdio MCP server runs as long as its project: a watch would undo the user's own edits
    of the settings, ``.git/config`` or ``.vscode`` for all that time).

    ``cwd``: where the command starts (default ``root``); it must lie under ``root`` (a worktree
    of the project), since only ``root`` is writable and visible as the project.

    Raises :class:`PermissionDenied` (``details.sandbox``: ``unavailable``,
    ``protected_too_large``, ``protected_unwatched`` or ``egress_unconfinable``) when the call may not run. The caller
    starts ``launch.argv`` with ``launch.env`` in ``launch.cwd`` (inheriting
    ``launch.pass_fds``), hands the process to ``launch.attach`` (the guard then stops it as
    soon as it changes a protected path) and always awaits ``launch.close()`` afterwards: a
    non-empty list it returns means the call changed protected paths and must fail.
    """
    env = dict(os.environ if source_env is None else source_env)
    if cwd is not None and not within(os.path.normpath(cwd), os.path.normpath(root)):
        raise PermissionDenied(f"the sandbox's working directory {cwd} is not under the project root {root}")
    if caps is None:
        caps = await asyncio.to_thread(detect)
    settings = await asyncio.to_thread(effective_settings, root, jido_home=jido_home, data_dir=data_dir)
    choice = choose(settings, caps)
    if choice.mode == "unavailable":
        raise PermissionDenied(
            f"bash is refused: {choice.reason}",
            details={"sandbox": "unavailable", "hint": choice.hint},
        )
    if egress is not None:
        _check_egress(choice, caps)
    guarded = choice.mode != "off"
    ticket = await _enter_guard(root, data_dir, choice, watch) if guarded else None
    plan = asyncio.ensure_future(
        asyncio.to_thread(
            _plan,
            argv,
            choice,
            caps,
            root=root,
            data_dir=data_dir,
            jido_home=jido_home,
            additional_directories=additional_directories,
            source_env=env,
            cwd=cwd,
            egress=egress,
            read_files=read_files,
        )
    )
    try:
        launch = await asyncio.shield(plan)
    except BaseException:
        # cancelled (maybe while the plan is made in its thread): nobody starts the launch, its
        # descriptors are closed once the plan is done
        plan.add_done_callback(_abandon)
        if guarded:
            await asyncio.shield(GUARD.leave(root, ticket))
        raise
    launch.ticket = ticket
    return launch


def _check_egress(choice: Choice, caps: Capabilities) -> None:
    """Refuse a proxied launch the sandbox cannot confine to the proxy (Landlock ABI < 4)."""
    if choice.mode == "landlock" and not choice.network and caps.landlock_abi < 4:
        raise PermissionDenied(
            f"network through the egress proxy is refused under Landlock ABI {caps.landlock_abi}: "
            "confining TCP to the proxy's port needs ABI >= 4 (Linux >= 6.7), and the whole network "
            f"is not given instead; {choice.hint}",
            details={"sandbox": "egress_unconfinable", "landlock_abi": caps.landlock_abi},
        )


async def _enter_guard(root: str, data_dir: str, choice: Choice, watch: bool = True) -> Ticket:
    """Join the guard's snapshot and watch of ``root`` (the refusals of :func:`prepare`)."""
    try:
        return await GUARD.enter(root, protected_rels(data_dir), full=choice.mode == "landlock", watch=watch)
    except TooLarge as exc:
        raise PermissionDenied(
            f"bash is refused under Landlock: the protected path {exc.args[0]!r} is too large to be "
            f"kept by a snapshot; {choice.hint}",
            details={"sandbox": "protected_too_large", "path": str(exc.args[0])},
        ) from None
    except OSError as exc:
        raise PermissionDenied(
            f"bash is refused under Landlock: the protected paths of {root} cannot be watched while "
            f"the call runs ({exc}); {choice.hint}",
            details={"sandbox": "protected_unwatched", "error": str(exc)},
        ) from None


def _abandon(plan: asyncio.Future[Launch]) -> None:
    """Close the descriptors and scratch folder of a launch nobody will start."""
    if plan.cancelled() or plan.exception() is not None:
        return
    launch = plan.result()
    launch.guarded = False  # the guard was left by the caller of prepare
    for fd in (*launch.pass_fds, *(() if launch.info_fd is None else (launch.info_fd,))):
        with contextlib.suppress(OSError):
            os.close(fd)
    launch.pass_fds, launch.info_fd = (), None
    if launch.scratch is not None:
        shutil.rmtree(launch.scratch, ignore_errors=True)
        launch.scratch = None
