"""Landlock through ctypes, and the launcher that runs one command under it.

This file is also run as a script (``python -I -S _launcher.py ABI NET PARENT
--read … --write … --files … -- argv…``, see :func:`spec_argv`) so it imports
nothing but the few standard modules that start fast (no ``json``, ``typing``
or ``signal``, whose imports cost more than the interpreter itself): the
launcher starts in about 10 ms and no package code runs next to the command.

The launcher (see :func:`main`):

1. dies with the tool runner (``PR_SET_PDEATHSIG``: ``SIGTERM``, then step 4);
2. becomes a *child subreaper*: a process of the command that leaves its
   session (``setsid``) or whose parent exits is re-parented to the launcher,
   not to ``init``;
3. forks the command, which restricts itself (``no_new_privs`` and the
   Landlock ruleset) and ``exec``\\ s; the launcher itself stays outside the
   Landlock domain, so the command cannot signal or ``ptrace`` it;
4. when the command exits, or on ``SIGTERM``/``SIGINT``/``SIGHUP``, kills every
   process left under it and exits with the command's status.

Landlock (kernel >= 5.13, ``landlock`` in the LSM list) is an allow list:
rights are granted *beneath* directories (or on single files); everything the
ruleset handles and no rule grants is refused. It cannot take a subtree out of
a granted tree (rights add up down the tree: what lets the command make a
top-level file lets it write ``.git/config``, and what lets it remove a
top-level ``build`` lets it rename ``.git``), which is why protected paths
inside the project root are kept by the guard (:mod:`._guard`): a snapshot, a
watch that puts a change back at once and stops the call, and a repair after
it (decision 0307).
"""

from __future__ import annotations

import _signal as signal  # the C module: ``signal`` would import enum (4 ms at every launch)
import ctypes
import os
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any, Final, NoReturn

__all__ = [
    "ACCESS",
    "READ_RIGHTS",
    "RIGHTS_FILE",
    "WRITE_RIGHTS",
    "abi",
    "main",
    "parse_spec",
    "spec_argv",
    "udp_filter_program",
]

_SYS_CREATE_RULESET: Final = 444
_SYS_ADD_RULE: Final = 445
_SYS_RESTRICT_SELF: Final = 446
_CREATE_RULESET_VERSION: Final = 1
_RULE_PATH_BENEATH: Final = 1
_RULE_NET_PORT: Final = 2

_PR_SET_PDEATHSIG: Final = 1
_PR_SET_CHILD_SUBREAPER: Final = 36
_PR_SET_NO_NEW_PRIVS: Final = 38
_PR_CAPBSET_DROP: Final = 24
_PR_CAP_AMBIENT: Final = 47
_PR_CAP_AMBIENT_CLEAR_ALL: Final = 4

#: Filesystem access rights, and the ABI that introduced each.
ACCESS: Final[dict[str, tuple[int, int]]] = {
    "execute": (1 << 0, 1),
    "write_file": (1 << 1, 1),
    "read_file": (1 << 2, 1),
    "read_dir": (1 << 3, 1),
    "remove_dir": (1 << 4, 1),
    "remove_file": (1 << 5, 1),
    "make_char": (1 << 6, 1),
    "make_dir": (1 << 7, 1),
    "make_reg": (1 << 8, 1),
    "make_sock": (1 << 9, 1),
    "make_fifo": (1 << 10, 1),
    "make_block": (1 << 11, 1),
    "make_sym": (1 << 12, 1),
    "refer": (1 << 13, 2),
    "truncate": (1 << 14, 3),
    "ioctl_dev": (1 << 15, 5),
}
#: The rights a rule on a non-directory may carry.
RIGHTS_FILE: Final = frozenset({"execute", "write_file", "read_file", "truncate", "ioctl_dev"})
_NET_BIND_TCP: Final = 1 << 0
_NET_CONNECT_TCP: Final = 1 << 1
_SCOPE_ABSTRACT_UNIX_SOCKET: Final = 1 << 0
_SCOPE_SIGNAL: Final = 1 << 1

#: What the command may do to the trees it only reads.
READ_RIGHTS: Final = ("execute", "read_file", "read_dir")
#: What the command may do beneath the trees it writes (no device nodes).
WRITE_RIGHTS: Final = tuple(name for name in ACCESS if name not in ("make_char", "make_block"))


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPortAttr(ctypes.Structure):
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


_libc: Any = None


def _syscall() -> Any:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
        _libc.prctl.restype = ctypes.c_int
    return _libc


def _check(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


def abi() -> int:
    """The Landlock ABI version of the running kernel; ``0`` when Landlock is not available."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        libc = _syscall()
    except OSError:
        return 0
    ret = int(libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION))
    return max(ret, 0)


def _mask(names: tuple[str, ...] | frozenset[str], version: int) -> int:
    out = 0
    for name in names:
        bit, since = ACCESS[name]
        if version >= since:
            out |= bit
    return out


def _ruleset(spec: dict[str, Any]) -> int:
    """Create the ruleset of ``spec`` and return its fd (the caller restricts itself with it)."""
    version = int(spec["abi"])
    if version < 1:
        raise OSError(0, "Landlock is not available")
    libc = _syscall()
    attr = _RulesetAttr(handled_access_fs=_mask(tuple(ACCESS), version))
    size = 8
    port = int(spec.get("connect_port") or 0)
    if port and version < 4:
        raise OSError(0, f"Landlock ABI {version} cannot keep TCP to port {port} only (ABI >= 4 can)")
    if version >= 4 and not spec.get("network", False):
        attr.handled_access_net = _NET_BIND_TCP | _NET_CONNECT_TCP
        size = 16
    if version >= 6:
        attr.scoped = _SCOPE_SIGNAL | (0 if spec.get("network", False) else _SCOPE_ABSTRACT_UNIX_SOCKET)
        size = 24
    fd = _check(
        int(libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0)),
        "landlock_create_ruleset",
    )
    try:
        grants = (
            (spec.get("read", ()), READ_RIGHTS),
            (spec.get("write", ()), WRITE_RIGHTS),
            (spec.get("files_rw", ()), ("read_file", "write_file", "truncate", "ioctl_dev")),
        )
        for paths, rights in grants:
            for path in paths:
                _add_rule(fd, path, rights, version)
        if port:
            _add_port_rule(fd, port)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _add_rule(ruleset: int, path: str, rights: tuple[str, ...], version: int) -> None:
    try:
        pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # gone since it was listed: nothing to grant
    try:
        is_dir = os.path.isdir(f"/proc/self/fd/{pfd}")
        names = rights if is_dir else tuple(r for r in rights if r in RIGHTS_FILE)
        rule = _PathBeneathAttr(allowed_access=_mask(names, version), parent_fd=pfd)
        if rule.allowed_access:
            _check(
                int(_syscall().syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0)),
                f"landlock_add_rule {path}",
            )
    finally:
        os.close(pfd)


def _add_port_rule(ruleset: int, port: int) -> None:
    """Allow TCP ``connect`` to ``port`` (of any address: Landlock rules name ports only)."""
    rule = _NetPortAttr(allowed_access=_NET_CONNECT_TCP, port=port)
    _check(
        int(_syscall().syscall(_SYS_ADD_RULE, ruleset, _RULE_NET_PORT, ctypes.byref(rule), 0)),
        f"landlock_add_rule tcp:{port}",
    )


def _drop_capabilities(libc: Any) -> None:
    """Empty the bounding and ambient sets: a command run by root gets no capability at ``exec``.

    Without this, root keeps ``CAP_SYS_PTRACE``, ``CAP_NET_RAW``, ``CAP_SYS_MODULE`` …
    under Landlock. An unprivileged launcher has none to drop (the calls fail; fine).
    """
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    for cap in range(64):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 and ctypes.get_errno() == 22:  # EINVAL: no such cap
            break


# --- the seccomp filter: no UDP (nor any other non-TCP internet socket) ---------------------------

_PR_SET_SECCOMP: Final = 22
_SECCOMP_MODE_FILTER: Final = 2
_RET_ALLOW: Final = 0x7FFF0000
_RET_EPERM: Final = 0x00050000 | 1  # SECCOMP_RET_ERRNO | EPERM
_LD_W_ABS: Final = 0x20
_JEQ_K: Final = 0x15
_AND_K: Final = 0x54
_RET_K: Final = 0x06
_X32: Final = 0x40000000
_IO_URING_SETUP: Final = 425
#: ``uname -m`` -> (its audit arch, its ``socket`` numbers; the compat arch, the numbers refused
#: there outright: ``socketcall``, whose arguments a filter cannot read, ``socket``, io_uring).
_ARCHES: Final = {
    "x86_64": (0xC000003E, (41, _X32 | 41), 0x40000003, (102, 359, _IO_URING_SETUP)),
    "aarch64": (0xC00000B7, (198,), 0x40000028, (102, 281, _IO_URING_SETUP)),
}


class _SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def udp_filter_program(machine: str) -> list[tuple[int, str, str, int]] | None:
    """The filter as ``(code, jump if true, jump if false, k)`` with jumps to labels; ``None``
    where the machine's system call numbers are not known here.

    ``socket(AF_INET or AF_INET6, type, protocol)`` is refused (``EPERM``) unless ``type`` is
    ``SOCK_STREAM`` and ``protocol`` is 0 or TCP: no UDP, ICMP, SCTP or MPTCP, whose connections
    Landlock's TCP rules do not see. ``io_uring_setup`` is refused (an io_uring can make sockets
    the filter never sees), and so is every socket call of the 32-bit compat mode.
    """
    arch = _ARCHES.get(machine)
    if arch is None:
        return None
    native, sockets, compat, refused = arch
    prog: list[tuple[int, str, str, int]] = [
        (_LD_W_ABS, "", "", 4),  # seccomp_data.arch
        (_JEQ_K, "native", "", native),
        (_JEQ_K, "compat", "allow", compat),
        (_LD_W_ABS, "compat:", "", 0),  # seccomp_data.nr
        *[(_JEQ_K, "deny", "", nr) for nr in refused],
        (_RET_K, "", "", _RET_ALLOW),
        (_LD_W_ABS, "native:", "", 0),
        (_JEQ_K, "deny", "", _IO_URING_SETUP),
        (_JEQ_K, "deny", "", _X32 | _IO_URING_SETUP),
        *[(_JEQ_K, "socket", "", nr) for nr in sockets],
        (_RET_K, "", "", _RET_ALLOW),
        (_LD_W_ABS, "socket:", "", 16),  # args[0]: the domain
        (_JEQ_K, "inet", "", 2),  # AF_INET
        (_JEQ_K, "inet", "allow", 10),  # AF_INET6
        (_LD_W_ABS, "inet:", "", 24),  # args[1]: the type, with SOCK_NONBLOCK / SOCK_CLOEXEC
        (_AND_K, "", "", 0xF),
        (_JEQ_K, "", "deny", 1),  # SOCK_STREAM
        (_LD_W_ABS, "", "", 32),  # args[2]: the protocol
        (_JEQ_K, "allow", "", 0),
        (_JEQ_K, "allow", "deny", 6),  # IPPROTO_TCP
        (_RET_K, "allow:", "", _RET_ALLOW),
        (_RET_K, "deny:", "", _RET_EPERM),
    ]
    return prog


def _assemble(prog: list[tuple[int, str, str, int]]) -> Any:
    """The program as a ``struct sock_filter`` array; a label is written ``name:`` where it is
    defined (in the true-jump slot of that instruction) and ``name`` where it is jumped to."""
    labels = {jt[:-1]: i for i, (_, jt, _, _) in enumerate(prog) if jt.endswith(":")}
    out = (_SockFilter * len(prog))()
    for i, (code, jt, jf, k) in enumerate(prog):
        targets = [0 if not j or j.endswith(":") else labels[j] - i - 1 for j in (jt, jf)]
        if any(not 0 <= t < 256 for t in targets):
            raise ValueError(f"seccomp filter: jump out of range at {i}")
        out[i] = _SockFilter(code, targets[0], targets[1], k)
    return out


def _install_udp_filter(libc: Any, program: Any) -> None:
    """Load the filter (``no_new_privs`` must be set); it holds for the command and its children."""
    fprog = _SockFprog(len(program), ctypes.cast(program, ctypes.POINTER(_SockFilter)))
    _check(libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0), "prctl(SECCOMP)")


# --- the launcher ------------------------------------------------------------------------


class _Stop(Exception):
    pass


def _on_signal(signum: int, frame: object) -> None:
    raise _Stop(signum)


def _descendants(me: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rsplit(b")", 1)[-1].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry))
    out: list[int] = []
    todo = list(children.get(me, ()))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def _reap() -> bool:
    """Reap every child that has exited; ``False`` once no child is left."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True


def _kill_tree(me: int) -> None:
    """SIGKILL everything under the launcher (orphans come back to it: it is their subreaper)."""
    for _ in range(10000):
        for pid in _descendants(me):
            _sigkill(pid)
        if not _reap():
            return
        time.sleep(0.0005)  # the killed ones are exiting; their orphans are coming back to us


def _sigkill(pid: int) -> bool:
    """SIGKILL ``pid``; ``False`` when it is gone already (``contextlib`` would cost the launch its import)."""
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        return False
    return True


def _status(raw: int) -> int:
    if os.WIFEXITED(raw):
        return os.WEXITSTATUS(raw)
    if os.WIFSIGNALED(raw):
        return 128 + os.WTERMSIG(raw)
    return 1


_LISTS = ("--read", "--write", "--files")


def spec_argv(spec: dict[str, Any]) -> list[str]:
    """The launcher's arguments for ``spec`` (before ``--`` and the program); see :func:`parse_spec`."""
    out = [str(int(spec["abi"])), _net_word(spec), str(int(spec.get("parent") or 0))]
    for flag, key in zip(_LISTS, ("read", "write", "files_rw"), strict=True):
        paths = [str(p) for p in spec.get(key, ())]
        if any(not p.startswith("/") for p in paths):
            raise ValueError(f"{key}: absolute paths expected")
        out += [flag, *paths]
    return out


def _net_word(spec: dict[str, Any]) -> str:
    """``NET`` of the launcher's arguments: ``1`` the whole network, ``tcp:PORT`` TCP connect to
    that port only (the egress proxy), ``0`` none."""
    if spec.get("network"):
        return "1"
    port = spec.get("connect_port")
    if port:
        if not 0 < int(port) < 65536:
            raise ValueError(f"connect_port: 1-65535 expected, not {port}")
        return f"tcp:{int(port)}"
    return "0"


def parse_spec(args: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    """``ABI NET PARENT --read P… --write P… --files P… -- PROGRAM ARGS…`` -> (spec, program).

    ``NET``: ``1`` (the whole network), ``0`` (none) or ``tcp:PORT`` (TCP connect to ``PORT`` only).
    """
    sep = list(args).index("--")
    head, program = list(args[:sep]), list(args[sep + 1 :])
    spec: dict[str, Any] = {"abi": int(head[0]), "network": head[1] == "1", "parent": int(head[2])}
    if head[1].startswith("tcp:"):
        spec["connect_port"] = int(head[1][4:])
    elif head[1] not in ("0", "1"):
        raise ValueError(f"unexpected network {head[1]!r}")
    key = None
    names = dict(zip(_LISTS, ("read", "write", "files_rw"), strict=True))
    for word in head[3:]:
        if word in names:
            key = names[word]
            spec[key] = []
        elif key is not None and word.startswith("/"):
            spec[key].append(word)
        else:
            raise ValueError(f"unexpected launcher argument {word!r}")
    if not program:
        raise ValueError("no program to run")
    return spec, program


_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _exec_restricted(
    libc: Any, fd: int, launcher: int, program: list[str], udp_filter: Any = None
) -> NoReturn:  # pragma: no cover
    """In the forked child: restrict itself by the ruleset ``fd`` (and the seccomp ``udp_filter``,
    when given) and exec ``program``; never returns.

    Runs in the child, whose coverage is not collected: it execs or exits.
    """
    try:
        for sig in _STOP_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != launcher:
            os._exit(126)  # the launcher died before the line above: nobody would end us
        _drop_capabilities(libc)
        _check(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
        if udp_filter is not None:
            _install_udp_filter(libc, udp_filter)
        _check(int(libc.syscall(_SYS_RESTRICT_SELF, fd, 0)), "landlock_restrict_self")
        os.close(fd)
        os.execv(program[0], program)
    except BaseException as exc:
        os.write(2, f"sandbox (landlock): {exc}\n".encode())
    os._exit(126)


def _udp_filter(spec: dict[str, Any]) -> Any:
    """The seccomp filter of a launch without the whole network (``None``: with it, or on a
    machine whose system call numbers :func:`udp_filter_program` does not know)."""
    if spec.get("network"):
        return None
    prog = udp_filter_program(os.uname().machine)
    return None if prog is None else _assemble(prog)


def _wait_for(child: int) -> int:
    """The exit status of ``child`` (reaping the orphans that come back to the launcher meanwhile)."""
    while True:
        pid, raw = os.waitpid(-1, 0)
        if pid == child:
            return _status(raw)


def _supervise(libc: Any, spec: dict[str, Any], program: list[str], me: int) -> int:
    """Steps 1 to 3 of :func:`main`: die with the tool runner, become a subreaper, fork the
    restricted command and wait for it; its status."""
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if spec.get("parent") and os.getppid() != spec["parent"]:
        return 1  # the tool runner is already gone
    _check(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "prctl(CHILD_SUBREAPER)")
    fd = _ruleset(spec)
    udp_filter = _udp_filter(spec)
    child = os.fork()
    if child == 0:  # pragma: no cover - the child execs or exits
        _exec_restricted(libc, fd, me, program, udp_filter)
    os.close(fd)
    return _wait_for(child)


def main(argv: list[str]) -> int:
    """``_launcher.py ABI NET PARENT --read … -- program args…``: run the program under the spec."""
    try:
        spec, program = parse_spec(argv[1:])
    except (ValueError, IndexError) as exc:
        os.write(2, f"sandbox (landlock): bad launcher arguments: {exc}\n".encode())
        return 2
    libc = _syscall()
    for sig in _STOP_SIGNALS:
        signal.signal(sig, _on_signal)
    me = os.getpid()
    try:
        return _supervise(libc, spec, program, me)
    except _Stop as stop:
        return 128 + int(stop.args[0])
    except OSError as exc:
        os.write(2, f"sandbox (landlock): {exc}\n".encode())
        return 126
    finally:
        for sig in _STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        _kill_tree(me)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
