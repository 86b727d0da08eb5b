"""A listening TCP socket inside one sandbox's network namespace, served by the host.

A service the host offers to one sandbox only (the model gateway of harness episodes) listens on the loopback of
that sandbox's own network namespace: nothing else is opened. The sandbox stays offline otherwise, the host's
loopback stays out of its reach, and no other sandbox or host process can connect (each namespace has a loopback
of its own). The socket is created by a short-lived thread that joins the namespace with ``setns(2)``: a socket
belongs to the namespace it was created in, whichever thread accepts on it later, and the caller's threads never
leave the host's namespace. ``setns`` into a namespace owned by the sandbox's user namespace needs
CAP_SYS_ADMIN over it: swebox running as root.
"""

from __future__ import annotations

import ctypes
import os
import socket
import threading

from .policy import SandboxError

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def listen_inside(pid: int, port: int = 0, backlog: int = 16) -> socket.socket:
    """A TCP socket listening on 127.0.0.1:``port`` (0: any free port) in the network namespace of ``pid``
    (a sandbox's ``Sandbox.pid``). Close it to stop serving."""
    if pid <= 0:
        raise SandboxError(
            f"listen_inside: expected the host pid of a running sandbox, found {pid}; start the sandbox first"
        )
    made: list[socket.socket] = []
    failed: list[str] = []

    def enter_and_listen() -> None:
        try:
            fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            failed.append(f"opening /proc/{pid}/ns/net failed: {exc}")
            return
        try:
            if _libc.setns(fd, CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                failed.append(
                    f"setns into the sandbox's network namespace failed: {os.strerror(err)} (it needs "
                    "root: CAP_SYS_ADMIN over the sandbox's user namespace)"
                )
                return
        finally:
            os.close(fd)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen(backlog)
        except OSError as exc:
            sock.close()
            failed.append(f"listening on 127.0.0.1:{port} inside the sandbox failed: {exc}")
            return
        made.append(sock)

    # a thread of its own: setns changes the calling thread's namespace, and this one ends right after
    thread = threading.Thread(target=enter_and_listen, name=f"swebox-listen-{pid}", daemon=True)
    thread.start()
    thread.join()
    if failed:
        raise SandboxError(f"listen_inside(pid={pid}): {failed[0]}")
    return made[0]
