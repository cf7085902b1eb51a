"""The bridge of a bubblewrap sandbox with proxied network: a loopback TCP port inside, the proxy's socket outside.

A bubblewrap call has a network namespace of its own with nothing in it but a loopback
interface. With the egress proxy (:class:`jidocode.shared.sandbox.Egress`) the proxy's unix
socket is bound into the sandbox, and this script, run by the sandbox's own interpreter
(``python3 -I -S -c <this source> SOCKET PORT -- program args…``), goes first:

1. listens on ``127.0.0.1:PORT`` inside the namespace (before the program starts: no race);
2. forks a forwarder that leaves the program's process tree (a double fork: it is re-parented to
   bubblewrap's init, so a program that waits for all its children never waits for it) with
   ``/dev/null`` for its standard streams (the call's output ends when the program's does); each
   connection it accepts is relayed, byte for byte, to a new connection to ``SOCKET``;
3. execs the program, whose ``HTTP_PROXY`` … point at ``http://127.0.0.1:PORT``.

The forwarder dies with the namespace when the program ends. Only the standard library's C modules are used (``_socket``, ``_thread``: it starts in ~20 ms;
the script runs as source text: nothing of the package is visible in the sandbox).
"""

from __future__ import annotations

import _socket  # the C module: ``socket`` imports enum and selectors (~40 ms at every start)
import _thread
import os
import sys

BUFFER = 65536
_AF_INET = _socket.AF_INET
_STREAM = _socket.SOCK_STREAM


class _Pair:
    """One relayed connection: the client's socket and the proxy's; closed by the second pump to end."""

    def __init__(self, client: _socket.socket, upstream: _socket.socket) -> None:
        self.client = client
        self.upstream = upstream
        self._lock = _thread.allocate_lock()
        self._running = 2

    def pump(self, src: _socket.socket, dst: _socket.socket) -> None:
        """Copy ``src`` to ``dst`` until end of file, pass the end of file on; the last one closes both."""
        try:
            while True:
                data = src.recv(BUFFER)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        _half_close(dst)
        with self._lock:
            self._running -= 1
            last = self._running == 0
        if last:
            self.client.close()
            self.upstream.close()


def _half_close(sock: _socket.socket) -> None:
    """Pass the end of file on (``contextlib.suppress`` would cost the bridge's start its import)."""
    try:
        sock.shutdown(_socket.SHUT_WR)
    except OSError:
        return  # the peer is gone already


def _relay(client: _socket.socket, path: str) -> None:
    """Relay one accepted connection to the proxy's socket, both ways."""
    upstream = _socket.socket(_socket.AF_UNIX, _STREAM)
    try:
        upstream.connect(path)
    except OSError:
        upstream.close()
        client.close()
        return
    pair = _Pair(client, upstream)
    _thread.start_new_thread(pair.pump, (upstream, client))
    pair.pump(client, upstream)


def _serve(server: _socket.socket, path: str) -> None:
    """Accept connections forever, each relayed in a thread of its own."""
    while True:
        try:
            fd, _ = server._accept()  # type: ignore[attr-defined]  # the C socket has only this accept
        except InterruptedError:
            continue
        client = _socket.socket(_AF_INET, _STREAM, 0, fd)
        _thread.start_new_thread(_relay, (client, path))


def _detach_and_serve(server: _socket.socket, path: str) -> None:
    """In the first child: fork the forwarder (re-parented to the namespace's init) and exit."""
    if os.fork() != 0:
        os._exit(0)
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    try:
        _serve(server, path)
    finally:
        os._exit(0)


def _listen(port: int) -> _socket.socket:
    server = _socket.socket(_AF_INET, _STREAM)
    server.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen(128)
    return server


def main(argv: list[str]) -> int:
    """``SOCKET PORT -- program args…``: listen, start the forwarder, exec the program."""
    try:
        sep = argv.index("--")
        path, port, program = argv[0], int(argv[1]), argv[sep + 1 :]
    except (ValueError, IndexError):
        sys.stderr.write("sandbox (bridge): usage: SOCKET PORT -- program args...\n")
        return 2
    if not program:
        sys.stderr.write("sandbox (bridge): no program to run\n")
        return 2
    try:
        server = _listen(port)
    except OSError as exc:
        sys.stderr.write(f"sandbox (bridge): cannot listen on 127.0.0.1:{port}: {exc}\n")
        return 126
    child = os.fork()
    if child == 0:
        _detach_and_serve(server, path)
    os.waitpid(child, 0)
    server.close()
    try:
        os.execvp(program[0], program)
    except OSError as exc:
        sys.stderr.write(f"sandbox (bridge): execvp {program[0]}: {exc}\n")
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
