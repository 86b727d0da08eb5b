"""Which parts of an agent's diff the grader applies: only those that change what an agent may change.

The grader applies an agent's diff restricted to source files. Everything that decides how tests run or
what they report is test infrastructure and is dropped with a reason: test files (those the task names and
anything that looks like a test), every ``conftest.py``, test configuration (``pytest.ini``, ``tox.ini``,
``setup.cfg``, ``pyproject.toml``), interpreter start-up hooks (``sitecustomize.py``, ``usercustomize.py``,
``*.pth``), git's own control files (``.gitignore`` and friends), packaging metadata (``*.egg-info``/
``*.dist-info``: entry points auto-load pytest plugins), compiled bytecode, modules that would shadow the test
runner, the virtualenv, ``.git``, symlinks and submodules, and paths holding control characters.
A rename is judged by both its paths, so a test cannot be deleted by renaming it into the source tree.

Parsing lives in :mod:`~swebox.envs.tasks.graders.diff_parse`, reversing in
:mod:`~swebox.envs.tasks.graders.diff_reverse`; their public names are also re-exported here, where callers
(and the old module name ``swebox.envs.tasks.diffs``) have always found them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from swebox.envs.tasks.graders.diff_parse import FilePatch, changed_paths, diff_lines, parse_diff
from swebox.envs.tasks.graders.diff_reverse import reverse_diff

__all__ = [
    "GIT_CONTROL_FILES",
    "OWN_RUNNER_MODULES",
    "RUNNER_MODULES",
    "STARTUP_HOOKS",
    "TEST_CONFIG_FILES",
    "TEST_DIRS",
    "VENV_DIRS",
    "FilePatch",
    "FilteredDiff",
    "changed_paths",
    "diff_lines",
    "drop_reason",
    "filter_diff",
    "own_modules",
    "parse_diff",
    "protected_reason",
    "reverse_diff",
    "special_mode",
]

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
class FilteredDiff:
    """An agent's diff split into what will be applied and what was dropped."""

    text: str
    """The kept sections, concatenated: the diff the grader applies ('' when nothing is kept)."""
    kept: list[FilePatch] = field(default_factory=list)
    """Sections that change only allowed source files."""
    dropped: list[tuple[str, str]] = field(default_factory=list)
    """(path, reason) for every section that was removed."""


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
