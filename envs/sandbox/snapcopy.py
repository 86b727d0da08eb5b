"""Copy a sandbox's writable layer into a new layer folder, as the host, trusting nothing the agent made.

The agent owns the tree being copied and may change it while we copy. So the walk holds a directory fd at
every level and opens each entry by its single name beneath it with openat2(RESOLVE_BENEATH |
RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV) and O_NOFOLLOW: a file swapped for a link (to a host file, say) is
never followed, a FIFO is opened O_NONBLOCK and its type is checked on the fd before anything is read. The
copy is no larger than what the tree holds: only the data extents of sparse files are copied (SEEK_DATA /
SEEK_HOLE), hard links stay links, and the bytes and entries copied are capped (`max_bytes`, `max_entries`: the
writable layer's size and inode count, so a snapshot never takes more of the host's disk or inodes than the
sandbox could hold);
setuid and setgid bits are dropped (the copy belongs to host ids that are not the sandbox's).
"""

from __future__ import annotations

import errno
import os
import stat

from . import syscalls
from .policy import SandboxError

XATTR_PREFIXES = ("user.overlay.", "trusted.overlay.")
MAX_DEPTH = 200  # two Python frames per level: well inside the interpreter's recursion limit
_BENEATH = syscalls.RESOLVE_BENEATH | syscalls.RESOLVE_NO_SYMLINKS | syscalls.RESOLVE_NO_XDEV
_CHANGED = (errno.ENOENT, errno.ELOOP, errno.ENXIO, errno.ENOTDIR, errno.EXDEV)
"""An entry that vanished or changed kind between listing and opening it: the agent's own race, skipped."""


def copy_tree(src: str, dst: str, uid_base: int, uid_count: int, max_bytes: int, max_entries: int = 1 << 62) -> int:
    """Copy the tree at `src` (an overlay upper) to the new folder `dst` as a layer; returns the entries copied.

    Whiteouts (0:0 character devices) and overlay xattrs (opaque directories) are kept, so the copy works
    as a lower layer above the layers it was made on. Owners are stored relative to the sandbox: a file of
    host uid `uid_base + k` is stored as uid k (a lower layer is id-mapped back when mounted).
    """
    copy = _Copy(uid_base, uid_count, max_bytes, max_entries)
    os.makedirs(dst, mode=0o700)
    src_fd = os.open(src, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    dst_fd = os.open(dst, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    copy.root = dst_fd
    try:
        copy.directory(src_fd, dst_fd, "", 0)
        copy.meta_fd(src_fd, dst_fd, os.fstat(src_fd))
    finally:
        os.close(src_fd)
        os.close(dst_fd)
    return copy.entries


class _Copy:
    def __init__(self, uid_base: int, uid_count: int, max_bytes: int, max_entries: int) -> None:
        self.uid_base, self.uid_count, self.max_bytes, self.max_entries = uid_base, uid_count, max_bytes, max_entries
        self.copied = 0
        self.entries = 0
        self.links: dict[tuple[int, int], str] = {}  # (dev, ino) of a multiply-linked file -> its copy's path
        self.root = -1

    def directory(self, src_fd: int, dst_fd: int, rel: str, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise SandboxError(
                f"snapshot: expected folders nested at most {MAX_DEPTH} deep, found deeper ones at "
                f"{rel[:200]!r}...; flatten them before snapshotting"
            )
        with os.scandir(src_fd) as entries:
            names = [entry.name for entry in entries]
        for name in names:
            if self.entries >= self.max_entries:  # before the copy: never one host file past the cap
                raise SandboxError(
                    f"snapshot: expected at most {self.max_entries} files, folders and links (the "
                    "writable layer's inode cap, SandboxPolicy.upper_inodes), found more; the tree "
                    "grew while it was copied, or was made past the cap. Remove files (or reset) "
                    "and snapshot again"
                )
            try:
                st = os.stat(name, dir_fd=src_fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if self.entry(src_fd, dst_fd, name, f"{rel}/{name}" if rel else name, st, depth):
                self.entries += 1

    def entry(self, src_fd: int, dst_fd: int, name: str, rel: str, st: os.stat_result, depth: int) -> bool:
        mode = st.st_mode
        if stat.S_ISDIR(mode) or stat.S_ISREG(mode):
            flags = os.O_RDONLY | (os.O_DIRECTORY if stat.S_ISDIR(mode) else os.O_NONBLOCK) | os.O_NOFOLLOW
            try:
                fd = syscalls.openat2(src_fd, name, flags, resolve=_BENEATH)
            except OSError as exc:
                if exc.errno in _CHANGED:
                    return False
                raise
            try:
                st = os.fstat(fd)  # the file we hold, whatever the name now points to
                if stat.S_ISDIR(st.st_mode):
                    os.mkdir(name, 0o700, dir_fd=dst_fd)
                    out = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dst_fd)
                    try:
                        self.directory(fd, out, rel, depth + 1)
                        self.meta_fd(fd, out, st)
                    finally:
                        os.close(out)
                elif stat.S_ISREG(st.st_mode):
                    self.regular(fd, dst_fd, name, rel, st)
                else:
                    return False  # swapped for a FIFO or device after the listing
            finally:
                os.close(fd)
            return True
        if stat.S_ISLNK(mode):
            try:
                target = os.readlink(name, dir_fd=src_fd)
            except OSError as exc:
                if exc.errno in (*_CHANGED, errno.EINVAL):
                    return False
                raise
            self.charge(len(target))
            os.symlink(target, name, dir_fd=dst_fd)
        elif stat.S_ISCHR(mode) and st.st_rdev == 0:  # an overlay whiteout
            os.mknod(name, stat.S_IFCHR | 0o600, 0, dir_fd=dst_fd)
        elif stat.S_ISFIFO(mode):
            os.mkfifo(name, 0o600, dir_fd=dst_fd)
        else:
            return False  # sockets and device nodes are never part of a layer
        self.meta_name(dst_fd, name, st)
        return True

    def regular(self, fd: int, dst_fd: int, name: str, rel: str, st: os.stat_result) -> None:
        if st.st_nlink > 1:
            first = self.links.get((st.st_dev, st.st_ino))
            if first is not None:
                os.link(first, name, src_dir_fd=self.root, dst_dir_fd=dst_fd, follow_symlinks=False)
                return
            self.links[(st.st_dev, st.st_ino)] = rel
        out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dst_fd)
        try:
            for start, end in _extents(fd, st.st_size):
                self.charge(end - start)
                pos = start
                while pos < end:
                    chunk = os.pread(fd, min(1 << 20, end - pos), pos)
                    if not chunk:  # truncated meanwhile: the rest stays a hole
                        break
                    os.pwrite(out, chunk, pos)
                    pos += len(chunk)
            os.ftruncate(out, st.st_size)  # trailing holes, and the size as it was when opened
            self.meta_fd(fd, out, st)
        finally:
            os.close(out)

    def charge(self, nbytes: int) -> None:
        self.copied += nbytes
        if self.copied > self.max_bytes:
            raise SandboxError(
                f"snapshot: expected at most {self.max_bytes} bytes of data (the writable layer's "
                f"size), found more; the tree grew while it was copied. Stop the processes "
                "writing to it (reset, or wait for them) and snapshot again"
            )

    def owner(self, st: os.stat_result) -> tuple[int, int]:
        return _relative(st.st_uid, self.uid_base, self.uid_count), _relative(st.st_gid, self.uid_base, self.uid_count)

    def meta_fd(self, src_fd: int, out: int, st: os.stat_result) -> None:
        if os.geteuid() == 0:  # rootless copies simply belong to the user, who is the sandbox's root
            os.fchown(out, *self.owner(st))
        os.fchmod(out, _safe_mode(st.st_mode))
        try:
            for key in os.listxattr(src_fd):
                if key.startswith(XATTR_PREFIXES):
                    os.setxattr(out, key, os.getxattr(src_fd, key))
        except OSError:
            pass
        os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))

    def meta_name(self, dst_fd: int, name: str, st: os.stat_result) -> None:
        """Metadata of an entry we created and never open (a link, a whiteout, a FIFO)."""
        if os.geteuid() == 0:
            os.chown(name, *self.owner(st), dir_fd=dst_fd, follow_symlinks=False)
        if not stat.S_ISLNK(st.st_mode):
            os.chmod(name, _safe_mode(st.st_mode), dir_fd=dst_fd)
        os.utime(name, ns=(st.st_atime_ns, st.st_mtime_ns), dir_fd=dst_fd, follow_symlinks=False)


def _extents(fd: int, size: int) -> list[tuple[int, int]]:
    """The data ranges of the first `size` bytes of a file (all of it where the filesystem cannot say)."""
    ranges, pos = [], 0
    while pos < size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # only a hole is left
                break
            return [(0, size)]
        if start >= size:
            break
        end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
        ranges.append((start, end))
        pos = end
    return ranges


def _safe_mode(mode: int) -> int:
    """Permission bits without setuid, and without setgid except on folders (where it only picks the group)."""
    bits = stat.S_IMODE(mode) & ~stat.S_ISUID
    return bits if stat.S_ISDIR(mode) else bits & ~stat.S_ISGID


def _relative(host_id: int, base: int, count: int) -> int:
    return host_id - base if base <= host_id < base + count else 0
