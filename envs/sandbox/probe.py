"""Which copy-on-write backend this host supports, with errors that say how to fix a missing feature."""

from __future__ import annotations

import functools
import os
import shutil

from .policy import SandboxError


@functools.cache
def _filesystems() -> frozenset[str]:
    try:
        with open("/proc/filesystems") as f:
            return frozenset(line.split()[-1] for line in f if line.strip())
    except OSError:
        return frozenset()


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def check_user_namespaces(rootless: bool) -> None:
    if not os.path.exists("/proc/self/ns/user"):
        raise SandboxError(
            "this kernel has no user namespaces (CONFIG_USER_NS): swebox cannot isolate "
            "sandboxes here; use a Linux kernel >= 5.12 built with user namespaces"
        )
    if _read_int("/proc/sys/user/max_user_namespaces") == 0:
        raise SandboxError(
            "user namespaces are disabled (/proc/sys/user/max_user_namespaces = 0); "
            "enable them with `sysctl -w user.max_user_namespaces=15000`"
        )
    if rootless and _read_int("/proc/sys/kernel/unprivileged_userns_clone") == 0:
        raise SandboxError(
            "unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone = 0); "
            "run as root or enable them with `sysctl -w kernel.unprivileged_userns_clone=1`"
        )
    # Ubuntu 23.10+: the namespace is created, but AppArmor strips its capabilities, so every mount fails later
    if rootless and _read_int("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == 1:
        raise SandboxError(
            "AppArmor denies unprivileged user namespaces their capabilities "
            "(kernel.apparmor_restrict_unprivileged_userns = 1, Ubuntu's default); run as root or "
            "allow them with `sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`"
        )


def overlay_available() -> bool:
    return "overlay" in _filesystems()


def fuse_overlayfs_available() -> bool:
    # the daemon runs as the sandbox's unprivileged root, so /dev/fuse must be open to everyone (0666)
    try:
        world_rw = os.stat("/dev/fuse").st_mode & 0o006 == 0o006
    except OSError:
        return False
    return shutil.which("fuse-overlayfs") is not None and world_rw


def choose_backend(requested: str, rootless: bool) -> str:
    """The backend to use for `requested` ("auto" picks the fastest that works here)."""
    check_user_namespaces(rootless)
    if requested == "overlay" and not overlay_available():
        raise SandboxError(
            "backend 'overlay': this kernel has no overlayfs (not in /proc/filesystems); "
            "load it with `modprobe overlay`, or use backend='fuse-overlayfs' or 'extract'"
        )
    if requested == "fuse-overlayfs" and not fuse_overlayfs_available():
        raise SandboxError(
            "backend 'fuse-overlayfs': expected the fuse-overlayfs program and /dev/fuse, "
            "found "
            + ("a /dev/fuse that is not mode 0666" if shutil.which("fuse-overlayfs") else "no fuse-overlayfs on PATH")
            + "; install it with `apt-get install fuse-overlayfs fuse3` (and `chmod 0666 /dev/fuse`), "
            "or use another backend"
        )
    if requested != "auto":
        return requested
    if overlay_available():
        return "overlay"
    if fuse_overlayfs_available():
        return "fuse-overlayfs"
    return "extract"
