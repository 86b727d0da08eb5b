"""SIGCHLD as an event for the idle loops of nsinit and the zygote: they block on their inputs and this, instead
of waking up on a timer to reap. Standard library only, no relative imports (imported by the zygote).
"""

from __future__ import annotations

import os
import signal


def child_events() -> int:
    """A file descriptor that becomes readable when a SIGCHLD arrives (signal.set_wakeup_fd)."""
    read_end, write_end = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # a Python handler: the wakeup fd is written
    return read_end


def drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass


def reap_zombies() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
