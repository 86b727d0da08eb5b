"""Pack a layer folder into one file (squashfs / tar.zst / tar.gz) and unpack it safely.

Layers carry overlay metadata that must survive a round trip: whiteouts (character devices 0:0) and
``user.overlay.*`` extended attributes (opaque directories). mksquashfs keeps both by default; GNU tar keeps
them with ``--xattrs --xattrs-include=*`` and, as root, recreates the 0:0 devices. We use the ``tar``,
``zstd`` and ``mksquashfs`` binaries rather than Python's tarfile because tarfile drops xattrs on extract
and is several times slower on venv-sized trees; Python only reads the headers to vet an archive first.
"""

from __future__ import annotations

import errno
import hashlib
import os
import posixpath
import re
import shutil
import stat
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

FORMATS = ("squashfs", "tar.zst", "tar.gz")
MAPPED_ROOT_UID = 100000
"""The host uid that a sandbox's root maps to: files owned by it appear as root inside sandboxes."""
_TAR_XATTRS = ["--xattrs", "--xattrs-include=*", "--numeric-owner"]
_COMPRESSOR = {"tar.zst": "zstd -T0 -3 -q", "tar.gz": "gzip -6"}
_DECOMPRESSOR = {"tar.zst": ["zstd", "-dcq"], "tar.gz": ["gzip", "-dc"]}


class UnsafeArchiveError(ValueError):
    """An archive entry would land outside the layer, or is a device file."""


@dataclass(frozen=True)
class PackResult:
    """What packing produced."""

    path: Path
    """The packed file."""
    sha256: str
    """Hex digest of the packed file."""
    size: int
    """Bytes of the packed file."""
    files: int
    """Entries (files, directories, links) in the packed tree."""
    tree_bytes: int
    """Bytes of the regular files in the tree (what an unpacked copy occupies, roughly)."""


def check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise ValueError(f"layer format: expected one of {FORMATS}; found {fmt!r}.")
    return fmt


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def fsync_path(path: Path) -> None:
    """fsync a file or directory so a later rename publishes durable bytes."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def count_tree(src: Path, include: Sequence[str] | None = None) -> tuple[int, int]:
    """(entries, bytes of regular files) of a tree, links not followed."""
    roots = [src / name for name in include] if include else [src]
    entries, size = (len(roots) if include else 0), 0
    for root in roots:
        for parent, dirs, files in os.walk(root):
            entries += len(dirs) + len(files)
            for name in files:
                st = os.lstat(os.path.join(parent, name))
                size += st.st_size if stat.S_ISREG(st.st_mode) else 0
    return entries, size


def _run(cmd: list[str] | str, what: str, **kwargs) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, shell=isinstance(cmd, str), **kwargs)
    if proc.returncode != 0:
        # keep ENOSPC recognisable: callers turn it into a "disk full" message
        code = errno.ENOSPC if "No space left on device" in proc.stderr else errno.EIO
        raise OSError(code, f"{what} failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")


def pack(
    src: Path,
    dest: Path,
    fmt: str,
    *,
    owner: int | None = MAPPED_ROOT_UID,
    include: Sequence[str] | None = None,
    zstd_level: int = 3,
) -> PackResult:
    """Pack ``src`` (or only its top-level entries ``include``) into ``dest``, fsync'd.

    ``owner``: uid/gid every entry gets (default: the sandbox's mapped root); None keeps the owners.
    The caller publishes ``dest`` atomically (it is written in place).
    """
    src, dest = Path(src), Path(dest)
    check_format(fmt)
    if not src.is_dir():
        raise FileNotFoundError(f"pack: expected a layer folder; {src} is not a directory.")
    names = list(include) if include else None
    if names:
        missing = [n for n in names if not (src / n).exists() and not (src / n).is_symlink()]
        if missing:
            raise FileNotFoundError(f"pack: entries {missing} missing from {src}.")
    if fmt == "squashfs":
        sources = [str(src / n) for n in names] if names else [str(src)]
        cmd = [
            "mksquashfs",
            *sources,
            str(dest),
            "-comp",
            "zstd",
            "-Xcompression-level",
            str(zstd_level),
            "-noappend",
            "-quiet",
            "-no-progress",
        ]
        if names:
            # several sources get a synthesised root directory: give it a layer root's usual mode
            cmd += ["-root-mode", "755"] + (["-keep-as-directory"] if len(names) == 1 else [])
        if owner is not None:
            cmd += ["-force-uid", str(owner), "-force-gid", str(owner)]
        _run(cmd, f"mksquashfs {src}")
    else:
        cmd = [
            "tar",
            *_TAR_XATTRS,
            "--sort=name",
            "-C",
            str(src),
            "-cf",
            str(dest),
            f"--use-compress-program={_COMPRESSOR[fmt]}",
        ]
        if owner is not None:
            cmd += [f"--owner={owner}", f"--group={owner}"]
        _run(cmd + (names or ["."]), f"tar {fmt} {src}")
    fsync_path(dest)
    return PackResult(dest, sha256_file(dest), dest.stat().st_size, *count_tree(src, names))


def _norm(name: str) -> str:
    """Archive member name -> layer-relative path ('' for the root); raises on absolute or '..'."""
    if name.startswith("/"):
        raise UnsafeArchiveError(f"absolute path {name!r}")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UnsafeArchiveError(f"'..' in path {name!r}")
    return "/".join(parts)


class _Vetter:
    """Checks entries one by one; remembers symlinks so nothing is written through one."""

    def __init__(self) -> None:
        self.symlinks: set[str] = set()

    def _through_symlink(self, path: str) -> str | None:
        parts = path.split("/")
        for i in range(1, len(parts)):
            prefix = "/".join(parts[:i])
            if prefix in self.symlinks:
                return prefix
        return None

    def check(self, name: str, kind: str, link: str = "", dev: tuple[int, int] = (0, 0)) -> None:
        path = _norm(name)
        via = self._through_symlink(path)
        if via:
            raise UnsafeArchiveError(f"{name!r} lies under the symlink {via!r}")
        if kind == "chr":
            if dev != (0, 0):
                raise UnsafeArchiveError(f"device file {name!r} ({dev[0]}:{dev[1]}); only 0:0 whiteouts are allowed")
        elif kind == "sym":
            # Absolute targets resolve against the sandbox's root, never the host's, so they stay inside;
            # relative ones must not climb out of the layer.
            if not link.startswith("/"):
                target = posixpath.normpath(posixpath.join(posixpath.dirname(path), link))
                if target == ".." or target.startswith("../"):
                    raise UnsafeArchiveError(f"symlink {name!r} -> {link!r} points outside the layer")
            self.symlinks.add(path)
        elif kind == "lnk":
            target = _norm(link)
            if self._through_symlink(target) or target in self.symlinks:
                raise UnsafeArchiveError(f"hard link {name!r} -> {link!r} goes through a symlink")
        elif kind not in ("reg", "dir"):
            raise UnsafeArchiveError(f"special file {name!r} of type {kind}")


def _tar_kind(m: tarfile.TarInfo) -> str:
    if m.isreg():
        return "reg"
    if m.isdir():
        return "dir"
    if m.issym():
        return "sym"
    if m.islnk():
        return "lnk"
    if m.ischr():
        return "chr"
    return "blk" if m.isblk() else "fifo" if m.isfifo() else "other"


def vet_tar(archive: Path, fmt: str) -> tuple[int, int]:
    """Refuse unsafe entries (see module doc); returns (entries, bytes of regular files)."""
    check_format(fmt)
    proc = subprocess.Popen([*_DECOMPRESSOR[fmt], str(archive)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    vetter, entries, size = _Vetter(), 0, 0
    try:
        with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
            for m in tar:
                try:
                    vetter.check(m.name, _tar_kind(m), m.linkname, (m.devmajor, m.devminor))
                except UnsafeArchiveError as e:
                    raise UnsafeArchiveError(f"refusing archive {archive}: {e}") from None
                entries += 1
                size += m.size if m.isreg() else 0
        while proc.stdout.read(1 << 20):
            pass
        if proc.wait() != 0:
            raise UnsafeArchiveError(f"refusing archive {archive}: {fmt} stream is corrupt or truncated")
    except tarfile.TarError as e:
        raise UnsafeArchiveError(f"refusing archive {archive}: not a readable {fmt} ({e})") from None
    finally:
        proc.kill()
        proc.communicate()
    return entries, size


def unpack(archive: Path, dest: Path, fmt: str) -> tuple[int, int]:
    """Vet, then extract a tar archive into the new folder ``dest`` (appears whole or not at all)."""
    archive, dest = Path(archive), Path(dest)
    if fmt == "squashfs":
        raise ValueError("unpack: squashfs layers are mounted, not unpacked; use LayerCache.")
    if dest.exists():
        raise FileExistsError(f"unpack: {dest} exists; remove it or pick a new folder.")
    entries, size = vet_tar(archive, fmt)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        _run(
            [
                "tar",
                *_TAR_XATTRS,
                "-C",
                str(tmp),
                "-xf",
                str(archive),
                f"--use-compress-program={_DECOMPRESSOR[fmt][0]}",
            ],
            f"extracting {archive}",
        )
        os.chmod(tmp, 0o755)  # mkdtemp makes 0700; the layer root must be traversable by the sandbox uid
        os.rename(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return entries, size


_UNSQ_LINE = re.compile(r"^(\S)\S* +\S+ +(?:(\d+), *(\d+)|\d+) +\S+ +\S+ +squashfs-root(.*)$")


def _squashfs_entries(image: Path) -> Iterator[tuple[str, str, str, tuple[int, int]]]:
    out = subprocess.run(["unsquashfs", "-lln", str(image)], capture_output=True, text=True)
    if out.returncode != 0:
        raise UnsafeArchiveError(f"refusing image {image}: unsquashfs cannot read it ({out.stderr.strip()})")
    kinds = {"-": "reg", "d": "dir", "l": "sym", "c": "chr", "b": "blk", "p": "fifo", "s": "sock"}
    for line in out.stdout.splitlines():
        match = _UNSQ_LINE.match(line)
        if not match:
            continue
        kind, rest = kinds.get(match[1], "other"), match[4]
        name, _, link = rest.partition(" -> ") if kind == "sym" else (rest, "", "")
        dev = (int(match[2]), int(match[3])) if match[2] is not None else (0, 0)
        yield name.lstrip("/"), kind, link, dev


def vet_squashfs(image: Path) -> int:
    """Same rules as :func:`vet_tar` for a squashfs image (listed with ``unsquashfs -lln``)."""
    vetter, entries = _Vetter(), 0
    for name, kind, link, dev in _squashfs_entries(Path(image)):
        if not name:
            continue
        try:
            vetter.check(name, kind, link, dev)
        except UnsafeArchiveError as e:
            raise UnsafeArchiveError(f"refusing image {image}: {e}") from None
        entries += 1
    return entries
