"""Files that are whole or absent: atomic replacement and appending whole lines.

A full disk, a quota, Ctrl-C or a kill in the middle of a write must never leave a half-written report or a
JSON-lines file whose last line is cut: readers (a rerun that resumes, ``swebox view``, ``swebox sft``) would
choke on it or silently lose records. ``write_atomic`` writes a temporary file beside the target, fsyncs it and
renames it over the target; ``append_line`` appends one line with one ``write`` and, if anything goes wrong
before the line is durable, truncates the file back to where it was.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
"""errnos that mean "no room to write": the disk, the user's quota or the process's file size limit."""


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike, text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8) all at once: either the old file stays or the new one is whole."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(path.parent)


def append_line(path: str | os.PathLike, line: str) -> None:
    """Append ``line`` and a newline to ``path``, durably; on any failure (full disk, Ctrl-C) the file is cut
    back to its previous length, so it only ever holds whole lines."""
    data = (line.rstrip("\n") + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        start = os.fstat(fd).st_size
        try:
            view = memoryview(data)
            while view:  # a short write (the disk filling up mid-line) is followed by the error on the next one
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except BaseException:
            os.ftruncate(fd, start)
            raise
    finally:
        os.close(fd)
