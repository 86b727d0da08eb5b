"""A sandbox's working folder under the work root, and the sweep of those whose owner died without closing.

A working folder is alive exactly while its owner holds an flock on it. Liveness is never judged by looking up
the owner's pid in /proc: a job in another PID namespace (a container, a CI runner, `unshare --pid`) shares /tmp
but not /proc, and would take every live folder of this job for stale. A new folder is locked under a hidden name
and renamed into place, so a sweeper never sees it unlocked.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time

_NEW = ".new-"
_NEW_GRACE_S = 60.0


def locked_folder(work_root: str, name: str) -> tuple[str, int]:
    """Create work_root/name, locked for the caller's life (the returned fd holds the lock)."""
    staging = os.path.join(work_root, _NEW + name)
    os.mkdir(staging, 0o711)
    fd = os.open(staging, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        folder = os.path.join(work_root, name)
        os.rename(staging, folder)
    except BaseException:
        os.close(fd)
        os.rmdir(staging)
        raise
    return folder, fd


def sweep_stale(work_root: str) -> None:
    """Remove working folders of sandboxes whose owner died without closing them (nobody holds their lock)."""
    for name in os.listdir(work_root):
        path = os.path.join(work_root, name)
        if name.startswith(_NEW):
            try:  # a folder being created is unlocked for an instant; one left by a crash is old
                if time.time() - os.lstat(path).st_mtime < _NEW_GRACE_S:
                    continue
            except OSError:
                continue
        elif not name.split("-", 1)[0].isdigit():
            continue  # not a sandbox's folder (e.g. snapshots/)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue  # gone meanwhile, or not a folder
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # a live sandbox, in this PID namespace or any other
        else:
            shutil.rmtree(path, ignore_errors=True)
        finally:
            os.close(fd)


def tree_bytes(folder: str) -> int:
    """Bytes a layer folder holds on disk (the extract backend's private copy is at most the layers' sum)."""
    return tree_usage(folder)[0]


def tree_usage(folder: str) -> tuple[int, int]:
    """(bytes on disk, entries) of a layer folder: what the extract backend's private copy of it takes from its
    tmpfs's size and inodes."""
    total, entries = 0, 1
    for parent, dirs, files in os.walk(folder):
        for name in dirs + files:
            try:
                total += os.lstat(os.path.join(parent, name)).st_blocks * 512
                entries += 1
            except OSError:
                pass
    return total, entries
