"""Thin ctypes wrappers over the Linux syscalls the host side of the sandbox needs (x86_64 and aarch64): the
mount API that clones and id-maps a sandbox's trees (idmap.py), openat2 for reaching into a sandbox's root
(hostfs.py, snapcopy.py), and the per-thread filesystem identity. Everything inside the namespaces is C (csrc/).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import struct

# the C library this interpreter is linked with, from its global symbols: ctypes.util.find_library would run
# a subprocess (~2 ms)
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long

OPEN_TREE_CLONE = 1
OPEN_TREE_CLOEXEC = os.O_CLOEXEC
AT_RECURSIVE = 0x8000
AT_EMPTY_PATH = 0x1000
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


def _b(path: str | bytes) -> bytes:
    return os.fsencode(path)


def _syscall(name: str, *args) -> int:
    if name not in _NR:
        raise OSError(38, f"{name}: syscall not supported on {_ARCH}")
    return _check(_libc.syscall(_NR[name], *args), name)


def open_tree(path: str, flags: int) -> int:
    return _syscall("open_tree", ctypes.c_int(-100), ctypes.c_char_p(_b(path)), ctypes.c_uint(flags))


def mount_setattr(mount_fd: int, attr_set: int, userns_fd: int = 0) -> None:
    """Set attributes (e.g. MOUNT_ATTR_RDONLY, MOUNT_ATTR_IDMAP with `userns_fd`) on a whole detached tree."""
    # struct mount_attr { u64 attr_set, attr_clr, propagation, userns_fd; }
    attr = struct.pack("QQQQ", attr_set, 0, 0, userns_fd)
    buf = ctypes.create_string_buffer(attr, len(attr))
    _syscall(
        "mount_setattr",
        ctypes.c_int(mount_fd),
        ctypes.c_char_p(b""),
        ctypes.c_uint(AT_EMPTY_PATH | AT_RECURSIVE),
        buf,
        ctypes.c_size_t(len(attr)),
    )


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
