"""Host ids of its own for every live sandbox, so that per-user kernel budgets are per sandbox.

The kernel keeps some budgets per host uid: pipe buffers (`fs.pipe-user-pages-soft`) and epoll watches
(`fs.epoll.max_user_watches`) are charged to the real uid of the process that makes them. Others it counts per
user namespace and uid and charges to the host uid that owns (created) the namespace as well: inotify
instances and watches, processes, user namespaces, POSIX message queue bytes and more with each kernel release
(ucounts). With one shared id block, one sandbox could exhaust such a budget for every other sandbox. So,
when the host is root, the k-th slot gives a sandbox:

- the namespace-owner uid `host_uid + uid_count + k`, an id no sandbox maps, which creates its user namespace;
- the id block `host_uid + uid_count + uid_slots + k * uid_count` (`uid_count` ids) that its ids 0.. map to:
  its processes and its writable layer's files are those host ids. Layers keep the *layer ids*
  (`host_uid..`, as squashfs images are packed with `-force-uid`): the host id-maps them onto the block.

A slot is a lock file under SLOTS_DIR held with flock for the sandbox's life: shared by every process of the
host, released by the kernel when the holder dies, so a crash leaks nothing.
"""

from __future__ import annotations

import fcntl
import os
from typing import IO

from .policy import SandboxError, SandboxPolicy

SLOTS_DIR = "/run/swebox-uid-slots"


class UidSlot:
    """Slot `index` of a policy's pool, held for one sandbox until `release()` (or this process's death)."""

    def __init__(self, policy: SandboxPolicy, index: int, lock: IO[str]) -> None:
        self.owner_uid = policy.host_uid + policy.uid_count + index
        """The host uid that creates (owns) the sandbox's user namespace."""
        self.block = policy.host_uid + policy.uid_count + policy.uid_slots + index * policy.uid_count
        """The first of the `uid_count` host ids (uids and gids) the sandbox's ids map to."""
        self._lock: IO[str] | None = lock

    def release(self) -> None:
        if self._lock is not None:
            self._lock.close()  # drops the flock
            self._lock = None


def acquire(policy: SandboxPolicy) -> UidSlot:
    """The first free slot of the policy's pool (`uid_slots` of them)."""
    os.makedirs(SLOTS_DIR, mode=0o700, exist_ok=True)
    base = policy.host_uid + policy.uid_count
    for index in range(policy.uid_slots):
        lock = open(os.path.join(SLOTS_DIR, f"{base + index}.lock"), "a")  # noqa: SIM115 - held by the slot
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            continue
        return UidSlot(policy, index, lock)
    raise SandboxError(
        f"SandboxPolicy.uid_slots: expected a free slot among {policy.uid_slots} (namespace-owner "
        f"uids from {base}), found all held by live sandboxes; raise uid_slots or close sandboxes"
    )


def budgets_note(rootless: bool, host_uid: int, owner_uid: int, shared_ids: str, uid_count: int) -> str:
    """limits_in_force()'s line for the per-user kernel budgets of a started sandbox: `shared_ids` says why it
    maps to the layer ids instead of a block of its own ('' when it has one)."""
    if rootless:
        return (
            f"shared: rootless, every sandbox of uid {host_uid} runs as it and its namespaces belong "
            "to it (pipe buffers, epoll watches, inotify, processes, message queues are that user's)"
        )
    if shared_ids:
        return (
            f"shared ids: {shared_ids}, so the sandbox maps to the layer ids ({host_uid}..), "
            "as do all such sandboxes (pipe buffers and epoll watches shared); inotify, processes and "
            f"message queues count per sandbox (user namespace owned by host uid {owner_uid})"
        )
    return (
        f"per sandbox: host ids {host_uid}..{host_uid + uid_count - 1} of its own and "
        f"a user namespace owned by host uid {owner_uid}: pipe buffers, epoll watches, inotify, "
        "processes and message queues count per sandbox"
    )
