"""Read and rewrite the RUNPATH (or old-style RPATH) of an ELF file in place, without patchelf.

An interpreter built under one prefix (pyenv's ``/root/.pyenv/versions/3.9.18``) names that prefix's ``lib``
in the RUNPATH of its binary and extension modules. Moved elsewhere, the entry becomes ``$ORIGIN``-relative
(``$ORIGIN/../lib``), which is never longer than an absolute path under a home folder, so the new string
overwrites the old one in the dynamic string table, NUL-padded: no offset or size in the file changes. A
longer string is refused (that would need a new string table: patchelf's job). 64-bit little-endian ELF only
(x86-64 and aarch64 hosts); other files are reported as not ELF.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

_PT_LOAD, _PT_DYNAMIC = 1, 2
_DT_NULL, _DT_STRTAB, _DT_RPATH, _DT_RUNPATH = 0, 5, 15, 29


class RunpathError(ValueError):
    """A RUNPATH that cannot be rewritten in place."""


def _runpath_slot(data: bytes) -> tuple[int, int] | None:
    """(file offset, length) of the RUNPATH/RPATH string, or None when the file has none or is no ELF64 LE."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    phoff, phentsize, phnum = struct.unpack_from("<Q", data, 0x20)[0], *struct.unpack_from("<HH", data, 0x36)
    loads, dynamic = [], None
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
        if p_type == _PT_LOAD:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == _PT_DYNAMIC:
            dynamic = (p_offset, p_filesz)
    if dynamic is None:
        return None
    strtab, path_at = None, None
    for at in range(dynamic[0], dynamic[0] + dynamic[1], 16):
        tag, value = struct.unpack_from("<qQ", data, at)
        if tag == _DT_NULL:
            break
        if tag == _DT_STRTAB:
            strtab = value
        elif tag in (_DT_RUNPATH, _DT_RPATH):
            path_at = value
    if strtab is None or path_at is None:
        return None
    for vaddr, offset, size in loads:  # the string table's address -> its place in the file
        if vaddr <= strtab < vaddr + size:
            start = strtab - vaddr + offset + path_at
            return start, data.index(b"\0", start) - start
    return None


def read_runpath(path: Path) -> str | None:
    """The RUNPATH (or RPATH) of ``path``; None for a file without one or no ELF."""
    data = path.read_bytes()
    slot = _runpath_slot(data)
    return None if slot is None else data[slot[0] : slot[0] + slot[1]].decode()


def relocate_runpath(path: Path, old_prefix: str, new_root: Path) -> str | None:
    """Rewrite each RUNPATH entry of ``path`` under ``old_prefix`` to ``$ORIGIN/<relative path>`` to the same
    folder below ``new_root`` (where the prefix's tree now is, as is ``path``); returns the new RUNPATH, or None
    when nothing changed."""
    data = path.read_bytes()
    slot = _runpath_slot(data)
    if slot is None:
        return None
    start, length = slot
    old = data[start : start + length].decode()
    entries = []
    for entry in old.split(":"):
        if entry == old_prefix or entry.startswith(old_prefix.rstrip("/") + "/"):
            target = new_root / os.path.relpath(entry, old_prefix)
            entry = "$ORIGIN/" + os.path.relpath(target, path.parent)
        entries.append(entry)
    new = ":".join(entries)
    if new == old:
        return None
    if len(new) > length:
        raise RunpathError(
            f"{path}: its RUNPATH {old!r} is shorter than the relocated {new!r}; expected room to rewrite it in "
            "place. Rewrite it with patchelf (`patchelf --set-rpath`) and import that copy."
        )
    os.chmod(path, path.stat().st_mode | 0o200)
    with open(path, "r+b") as f:
        f.seek(start)
        f.write(new.encode() + b"\0" * (length - len(new)))
    return new
