"""Thin ctypes wrappers over the Linux syscalls the sandbox needs (x86_64 and aarch64).

Doing mounts and namespace changes with syscalls from one process, instead of spawning `mount`/`unshare`
binaries, is what keeps a reset in the millisecond range: every fork+exec of a helper binary costs ~2-3 ms.
This module is imported both by the host-side package and, as a plain module, by nsinit (the session's own
setup is C: csrc/session.c), so it uses no relative imports and nothing outside the standard library.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import struct

# the C library this interpreter is linked with, from its global symbols: ctypes.util.find_library would run
# a subprocess (~2 ms) in every sandbox process that imports this
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_NOATIME = 1024
MS_NODIRATIME = 2048
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_RELATIME = 1 << 21

PR_SET_CHILD_SUBREAPER = 36

OPEN_TREE_CLONE = 1
OPEN_TREE_CLOEXEC = os.O_CLOEXEC
AT_RECURSIVE = 0x8000
AT_EMPTY_PATH = 0x1000
MOVE_MOUNT_F_EMPTY_PATH = 0x4
MOUNT_ATTR_RDONLY = 0x1
MOUNT_ATTR_NOSUID = 0x2
MOUNT_ATTR_NODEV = 0x4
MOUNT_ATTR_IDMAP = 0x00100000

RESOLVE_NO_XDEV = 0x01
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
RESOLVE_IN_ROOT = 0x10

_ARCH = os.uname().machine
if _ARCH in ("x86_64", "aarch64", "arm64"):  # the new syscalls have one number on every architecture
    _NR = {"open_tree": 428, "move_mount": 429, "mount_setattr": 442, "openat2": 437}
else:  # pragma: no cover - other architectures are not supported yet
    _NR = {}


def _check(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


def _b(path: str | bytes | None) -> bytes | None:
    return os.fsencode(path) if path is not None else None


def _syscall(name: str, *args) -> int:
    if name not in _NR:
        raise OSError(38, f"{name}: syscall not supported on {_ARCH}")
    return _check(_libc.syscall(_NR[name], *args), name)


def unshare(flags: int) -> None:
    _check(_libc.unshare(ctypes.c_int(flags)), f"unshare({flags:#x})")


def mount(source: str | None, target: str, fstype: str | None = None, flags: int = 0,
          data: str | None = None) -> None:
    ret = _libc.mount(_b(source), _b(target), _b(fstype), flags, _b(data))
    _check(ret, f"mount {source or fstype} on {target}")


def open_tree(path: str, flags: int) -> int:
    return _syscall("open_tree", ctypes.c_int(-100), ctypes.c_char_p(_b(path)), ctypes.c_uint(flags))


def mount_setattr(mount_fd: int, attr_set: int, userns_fd: int = 0) -> None:
    """Set attributes (e.g. MOUNT_ATTR_RDONLY, MOUNT_ATTR_IDMAP with `userns_fd`) on a whole detached tree."""
    # struct mount_attr { u64 attr_set, attr_clr, propagation, userns_fd; }
    attr = struct.pack("QQQQ", attr_set, 0, 0, userns_fd)
    buf = ctypes.create_string_buffer(attr, len(attr))
    _syscall("mount_setattr", ctypes.c_int(mount_fd), ctypes.c_char_p(b""),
             ctypes.c_uint(AT_EMPTY_PATH | AT_RECURSIVE), buf, ctypes.c_size_t(len(attr)))


def move_mount(from_fd: int, to_path: str) -> None:
    _syscall("move_mount", ctypes.c_int(from_fd), ctypes.c_char_p(b""), ctypes.c_int(-100),
             ctypes.c_char_p(_b(to_path)), ctypes.c_uint(MOVE_MOUNT_F_EMPTY_PATH))


def openat2(dirfd: int, path: str, flags: int, mode: int = 0, resolve: int = RESOLVE_IN_ROOT) -> int:
    """openat2(2) with RESOLVE_IN_ROOT: `path` (even absolute, even via symlinks) stays below `dirfd`."""
    mode = mode if flags & os.O_CREAT else 0  # the kernel rejects a mode without O_CREAT
    how = struct.pack("QQQ", flags | os.O_CLOEXEC, mode, resolve | RESOLVE_NO_MAGICLINKS)
    buf = ctypes.create_string_buffer(how, len(how))
    return _syscall("openat2", ctypes.c_int(dirfd), ctypes.c_char_p(_b(path)), buf, ctypes.c_size_t(len(how)))


@contextlib.contextmanager
def filesystem_identity(uid: int, gid: int):
    """Act on files as (uid, gid) in this thread only (setfsuid/setfsgid are per-thread in Linux).

    Creating a file in an overlay mounted inside a user namespace needs an owner that namespace can map.
    """
    old_gid = _libc.setfsgid(ctypes.c_uint(gid))
    old_uid = _libc.setfsuid(ctypes.c_uint(uid))
    try:
        yield
    finally:
        _libc.setfsuid(ctypes.c_uint(old_uid))
        _libc.setfsgid(ctypes.c_uint(old_gid))


def prctl(option: int, arg2: int = 0, arg3: int = 0, arg4: int = 0, arg5: int = 0) -> int:
    return _check(_libc.prctl(option, arg2, arg3, arg4, arg5), f"prctl({option})")
