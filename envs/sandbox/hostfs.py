"""Host-side access to a sandbox's files that never follows a link out of the sandbox.

Every path is opened with openat2(RESOLVE_IN_ROOT) relative to the sandbox's root folder: an absolute
symlink planted by the agent (`ln -s /etc/shadow x`) resolves inside the sandbox, and `..` stops at its root.
"""

from __future__ import annotations

import errno
import os
import stat

from . import syscalls
from .policy import SandboxError


def read_file(root: str, path: str, max_bytes: int) -> bytes:
    fd = _open_regular(root, path, os.O_RDONLY, "read_file")
    try:
        chunks, size = [], 0
        while chunk := os.read(fd, 1 << 20):
            size += len(chunk)
            if size > max_bytes:
                raise SandboxError(
                    f"read_file({path!r}): file is larger than {max_bytes} bytes; read it in parts "
                    "with exec('head -c ...') or raise max_bytes"
                )
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_tail(root: str, path: str, max_bytes: int) -> bytes:
    """The last `max_bytes` of a regular file (as big as it is when opened: a writer left behind may go on)."""
    fd = _open_regular(root, path, os.O_RDONLY, "read_tail")
    try:
        os.lseek(fd, max(0, os.fstat(fd).st_size - max_bytes), os.SEEK_SET)
        chunks, size = [], 0
        while size < max_bytes and (chunk := os.read(fd, min(1 << 20, max_bytes - size))):
            size += len(chunk)
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def write_file(root: str, path: str, data: bytes, mode: int, owner: tuple[int, int] | None) -> None:
    """Write as the sandbox's root would (`owner`: its host uid/gid when we are host root)."""
    if owner is not None:
        with syscalls.filesystem_identity(*owner):
            fd = _open_regular(root, path, os.O_WRONLY | os.O_TRUNC, "write_file", mode)
    else:
        fd = _open_regular(root, path, os.O_WRONLY | os.O_TRUNC, "write_file", mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _open_regular(root: str, path: str, flags: int, what: str, create_mode: int | None = None) -> int:
    """Open `path` for `flags` only if it is a regular file, never opening anything else.

    The path is resolved once, as an O_PATH handle (links are followed inside the sandbox's root only), its
    type is checked on that handle, and the same inode is then reopened with O_NONBLOCK. Opening a FIFO or a
    device for reading or writing is what could block the host thread (which holds the sandbox's lock) or
    reach a device; an O_PATH handle does neither. With `create_mode`, a missing file is created (O_NONBLOCK
    too: should the agent race a FIFO into its place, the open fails or returns at once, and fstat refuses it).
    """
    try:
        handle = _resolve(root, path, os.O_PATH)
    except OSError as exc:
        if create_mode is None or exc.errno != errno.ENOENT:
            raise _error(path, exc) from None
        fd = _open(root, path, flags | os.O_CREAT | os.O_NONBLOCK, create_mode)
        _require_regular(fd, path, what)
        return fd
    try:
        _require_regular(handle, path, what, close=False)
        # the handle pins the inode: reopening it through /proc/self/fd cannot reach another file
        return os.open(f"/proc/self/fd/{handle}", flags | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    finally:
        os.close(handle)


def _require_regular(fd: int, path: str, what: str, close: bool = True) -> None:
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        kinds = {
            stat.S_IFIFO: "a FIFO",
            stat.S_IFDIR: "a directory",
            stat.S_IFCHR: "a character device",
            stat.S_IFBLK: "a block device",
            stat.S_IFSOCK: "a socket",
        }
        kind = kinds.get(stat.S_IFMT(mode), "another kind of file")
        if close:
            os.close(fd)
        raise SandboxError(f"{what}({path!r}): expected a regular file, found {kind}; use exec() for it")


def _open(root: str, path: str, flags: int, mode: int = 0o644) -> int:
    try:
        return _resolve(root, path, flags, mode)
    except OSError as exc:
        raise _error(path, exc) from None


def _resolve(root: str, path: str, flags: int, mode: int = 0o644) -> int:
    if not isinstance(path, str) or not path or "\0" in path:
        raise SandboxError(f"expected an absolute path inside the sandbox, found {path!r}")
    root_fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        # openat2 refuses O_PATH with any flag other than O_DIRECTORY, O_NOFOLLOW and O_CLOEXEC
        return syscalls.openat2(root_fd, path, flags if flags & os.O_PATH else flags | os.O_NOCTTY, mode)
    finally:
        os.close(root_fd)


def _error(path: str, exc: OSError) -> SandboxError:
    hint = {
        errno.ENOENT: "no such file (or its folder does not exist: create it with exec('mkdir -p ...'))",
        errno.EROFS: "that path is on a read-only bind of the host system",
        errno.EISDIR: "that path is a directory",
    }.get(exc.errno or 0, exc.strerror or str(exc))
    return SandboxError(f"{path!r} inside the sandbox: {hint}")
