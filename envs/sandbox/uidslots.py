"""A host uid of its own for every live sandbox, so that per-user kernel budgets are per sandbox.

The kernel counts inotify instances and watches, epoll watches, pipe buffers and user namespaces per user,
and charges what a user namespace's processes use to the host uid that owns the namespace as well as to the
uid they run as. With one uid for all sandboxes (and host root owning every namespace), one sandbox could
exhaust such a budget for every other sandbox and for host root. So, when the host is root, sandbox number
k of a host runs as host ids `host_uid + k * uid_count ...` and its user namespace is created by (owned by)
that uid. A slot is a lock file under SLOTS_DIR held with flock for the sandbox's life: shared by every
process of the host, released by the kernel when the holder dies, so a crash leaks nothing.
"""

from __future__ import annotations

import fcntl
import os
from typing import IO

from .policy import SandboxError

SLOTS_DIR = "/run/swebox-uid-slots"


class UidSlot:
    """Host ids `uid .. uid + count - 1` held for one sandbox until `release()` (or this process's death)."""

    def __init__(self, uid: int, lock: IO[str]) -> None:
        self.uid = uid
        self._lock: IO[str] | None = lock

    def release(self) -> None:
        if self._lock is not None:
            self._lock.close()  # drops the flock
            self._lock = None


def acquire(base: int, count: int, slots: int) -> UidSlot:
    """The first free block of `count` host ids from `base` on, among `slots` blocks."""
    os.makedirs(SLOTS_DIR, mode=0o700, exist_ok=True)
    for k in range(slots):
        uid = base + k * count
        lock = open(os.path.join(SLOTS_DIR, f"{uid}.lock"), "a")  # noqa: SIM115 - held by the slot
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            continue
        return UidSlot(uid, lock)
    raise SandboxError(f"SandboxPolicy.uid_slots: expected a free host uid block among {slots} (from host_uid "
                       f"{base}, {count} ids each), found all {slots} held by live sandboxes; raise uid_slots or "
                       "close sandboxes")
