"""The ``str_replace_editor`` tool (SWE-agent's file editor), working inside a sandbox.

Every file access goes through the sandbox (``read_file``, ``write_file``, ``exec``), never a host path, so
the agent edits exactly the filesystem its commands see. Files are decoded with ``surrogateescape`` so that
editing one line of a file with stray non-UTF-8 bytes writes the other bytes back unchanged.
Misuse (a relative path, a missing file, an ``old_str`` that is not unique...) raises ``EditorError`` whose
message is meant for the model.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from typing import Any, Protocol

from swebox.envs.agent.observations import ExecResultLike

SNIPPET_CONTEXT = 4
"""Lines shown above and below an edit in the confirmation snippet."""
_LINE = re.compile(r"[^\n]*\n|[^\n]+\Z")


class SandboxFiles(Protocol):
    """The sandbox methods the tools use (``swebox.envs.sandbox.Sandbox`` has them)."""

    def exec(self, command: str, timeout: float | None = None) -> ExecResultLike: ...

    def read_file(self, path: str) -> bytes: ...

    def write_file(self, path: str, data: bytes | str) -> None: ...


class EditorError(Exception):
    """A misuse of the editor; ``str(error)`` is the message to show the model."""


def split_lines(text: str) -> list[str]:
    """Lines with their ``\\n`` kept; only ``\\n`` ends a line (as for ``cat -n``): ``\\r`` is content."""
    return _LINE.findall(text)


def number_lines(lines: list[str], first: int) -> str:
    """``cat -n`` formatting: a right-aligned 6-wide line number, a tab, the line without its newline."""
    return "\n".join(f"{first + i:6}\t{line.removesuffix(chr(10))}" for i, line in enumerate(lines))


class Editor:
    """One episode's editor: the sandbox it edits and the undo history of each file it changed."""

    def __init__(self, sandbox: SandboxFiles, repo_dir: str = "/testbed", timeout_s: float = 30.0) -> None:
        self._sandbox = sandbox
        self._repo_dir = repo_dir
        self._timeout_s = timeout_s
        # Per path, the content before each edit, oldest first; None means the file did not exist.
        self._history: dict[str, list[bytes | None]] = {}

    def run(self, arguments: dict[str, Any]) -> str:
        """Run one validated ``str_replace_editor`` call (see ``swebox.envs.agent.actions``); returns its output."""
        command = arguments["command"]
        path = self._absolute(arguments["path"])
        if command == "view":
            return self.view(path, arguments.get("view_range"))
        if command == "create":
            return self.create(path, arguments["file_text"])
        if command == "str_replace":
            return self.str_replace(path, arguments["old_str"], arguments.get("new_str", ""))
        if command == "insert":
            return self.insert(path, arguments["insert_line"], arguments["new_str"])
        if command == "undo_edit":
            return self.undo_edit(path)
        raise EditorError(f"Unknown editor command {command!r}.")

    # ---- commands ----------------------------------------------------------------------------------------
    def view(self, path: str, view_range: list[int] | None = None) -> str:
        kind = self._kind(path)
        if kind == "missing":
            raise EditorError(f"The path {path} does not exist.")
        if kind == "dir":
            if view_range is not None:
                raise EditorError(f"view_range applies to files only, and {path} is a directory.")
            return self._list_dir(path)
        lines = split_lines(self._read_text(path))
        if view_range is None:
            return f"Here's the result of running `cat -n` on {path}:\n{number_lines(lines, 1)}"
        start, end = view_range
        if not lines:
            raise EditorError(f"{path} is empty; view it without view_range.")
        if not 1 <= start <= len(lines):
            raise EditorError(
                f"Invalid view_range {view_range}: the first number must be a line of the file, between 1 "
                f"and {len(lines)}."
            )
        if end == -1 or end > len(lines):
            end = len(lines)
        if end < start:
            raise EditorError(
                f"Invalid view_range {view_range}: the second number must be at least the first ({start}), "
                "or -1 for the end of the file."
            )
        shown = number_lines(lines[start - 1 : end], start)
        where = f"{path} (lines {start}-{end} of {len(lines)})"
        return f"Here's the result of running `cat -n` on {where}:\n{shown}"

    def create(self, path: str, file_text: str) -> str:
        kind = self._kind(path)
        if kind != "missing":
            what = "a directory" if kind == "dir" else "a file"
            raise EditorError(
                f"{path} already exists as {what}; `create` never overwrites. Use `str_replace` to edit a file."
            )
        parent = posixpath.dirname(path)
        made = self._sandbox.exec(f"mkdir -p {shlex.quote(parent)}", timeout=self._timeout_s)
        if made.exit_code != 0:
            raise EditorError(f"Could not create the directory {parent}: {made.output.strip()}")
        self._write(path, file_text.encode("utf-8", errors="surrogateescape"))
        self._history.setdefault(path, []).append(None)
        return f"File created successfully at: {path}"

    def str_replace(self, path: str, old_str: str, new_str: str) -> str:
        if old_str == "":
            raise EditorError("old_str is empty; give the exact text to replace (use `insert` to add lines).")
        text, before = self._read_file_for_edit(path)
        starts = _occurrences(text, old_str)
        if not starts:
            raise EditorError(
                f"No replacement was performed: old_str did not appear verbatim in {path}. Check whitespace "
                "and indentation, and view the file to copy the exact text."
            )
        if len(starts) > 1:
            numbers = sorted({text.count("\n", 0, i) + 1 for i in starts})
            where = ("line " if len(numbers) == 1 else "lines ") + ", ".join(map(str, numbers))
            raise EditorError(
                f"No replacement was performed: old_str occurs {len(starts)} times in {path}, at {where}. "
                "Include more surrounding lines in old_str so that it occurs exactly once."
            )
        new_text = text[: starts[0]] + new_str + text[starts[0] + len(old_str) :]
        self._save(path, before, new_text)
        first = text.count("\n", 0, starts[0]) + 1
        return self._edited(path, new_text, first, first + new_str.count("\n"))

    def insert(self, path: str, insert_line: int, new_str: str) -> str:
        text, before = self._read_file_for_edit(path)
        lines = split_lines(text)
        if not 0 <= insert_line <= len(lines):
            raise EditorError(
                f"Invalid insert_line {insert_line}: {path} has {len(lines)} lines; use 0 to insert at the "
                f"top, or a line number up to {len(lines)} to insert after that line."
            )
        if lines and insert_line == len(lines) and not lines[-1].endswith("\n"):
            lines[-1] += "\n"  # the last line had no newline; the inserted text goes on a line of its own
        inserted = new_str if new_str.endswith("\n") else new_str + "\n"
        new_text = "".join(lines[:insert_line]) + inserted + "".join(lines[insert_line:])
        self._save(path, before, new_text)
        return self._edited(path, new_text, insert_line + 1, insert_line + inserted.count("\n"))

    def undo_edit(self, path: str) -> str:
        history = self._history.get(path)
        if not history:
            raise EditorError(f"No edit history found for {path}.")
        previous = history.pop()
        if previous is None:
            removed = self._sandbox.exec(f"rm -f {shlex.quote(path)}", timeout=self._timeout_s)
            if removed.exit_code != 0:
                raise EditorError(f"Could not remove {path}: {removed.output.strip()}")
            return f"Last edit to {path} undone: the file that `create` made was removed."
        self._write(path, previous)
        lines = split_lines(previous.decode("utf-8", errors="surrogateescape"))
        shown = number_lines(lines, 1)
        return f"Last edit to {path} undone. Here's the result of running `cat -n` on {path}:\n{shown}"

    # ---- helpers -----------------------------------------------------------------------------------------
    def _absolute(self, path: str) -> str:
        if not path.startswith("/"):
            guess = posixpath.join(self._repo_dir, path)
            raise EditorError(f"The path {path} is not absolute; it must start with /. Did you mean {guess}?")
        return posixpath.normpath(path)

    def _kind(self, path: str) -> str:
        """'dir', 'file' or 'missing', as the sandbox sees the path."""
        q = shlex.quote(path)
        probe = f"if [ -d {q} ]; then echo dir; elif [ -e {q} ]; then echo file; else echo missing; fi"
        result = self._sandbox.exec(probe, timeout=self._timeout_s)
        words = result.output.split()
        if result.exit_code != 0 or not words or words[-1] not in ("dir", "file", "missing"):
            raise EditorError(f"Could not inspect {path}: {result.output.strip()[:500]}")
        return words[-1]

    def _list_dir(self, path: str) -> str:
        q = shlex.quote(path)
        # Hidden entries (.git, caches) are skipped, and so is everything under them.
        listing = f"find {q} -mindepth 1 -maxdepth 2 -name '.*' -prune -o -print | LC_ALL=C sort"
        result = self._sandbox.exec(listing, timeout=self._timeout_s)
        if result.exit_code != 0:
            raise EditorError(f"Could not list {path}: {result.output.strip()[:500]}")
        header = f"Files and directories up to 2 levels deep in {path}, excluding hidden items:\n"
        return header + result.output.rstrip("\n")

    def _read_text(self, path: str) -> str:
        try:
            data = self._sandbox.read_file(path)
        except Exception as exc:
            raise EditorError(f"Could not read {path}: {exc}") from exc
        if b"\x00" in data[:8192]:
            raise EditorError(f"{path} looks like a binary file (it contains NUL bytes); use bash for it.")
        return data.decode("utf-8", errors="surrogateescape")

    def _read_file_for_edit(self, path: str) -> tuple[str, bytes]:
        kind = self._kind(path)
        if kind != "file":
            what = "does not exist" if kind == "missing" else "is a directory"
            raise EditorError(f"{path} {what}; only existing files can be edited (`create` makes new ones).")
        text = self._read_text(path)
        return text, text.encode("utf-8", errors="surrogateescape")

    def _save(self, path: str, before: bytes, new_text: str) -> None:
        self._write(path, new_text.encode("utf-8", errors="surrogateescape"))
        self._history.setdefault(path, []).append(before)

    def _write(self, path: str, data: bytes) -> None:
        try:
            self._sandbox.write_file(path, data)
        except Exception as exc:
            raise EditorError(f"Could not write {path}: {exc}") from exc

    def _edited(self, path: str, new_text: str, first: int, last: int) -> str:
        lines = split_lines(new_text)
        start = max(1, first - SNIPPET_CONTEXT)
        end = min(len(lines), last + SNIPPET_CONTEXT)
        snippet = number_lines(lines[start - 1 : end], start)
        return (
            f"The file {path} has been edited. Here's the result of running `cat -n` on a snippet of it:\n"
            f"{snippet}\nReview the changes and make sure they are as expected; edit again if needed."
        )


def _occurrences(text: str, needle: str) -> list[int]:
    """Start offsets of every occurrence of ``needle``, overlapping ones included: "aa" in "aaa" is
    ambiguous (two places it could mean), even though ``str.count`` finds it once."""
    starts, i = [], text.find(needle)
    while i != -1:
        starts.append(i)
        i = text.find(needle, i + 1)
    return starts
