"""Unified git diffs: split into per-file pieces, keep only what an agent may change, and reverse.

The grader applies an agent's diff restricted to source files. Everything that decides how tests run or
what they report is test infrastructure and is dropped with a reason: test files (those the task names and
anything that looks like a test), every ``conftest.py``, test configuration (``pytest.ini``, ``tox.ini``,
``setup.cfg``, ``pyproject.toml``), interpreter start-up hooks (``sitecustomize.py``, ``usercustomize.py``,
``*.pth``), git's own control files (``.gitignore`` and friends), packaging metadata (``*.egg-info``/
``*.dist-info``: entry points auto-load pytest plugins), compiled bytecode, modules that would shadow the test
runner, the virtualenv, ``.git``, symlinks and submodules, and paths holding control characters.
A rename is judged by both its paths, so a test cannot be deleted by renaming it into the source tree.

Lines are split the way git splits them: after ``\n`` and nowhere else (:func:`diff_lines`). ``str.splitlines``
also breaks on ``\r``, ``\f``, ``\v``, ``\x1c``-``\x1e``, ``\x85``, ``\u2028`` and ``\u2029``; a ``+`` line holding
one of them would end a hunk early here and not in git, and the grader would apply a tree the agent never had.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")
_HEADER_PREFIXES = (
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
# Every file pytest (7-9) reads its configuration from, plus what its common plugins and project runners read.
TEST_CONFIG_FILES = frozenset(
    {
        "pytest.ini",
        ".pytest.ini",
        "pytest.toml",
        ".pytest.toml",
        "tox.ini",
        "setup.cfg",
        "pyproject.toml",
        ".coveragerc",
        "noxfile.py",
        "runtests.py",
        "run_tests.py",
    }
)
# What git reads when the grader asks it what changed: a new `.gitignore` could hide a planted file.
GIT_CONTROL_FILES = frozenset({".gitignore", ".gitattributes", ".gitmodules"})
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")
_FILE_TYPE = 0o170000
_SPECIAL_TYPES = {0o120000: "symlink", 0o160000: "submodule (gitlink)"}
STARTUP_HOOKS = frozenset({"sitecustomize.py", "usercustomize.py"})
RUNNER_MODULES = frozenset({"pytest", "_pytest", "pluggy", "py", "iniconfig", "xdist", "pytest_timeout"})
OWN_RUNNER_MODULES = {
    "pytest-dev/pytest": frozenset({"pytest", "_pytest"}),
    "pytest-dev/pluggy": frozenset({"pluggy"}),
    "pytest-dev/py": frozenset({"py"}),
    "pytest-dev/iniconfig": frozenset({"iniconfig"}),
    "pytest-dev/pytest-xdist": frozenset({"xdist"}),
    "pytest-dev/pytest-timeout": frozenset({"pytest_timeout"}),
}
"""Repositories that are one of RUNNER_MODULES: there that module is the code under test (every fix of a
pytest-dev/pytest row is in ``src/_pytest/``), not a shadow of the runner, so it is not protected; the log
grader's canaries still see a runner changed to pass everything."""
TEST_DIRS = frozenset({"test", "tests", "testing"})
VENV_DIRS = frozenset({"venv", ".venv"})


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


@dataclass
class FilteredDiff:
    """An agent's diff split into what will be applied and what was dropped."""

    text: str
    """The kept sections, concatenated: the diff the grader applies ('' when nothing is kept)."""
    kept: list[FilePatch] = field(default_factory=list)
    """Sections that change only allowed source files."""
    dropped: list[tuple[str, str]] = field(default_factory=list)
    """(path, reason) for every section that was removed."""


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
            while i < len(lines) and lines[i].startswith(_HEADER_PREFIXES):
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
        if not line.startswith(_HEADER_PREFIXES):
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


def own_modules(repo: str) -> frozenset[str]:
    """The runner modules that are ``repo``'s own source (:data:`OWN_RUNNER_MODULES`; none for most)."""
    return OWN_RUNNER_MODULES.get(repo, frozenset())


def protected_reason(path: str, test_files: Iterable[str] = (), own: frozenset[str] = frozenset()) -> str:
    """Why ``path`` may not be changed by an agent ('' when it may); ``own``: :func:`own_modules`."""
    parts = path.split("/")
    name = parts[-1]
    if path.startswith("/") or ".." in parts or not path:
        return "path outside the repository"
    if _CONTROL_CHARS.search(path):
        # git and this parser disagree about such names (a trailing CR is dropped by git, kept here)
        return "control character in the path"
    if path in set(test_files):
        return "test file named by the task"
    if parts[0] in VENV_DIRS or parts[0] == ".git" or ".git" in parts:
        return "virtualenv or git metadata"
    if name == "conftest.py":
        return "conftest.py (pytest plugin)"
    if name in TEST_CONFIG_FILES or path == "bin/test":
        return "test configuration"
    if name in GIT_CONTROL_FILES:
        return "git control file (changes what git reports as changed)"
    if name in STARTUP_HOOKS or name.endswith(".pth"):
        return "interpreter start-up hook"
    if any(p.endswith((".egg-info", ".dist-info")) for p in parts):
        return "packaging metadata (entry points can load pytest plugins)"
    if "__pycache__" in parts or name.endswith((".pyc", ".pyo")):
        return "compiled bytecode"
    if any(m in RUNNER_MODULES and m not in own for m in (p.removesuffix(".py") for p in parts)):
        return "module name that shadows the test runner"
    if any(p in TEST_DIRS for p in parts[:-1]):
        return "file in a test directory"
    if name.startswith("test_") or name.endswith(("_test.py", "_tests.py")) or name in ("tests.py", "test.py"):
        return "test file"
    return ""


def drop_reason(patch: FilePatch, test_files: Iterable[str] = (), own: frozenset[str] = frozenset()) -> str:
    """Why this section may not be applied ('' when it may)."""
    test_files = list(test_files)
    for path in patch.paths:
        reason = protected_reason(path, test_files, own)
        if reason:
            return f"{reason}: {path}"
    if not patch.paths:
        return "no file path in the section"
    for mode in patch.modes:
        kind = special_mode(mode)
        if kind:
            return kind
    if patch.binary and not patch.binary_data:
        return "binary change without data (use git diff --binary)"
    return ""


def special_mode(mode: str) -> str:
    """'symlink', 'submodule (gitlink)', 'malformed mode' or '' for a plain file mode as git reads it (octal)."""
    try:
        value = int(mode, 8)
    except ValueError:
        return "malformed mode"
    return _SPECIAL_TYPES.get(value & _FILE_TYPE, "")


def filter_diff(text: str, test_files: Iterable[str] = (), own: frozenset[str] = frozenset()) -> FilteredDiff:
    """Keep only the sections that change allowed source files (``own``: :func:`own_modules` of the repo)."""
    test_files = list(test_files)
    result = FilteredDiff("")
    for patch in parse_diff(text):
        reason = drop_reason(patch, test_files, own)
        if reason:
            result.dropped.append((patch.new_path or patch.old_path or "?", reason))
        else:
            result.kept.append(patch)
    result.text = "".join(p.text for p in result.kept)
    return result


def changed_paths(text: str) -> list[str]:
    """Every path a diff touches, in order, without duplicates."""
    return list(dict.fromkeys(p for patch in parse_diff(text) for p in patch.paths))


def _reverse_hunk(lines: list[str]) -> list[str]:
    """Swap the sides of one hunk, keeping git's order (removals before additions in each change block)."""
    head = _HUNK.match(lines[0].rstrip("\n"))
    if head is None:
        raise ValueError(f"reverse_diff: expected a hunk header '@@ -a,b +c,d @@'; found {lines[0]!r}.")
    a, b, c, d, section = head.groups()
    out = [f"@@ -{c}{',' + d if d is not None else ''} +{a}{',' + b if b is not None else ''} @@{section}\n"]
    # Each line carries its '\ No newline' marker along when it moves.
    items: list[str] = []
    for line in lines[1:]:
        if line.startswith("\\") and items:
            items[-1] += line
        else:
            items.append(line)
    minus: list[str] = []
    plus: list[str] = []
    for item in [*items, None]:
        if item is not None and item[:1] in ("+", "-"):
            flipped = ("-" if item[0] == "+" else "+") + item[1:]
            (minus if flipped[0] == "-" else plus).append(flipped)
            continue
        out += minus + plus
        minus, plus = [], []
        if item is not None:
            out.append(item)
    return out


def _swap_binary(lines: list[str]) -> list[str]:
    """A git binary patch holds the forward block then the reverse block; swap them."""
    body = lines[1:]
    blocks: list[list[str]] = [[]]
    for line in body:
        if line == "\n":
            blocks.append([])
        else:
            blocks[-1].append(line)
    blocks = [b for b in blocks if b]
    if len(blocks) != 2:
        raise ValueError(
            "reverse_diff: a binary patch without its reverse block cannot be reversed; "
            "produce it with `git diff --binary`."
        )
    return [lines[0], *blocks[1], "\n", *blocks[0], "\n"]


def _reverse_section(patch: FilePatch) -> str:
    lines = diff_lines(patch.text)
    old, new = patch.old_path, patch.new_path
    out: list[str] = []
    i = 0
    if lines[0].startswith("diff --git "):
        out.append(f"diff --git a/{new or old} b/{old or new}\n")
        i = 1
    swaps = {
        "old mode ": "new mode ",
        "new mode ": "old mode ",
        "new file mode ": "deleted file mode ",
        "deleted file mode ": "new file mode ",
        "rename from ": "rename to ",
        "rename to ": "rename from ",
    }
    header: list[str] = []
    while i < len(lines) and lines[i].startswith(_HEADER_PREFIXES):
        line = lines[i]
        prefix = next((p for p in swaps if line.startswith(p)), None)
        if line.startswith(("copy from ", "copy to ")):
            raise ValueError("reverse_diff: a copy cannot be reversed into a diff; expected no 'copy from'.")
        if prefix:
            line = swaps[prefix] + line[len(prefix) :]
        elif line.startswith("index "):
            ids, *mode = line[len("index ") :].split(" ", 1)
            left, _, right = ids.partition("..")
            line = f"index {right.rstrip(chr(10))}..{left}" + (f" {mode[0]}" if mode else "\n")
        header.append(line)
        i += 1
    # git wants 'rename from' before 'rename to' and 'old mode' before 'new mode'.
    order = {"old mode ": 0, "new mode ": 1, "rename from ": 2, "rename to ": 3}
    header.sort(key=lambda h: next((v for k, v in order.items() if h.startswith(k)), -1))
    out += header
    if i < len(lines) and lines[i].startswith("--- "):
        out.append("--- " + (f"a/{new}" if new else "/dev/null") + "\n")
        out.append("+++ " + (f"b/{old}" if old else "/dev/null") + "\n")
        i += 2
    if i < len(lines) and lines[i].startswith("GIT binary patch"):
        return "".join(out + _swap_binary(lines[i:]))
    if i < len(lines) and lines[i].startswith("Binary files "):
        return "".join(
            out
            + [f"Binary files {'a/' + new if new else '/dev/null'} and {'b/' + old if old else '/dev/null'} differ\n"]
        )
    while i < len(lines):
        end = i + 1
        while end < len(lines) and not lines[end].startswith("@@ "):
            end += 1
        out += _reverse_hunk(lines[i:end])
        i = end
    return "".join(out)


def reverse_diff(text: str) -> str:
    """The diff that undoes ``text`` (SWE-smith stores the bug; a task's ``patch`` is the fix)."""
    return "".join(_reverse_section(p) for p in parse_diff(text))
