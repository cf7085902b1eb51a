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

The forwarder dies with the namespace when the program ends. Only the standard library is used
(the script runs as source text: nothing of the package is visible in the sandbox).
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading

BUFFER = 65536


def _pump(src: socket.socket, dst: socket.socket) -> None:
    """Copy ``src`` to ``dst`` until end of file, then pass the end of file on."""
    with contextlib.suppress(OSError):
        while data := src.recv(BUFFER):
            dst.sendall(data)
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


def _relay(client: socket.socket, path: str) -> None:
    """Relay one accepted connection to the proxy's socket (both ways), then close both."""
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        upstream.close()
        client.close()
        return
    back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
    back.start()
    _pump(client, upstream)
    back.join()
    upstream.close()
    client.close()


def _serve(server: socket.socket, path: str) -> None:
    """Accept connections forever, each relayed in a thread of its own."""
    while True:
        try:
            client, _ = server.accept()
        except InterruptedError:
            continue
        threading.Thread(target=_relay, args=(client, path), daemon=True).start()


def _detach_and_serve(server: socket.socket, path: str) -> None:
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
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", port))
        server.listen(128)
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
