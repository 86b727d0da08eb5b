"""zygote: one process per host process, started once, that forks every sandbox's nsinit.

Starting each nsinit as a new interpreter spent ~40 ms of a sandbox's ~50 ms start in Python's start-up and
the imports of nsinit and protocol. A fork of a process that already holds them takes ~1 ms, and the forked
nsinit shares the interpreter's pages with every other sandbox instead of holding a copy. (The sessions
nsinit starts are a C program, csrc/session.c: no interpreter at all.)

Started by the host (`python -I -S zygote.py FD`, spawner.py) with an empty environment and nothing open but
FD, a socket only the host holds. Each request carries a new sandbox's configuration, its control socket and
its archive fds; the child detaches (closes FD and everything else, a session of its own, stdio on /dev/null)
and becomes that sandbox's nsinit once the zygote has moved it into the sandbox's cgroups. The reply carries the
child's pid and a pidfd for it: the host cannot wait for a process that is not its child, and a bare pid could
name another process once the zygote has reaped it.

The zygote serves one request at a time, so a child holds only its own request's fds. It exits when the
host's end closes; live sandboxes do not depend on it (each nsinit has its own socket to the host).
Standard library only: it runs as a plain script next to nsinit.py.
"""

from __future__ import annotations

import gc
import os
import select
import signal
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import children
import nsinit
import protocol


def become_nsinit(zygote: socket.socket, wake: int, fds: list[int], go: int, cfg: dict,
                  by_thread: list[str]) -> None:
    """In the fresh child: keep nothing of the zygote's but the code, then serve the sandbox (never returns).
    nsinit moves itself into the cgroup v1 folders `by_thread`, and waits for the zygote's word on `go` (in the
    other cgroups) before it makes any process."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.close(wake)
    zygote.close()  # the power to start sandboxes stays with the host
    os.setsid()
    null = os.open("/dev/null", os.O_RDWR)
    for std in (0, 1, 2):
        os.dup2(null, std)
    keep = sorted({0, 1, 2, go, *fds})
    for low, high in zip(keep, [*keep[1:], 65536], strict=True):
        os.closerange(low + 1, high)
    nsinit.run(fds, cfg, go, by_thread)


def join_cgroups(pid: int, dirs: list[str]) -> None:
    """Move `pid` into the cgroup v2 `dirs`, for a child that cannot move itself cheaply. Moving a whole process
    (cgroup.procs) takes the kernel's global threadgroup lock for writing, which after an idle moment waits for
    an RCU grace period (6-16 ms here), so the child is already at work on its namespaces and mounts meanwhile,
    and only its first fork waits for this."""
    for path in dirs:
        with open(os.path.join(path, "cgroup.procs"), "w") as f:
            f.write(str(pid))


def spawn(zygote: socket.socket, wake: int, request: dict, fds: list[int]) -> None:
    """Fork the nsinit of a sandbox whose control socket is fds[0] and whose configuration is request["init"];
    answer its pid and a pidfd; put it in request["cgroups"] before it may make any process: b"1" on `go`, or
    b"!" and why not (nsinit reports that to the host and exits)."""
    if not fds or not isinstance(request.get("init"), dict):
        protocol.send(zygote, {"error": "spawn: expected a sandbox's configuration and its control socket"})
        return
    cgroups = request.get("cgroups", [])
    # cgroup v1: the child moves itself, its one thread, through `tasks` (nsinit.join_own_cgroups)
    by_thread = [path for path in cgroups if os.path.exists(os.path.join(path, "tasks"))]
    go_r, go_w = os.pipe()
    try:
        pid = os.fork()
    except OSError as exc:  # e.g. the host is out of processes: this sandbox fails, the zygote serves on
        os.close(go_r)
        os.close(go_w)
        protocol.send(zygote, {"error": f"spawn: fork failed: {exc}"})
        return
    if pid == 0:
        try:
            os.close(go_w)
            become_nsinit(zygote, wake, fds, go_r, request["init"], by_thread)
        finally:
            os._exit(1)  # nsinit exits on its own; whatever got here must never return into the zygote's loop
    os.close(go_r)
    # opened before this loop can reap the child, so it names the child even if it already exited
    pidfd = os.pidfd_open(pid)
    try:
        protocol.send(zygote, {"pid": pid}, [pidfd])
        try:
            join_cgroups(pid, [path for path in cgroups if path not in by_thread])
        except OSError as exc:
            os.write(go_w, f"!{exc}".encode()[:512])
        else:
            os.write(go_w, b"1")
    finally:
        os.close(go_w)
        os.close(pidfd)


def main() -> None:
    zygote = socket.socket(fileno=int(sys.argv[1]))
    wake = children.child_events()
    gc.freeze()  # the objects loaded so far are never collected: a collection in a child would dirty their pages
    poller = select.poll()
    poller.register(zygote, select.POLLIN)
    poller.register(wake, select.POLLIN)
    while True:
        ready = {fd for fd, _ in poller.poll()}
        if wake in ready:  # a child (an nsinit) exited
            children.drain(wake)
            children.reap_zombies()
        if zygote.fileno() not in ready:
            continue
        try:
            request, fds = protocol.recv(zygote)
        except (protocol.ProtocolError, OSError):
            break  # the host is gone
        try:
            spawn(zygote, wake, request, fds)
        finally:
            for fd in fds:
                os.close(fd)
    os._exit(0)


if __name__ == "__main__":
    main()
