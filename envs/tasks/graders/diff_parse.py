"""Unified git diffs split into per-file sections (:class:`FilePatch`), the way git itself reads them.

Both git's ``diff --git`` sections and plain ``---``/``+++`` ones; the header's paths (C-quoted or holding spaces),
modes, renames and copies; binary patches; and the ``+``/``-`` counts and ``--summary`` lines git would report,
which :mod:`swebox.envs.tasks.graders.diff_truth` compares with git's own answer.

Lines are split the way git splits them: after ``\n`` and nowhere else (:func:`diff_lines`). ``str.splitlines``
also breaks on ``\r``, ``\f``, ``\v``, ``\x1c``-``\x1e``, ``\x85``, ``\u2028`` and ``\u2029``; a ``+`` line holding
one of them would end a hunk early here and not in git, and the grader would apply a tree the agent never had.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

HEADER_PREFIXES = (
    "old mode ",
    "new mode ",
    "deleted file mode ",
    "new file mode ",
    "similarity index ",
    "dissimilarity index ",
    "rename from ",
    "rename to ",
    "copy from ",
    "copy to ",
    "index ",
)
"""The header lines git reads between ``diff --git`` and the ``---``/``+++`` lines or the hunks."""


@dataclass
class FilePatch:
    """One file's part of a diff, with its exact text so kept parts reassemble byte for byte."""

    old_path: str | None
    """Path before the change, relative to the repository; None for a new file."""
    new_path: str | None
    """Path after the change; None for a deleted file."""
    text: str
    """The section's text: header, ---/+++ lines, hunks or binary data."""
    binary: bool = False
    """True for 'GIT binary patch' or 'Binary files ... differ' sections."""
    binary_data: bool = False
    """True when the binary change carries its data (only then can git apply it)."""
    rename: bool = False
    """True for a rename (or copy) between two paths."""
    modes: tuple[str, ...] = ()
    """File modes named in the header (e.g. '100644', '120000' for a symlink)."""
    added: int = 0
    """'+' lines in the section's hunks (what ``git apply --numstat`` counts as added)."""
    removed: int = 0
    """'-' lines in the section's hunks (what ``git apply --numstat`` counts as deleted)."""
    summary: tuple[str, ...] = ()
    """What ``git apply --summary`` must say of this section, normalised: 'create MODE', 'delete MODE',
    'change OLD NEW' (modes as octal numbers; a mode that is not one is kept as written, so it never matches)."""

    @property
    def paths(self) -> tuple[str, ...]:
        """Every path the change touches (one, or two for a rename)."""
        return tuple(dict.fromkeys(p for p in (self.old_path, self.new_path) if p))


def _unquote(path: str) -> str:
    """git C-quotes paths with unusual bytes: ``"a/\\303\\251.py"``."""
    if not (len(path) >= 2 and path[0] == path[-1] == '"'):
        return path
    raw = path[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape")
    return raw.encode("latin-1").decode("utf-8", errors="replace")


def _strip_prefix(path: str) -> str | None:
    path = _unquote(path.split("\t")[0].rstrip("\n"))
    if path == "/dev/null":
        return None
    return path[2:] if path[:2] in ("a/", "b/") else path


def _git_line_paths(line: str) -> tuple[str, str]:
    rest = line[len("diff --git ") :].rstrip("\n")
    quoted = re.findall(r'"(?:[^"\\]|\\.)*"|\S+', rest)
    if len(quoted) == 2 and (quoted[0].startswith('"') or quoted[1].startswith('"')):
        return _strip_prefix(quoted[0]) or "", _strip_prefix(quoted[1]) or ""
    # Unquoted names may hold spaces: prefer the split where both halves are the same path.
    splits = [m.start() for m in re.finditer(" b/", rest)]
    for pos in splits:
        if rest[2:pos] == rest[pos + 3 :]:
            return rest[2:pos], rest[pos + 3 :]
    pos = splits[0] if splits else len(rest)
    return rest[2:pos], rest[pos + 3 :]


def diff_lines(text: str) -> list[str]:
    """``text``'s lines as git reads a patch: each ends after a ``\n`` (kept), the last one may lack it."""
    lines = text.split("\n")
    out = [line + "\n" for line in lines[:-1]]
    if lines[-1]:
        out.append(lines[-1])
    return out


def _hunk_end(lines: list[str], i: int) -> int:
    """Index after the hunk starting at ``lines[i]``; lenient about wrong line counts."""
    i += 1
    while i < len(lines):
        line = lines[i]
        if line.startswith(("diff --git ", "@@ ")):
            break
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            break
        if not (line[:1] in (" ", "-", "+", "\\") or line in ("\n", "\r\n")):
            break
        i += 1
    return i


def _binary_end(lines: list[str], i: int) -> int:
    """Index after a binary patch's blocks, where git's parser ends it: at most two (forward, reverse)
    ``literal N``/``delta N`` blocks, each closed by a blank line. Whatever follows is a new section."""
    for _ in range(2):
        if i >= len(lines) or not lines[i].startswith(("literal ", "delta ")):
            break
        i += 1
        # git's blank line is exactly "\n" (any other short line is a corrupt patch to it)
        while i < len(lines) and lines[i] != "\n" and not lines[i].startswith("diff --git "):
            i += 1
        if i < len(lines) and lines[i] == "\n":
            i += 1
    return i


def parse_diff(text: str) -> list[FilePatch]:
    """Split a unified diff (git's or plain ``---``/``+++``) into per-file sections."""
    lines = diff_lines(text)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    patches: list[FilePatch] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        git = line.startswith("diff --git ")
        plain = line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")
        if not (git or plain):
            i += 1  # preamble (commit message) or trailing text
            continue
        start = i
        patch = FilePatch(None, None, "")
        if git:
            patch.old_path, patch.new_path = _git_line_paths(line)
            i += 1
            while i < len(lines) and lines[i].startswith(HEADER_PREFIXES):
                _read_header(patch, lines[i])
                i += 1
        if i < len(lines) and lines[i].startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            patch.old_path, patch.new_path = _strip_prefix(lines[i][4:]), _strip_prefix(lines[i + 1][4:])
            i += 2
        if i < len(lines) and lines[i].startswith("GIT binary patch"):
            patch.binary = patch.binary_data = True
            i = _binary_end(lines, i + 1)
        elif i < len(lines) and lines[i].startswith("Binary files "):
            patch.binary = True
            i += 1
        while i < len(lines) and lines[i].startswith("@@ "):
            end = _hunk_end(lines, i)
            body = lines[i + 1 : end]
            patch.added += sum(line.startswith("+") for line in body)
            patch.removed += sum(line.startswith("-") for line in body)
            i = end
        patch.text = "".join(lines[start:i])
        patch.summary = _summary(lines[start:i])
        patches.append(patch)
    return patches


def _octal(mode: str) -> str:
    try:
        return f"{int(mode, 8):06o}"
    except ValueError:
        return mode


def _summary(lines: list[str]) -> tuple[str, ...]:
    """What git's ``--summary`` says of a section with these lines (see FilePatch.summary); git's own rules:
    a created or deleted file names its mode, any other section a mode change when the two modes differ."""
    head: dict[str, str] = {}
    for line in lines[1:]:
        if not line.startswith(HEADER_PREFIXES):
            break
        for prefix in ("new file mode ", "deleted file mode ", "old mode ", "new mode "):
            if line.startswith(prefix):
                head[prefix] = _octal(line[len(prefix) :].strip())
    if "new file mode " in head:
        return (f"create {head['new file mode ']}",)
    if "deleted file mode " in head:
        return (f"delete {head['deleted file mode ']}",)
    old, new = head.get("old mode "), head.get("new mode ")
    return (f"change {old} {new}",) if old and new and old != new else ()


def _read_header(patch: FilePatch, line: str) -> None:
    value = line.split()[-1] if line.split() else ""
    if line.startswith(("new file mode ", "deleted file mode ", "old mode ", "new mode ")):
        patch.modes += (value,)
        if line.startswith("new file mode "):
            patch.old_path = None
        elif line.startswith("deleted file mode "):
            patch.new_path = None
    elif line.startswith(("rename from ", "copy from ")):
        patch.old_path, patch.rename = _unquote(line.rstrip("\n").split(" ", 2)[2]), True
    elif line.startswith(("rename to ", "copy to ")):
        patch.new_path, patch.rename = _unquote(line.rstrip("\n").split(" ", 2)[2]), True
    elif line.startswith("index ") and len(parts := line.split()) == 3:
        patch.modes += (parts[2],)


def changed_paths(text: str) -> list[str]:
    """Every path a diff touches, in order, without duplicates."""
    return list(dict.fromkeys(p for patch in parse_diff(text) for p in patch.paths))
