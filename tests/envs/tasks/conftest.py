"""Fixtures for the tasks tests: a small git repository the tests write themselves."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from swebox.envs.tasks import Task


def git(repo: Path, *args: str, input: bytes | None = None) -> bytes:
    """Run git in ``repo`` with a fixed identity; raise with its output on failure."""
    cmd = ["git", "-c", "user.email=t@t", "-c", "user.name=t", "-c", "commit.gpgsign=false", *args]
    proc = subprocess.run(cmd, cwd=repo, input=input, capture_output=True)
    if proc.returncode:
        raise AssertionError(f"git {' '.join(args)} failed: {proc.stderr.decode(errors='replace')}")
    return proc.stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """An empty git repository on branch main."""
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    return path


def diff_of(repo: Path, change) -> str:
    """Commit the current tree, apply ``change(repo)``, return `git diff --binary` and reset to the commit."""
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", "base")
    change(repo)
    git(repo, "add", "-A")
    text = git(repo, "diff", "--cached", "--binary", "-M", "HEAD").decode()
    git(repo, "reset", "-q", "--hard", "HEAD")
    git(repo, "clean", "-qfdx")
    return text


@pytest.fixture(name="git")
def git_fixture():
    """The :func:`git` helper, for tests (test modules here are not a package, so they cannot import it)."""
    return git


@pytest.fixture(name="diff_of")
def diff_of_fixture():
    """The :func:`diff_of` helper."""
    return diff_of


# -- a fixture environment layer for grading tests ---------------------------------------------------------
# The layer is built the way the cache builder builds real ones: inside a sandbox, so /venv's shebangs and
# pyvenv.cfg point at paths that exist in every later sandbox. pytest comes from the machine's local wheel
# folder; the project is made importable with a .pth file, like an editable install.

CALC_OPS = """\
def add(a, b):
    return a - b


def sub(a, b):
    return a - b


def mul(a, b):
    return a * b


def div(a, b):
    return a // b
"""
CALC_TESTS = """\
import pytest

from calc.ops import add, div, mul, sub


def test_add():
    assert add(2, 3) == 5


def test_div():
    assert div(7, 2) == 3.5


def test_sub():
    assert sub(5, 3) == 2


def test_mul():
    assert mul(4, 3) == 12


@pytest.mark.parametrize("a, b", [(1, 2), (0, 0)])
def test_mul_commutes(a, b):
    assert mul(a, b) == mul(b, a)


class TestMore:
    def test_sub_negative(self):
        assert sub(1, 2) == -1
"""
CALC_FILES = {
    "calc/__init__.py": "",
    "calc/ops.py": CALC_OPS,
    "tests/test_ops.py": CALC_TESTS,
    # a hostile-looking but pristine config: the grader must neutralise addopts itself
    "pytest.ini": "[pytest]\naddopts = -k 'not add'\n",
    "README.md": "calc\n",
}
@pytest.fixture(scope="session")
def calc_layer():
    """An env layer: /testbed = the calc project (add is buggy, div too) in git; /venv with pytest."""
    from tests.fixture_env import build_env_layer, discard_env_layer

    layer = build_env_layer(CALC_FILES, "calc")
    yield layer
    discard_env_layer(layer)


GOLD_ADD = (
    "diff --git a/calc/ops.py b/calc/ops.py\n--- a/calc/ops.py\n+++ b/calc/ops.py\n"
    "@@ -1,5 +1,5 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n \n \n def sub(a, b):\n"
)
GOLD_DIV = (
    "diff --git a/calc/ops.py b/calc/ops.py\n--- a/calc/ops.py\n+++ b/calc/ops.py\n"
    "@@ -13,2 +13,2 @@ def mul(a, b):\n def div(a, b):\n-    return a // b\n+    return a / b\n"
)


@pytest.fixture
def calc_task():
    """A task over calc_layer: add is the bug; the other tests must keep passing."""
    from swebox.envs.tasks import Task

    return Task(
        instance_id="calc-add",
        repo="local/calc",
        patch=GOLD_ADD,
        FAIL_TO_PASS=["tests/test_ops.py::test_add"],
        PASS_TO_PASS=[
            "tests/test_ops.py::test_sub",
            "tests/test_ops.py::test_mul",
            "tests/test_ops.py::test_mul_commutes[1-2]",
            "tests/test_ops.py::test_mul_commutes[0-0]",
            "tests/test_ops.py::TestMore::test_sub_negative",
        ],
    )


@pytest.fixture
def gold():
    """The calc fixes as diffs: {'add': ..., 'div': ...}."""
    return {"add": GOLD_ADD, "div": GOLD_DIV}


# -- the calc task graded from its pytest -rA log (grader='log', SWE-bench's pytest parser) ------------------
CALC_TEST_PATCH = (
    "diff --git a/tests/test_spaces.py b/tests/test_spaces.py\nnew file mode 100644\n--- /dev/null\n"
    "+++ b/tests/test_spaces.py\n@@ -0,0 +1,6 @@\n+import pytest\n+\n+from calc.ops import add\n+\n+\n"
    "+@pytest.mark.parametrize(\"a\", [1], ids=[\"one plus two\"])\n"
)
CALC_TEST_PATCH = CALC_TEST_PATCH.replace("@@ -0,0 +1,6 @@", "@@ -0,0 +1,8 @@") + (
    "+def test_add_ids(a):\n+    assert add(a, 2) == 3\n"
)


def calc_log_task(calc_task: Task, parser: str = "pytest") -> Task:
    # -o addopts= because calc's pytest.ini deselects the add tests; a log-graded task's command is its own.
    return dataclasses.replace(
        calc_task,
        grader="log",
        log_parser=parser,
        test_cmd="/venv/bin/python -m pytest -rA --tb=no -p no:cacheprovider -o addopts= tests/test_ops.py "
        "tests/test_spaces.py",
        test_patch=CALC_TEST_PATCH,
        FAIL_TO_PASS=(*calc_task.FAIL_TO_PASS, "tests/test_spaces.py::test_add_ids[one plus two]"),
    )


@pytest.fixture(params=["junit", "log"])
def graded_task(request, calc_task):
    """calc_task graded either way: swebox's JUnit grader, or the log grader (tamper tests run under both)."""
    return calc_task if request.param == "junit" else calc_log_task(calc_task)
