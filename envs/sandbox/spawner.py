"""The host's end of the zygote (csrc/zygote.c): it starts each sandbox's nsinit as a fork of one pre-started
process, the session program in its zygote mode.

One zygote per host process, started on the first sandbox and shared by every thread (requests are serialised
under a lock; a fork takes ~0.2 ms). A process forked from the host (multiprocessing) starts a zygote of its
own: the one it inherited belongs to its parent. A zygote that died (e.g. chosen by the OOM killer) is replaced
on the next start; the sandboxes it had forked do not depend on it.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import threading

from . import native, protocol
from .policy import SandboxError


class Child:
    """An nsinit the zygote forked for us. It is the zygote's child, not ours, so it is watched and killed
    through a pidfd, which names it for as long as we hold it, even after it has exited and been reaped."""

    def __init__(self, pid: int, pidfd: int) -> None:
        self.pid = pid
        self._pidfd = pidfd

    def exited(self, timeout_s: float | None = 0.0) -> bool:
        """Whether it has exited, waiting up to `timeout_s` (None: until it does) and noticing the moment it does."""
        if self._pidfd < 0:
            return True
        poller = select.poll()
        poller.register(self._pidfd, select.POLLIN)
        return bool(poller.poll(None if timeout_s is None else int(timeout_s * 1000)))

    def kill(self) -> None:
        if self._pidfd >= 0:
            try:
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass  # it already exited

    def release(self) -> None:
        """Forget it (close the pidfd); call once it has exited."""
        if self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1


class _Zygote:
    def __init__(self) -> None:
        program = native.session_binary()
        ours, theirs = socket.socketpair()
        try:
            # cwd /: a long-lived process must not hold the caller's folder (it would keep a mount busy)
            self.proc = subprocess.Popen(
                [program, "zygote", str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                close_fds=True,
                start_new_session=True,
                env={},
                cwd="/",
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.sock = ours

    def spawn(self, argv: list[str], fds: list[int]) -> Child:
        protocol.send(self.sock, {"op": "spawn"}, fds, b"".join(os.fsencode(arg) + b"\0" for arg in argv))
        reply, pidfds = protocol.recv(self.sock)
        if "error" in reply or len(pidfds) != 1:
            for fd in pidfds:
                os.close(fd)
            raise SandboxError(f"could not start the sandbox's init process: {reply.get('error', reply)}")
        return Child(reply["pid"], pidfds[0])

    def close(self) -> None:
        self.sock.close()  # it exits at EOF
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


_lock = threading.Lock()
_zygote: _Zygote | None = None


def spawn(argv: list[str], fds: list[int]) -> Child:
    """Fork a new nsinit with the command line `argv` (nsinit_args.build) that serves the sandbox on fds[0], its
    control socket; the other fds are the archives, in the order argv expects them."""
    global _zygote
    with _lock:
        for _attempt in (1, 2):
            if _zygote is None:
                _zygote = _Zygote()
            try:
                return _zygote.spawn(argv, fds)
            except (protocol.ProtocolError, OSError) as exc:
                dead, _zygote, failure = _zygote, None, exc
                dead.close()
        raise SandboxError(
            f"the sandbox launcher (`{native.session_binary()} zygote`) failed twice: {failure}; "
            "run `swebox bench sandbox --reps 3` to check the host"
        )


def _forget_after_fork() -> None:
    """In a child forked from the host: the zygote and the lock (perhaps held by a thread that is not here)
    are the parent's."""
    global _lock, _zygote
    _lock = threading.Lock()
    if _zygote is not None:
        _zygote.sock.close()
        _zygote.proc.returncode = 0  # not our child to wait for
        _zygote = None


os.register_at_fork(after_in_child=_forget_after_fork)


def zygote_pid() -> int:
    """The pid of this process's zygote, 0 before the first sandbox (benchmarks count its memory once)."""
    return _zygote.proc.pid if _zygote is not None else 0
