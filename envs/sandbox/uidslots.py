"""A host uid of its own for every live sandbox's user namespace, so that per-user kernel budgets are per sandbox.

The kernel counts some budgets per user namespace and uid, and charges what a namespace's processes use to the
host uid that owns (created) the namespace as well: inotify instances and watches, user namespaces, and more
with each kernel release (ucounts). With host root owning every sandbox's namespace, one sandbox could exhaust
such a budget for every other sandbox and for host root itself. So, when the host is root, nsinit creates the
user namespace as an owner uid of the sandbox's own, `owner_base + k` for the k-th slot, an id no sandbox maps
(its files and processes are still the policy's `host_uid` ids: layers owned by those stay readable). A slot is
a lock file under SLOTS_DIR held with flock for the sandbox's life: shared by every process of the host, released
by the kernel when the holder dies, so a crash leaks nothing.
"""

from __future__ import annotations

import fcntl
import os
from typing import IO

from .policy import SandboxError

SLOTS_DIR = "/run/swebox-uid-slots"


class UidSlot:
    """The host uid `uid`, held for one sandbox until `release()` (or this process's death)."""

    def __init__(self, uid: int, lock: IO[str]) -> None:
        self.uid = uid
        self._lock: IO[str] | None = lock

    def release(self) -> None:
        if self._lock is not None:
            self._lock.close()  # drops the flock
            self._lock = None


def acquire(base: int, slots: int) -> UidSlot:
    """The first free uid of `base .. base + slots - 1`."""
    os.makedirs(SLOTS_DIR, mode=0o700, exist_ok=True)
    for uid in range(base, base + slots):
        lock = open(os.path.join(SLOTS_DIR, f"{uid}.lock"), "a")  # noqa: SIM115 - held by the slot
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            continue
        return UidSlot(uid, lock)
    raise SandboxError(f"SandboxPolicy.uid_slots: expected a free namespace-owner uid among {slots} (from {base}, "
                       f"just above host_uid's block), found all held by live sandboxes; raise uid_slots or close "
                       "sandboxes")
