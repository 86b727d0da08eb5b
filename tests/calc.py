"""The calc fixture project: its files (add and div are buggy), gold patches, the task over it and scripted replies.

Its env layer is the session fixture ``calc_layer`` of tests/conftest.py (built once per test process, inside a
sandbox, the way the cache builder builds real ones); test modules import the helpers here.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from swebox.envs.cache import EnvSpec
from swebox.envs.tasks import Task

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
GOLD_ADD = (
    "diff --git a/calc/ops.py b/calc/ops.py\n--- a/calc/ops.py\n+++ b/calc/ops.py\n"
    "@@ -1,5 +1,5 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n \n \n def sub(a, b):\n"
)
GOLD_DIV = (
    "diff --git a/calc/ops.py b/calc/ops.py\n--- a/calc/ops.py\n+++ b/calc/ops.py\n"
    "@@ -13,2 +13,2 @@ def mul(a, b):\n def div(a, b):\n-    return a // b\n+    return a / b\n"
)


CALC_ENV = EnvSpec(source="/fixture/calc", commit="0123456789abcdef")
"""A stand-in env spec: its key names the calc layer's folder in a layer-dirs folder."""


def calc_task(**fields) -> Task:
    """The calc task: add is the bug (F2P test_add); the other tests must keep passing."""
    base = dict(
        instance_id="calc-add",
        repo="local/calc",
        patch=GOLD_ADD,
        problem_statement="add(2, 3) returns -1 instead of 5.",
        FAIL_TO_PASS=["tests/test_ops.py::test_add"],
        PASS_TO_PASS=[
            "tests/test_ops.py::test_sub",
            "tests/test_ops.py::test_mul",
            "tests/test_ops.py::test_mul_commutes[1-2]",
            "tests/test_ops.py::test_mul_commutes[0-0]",
            "tests/test_ops.py::TestMore::test_sub_negative",
        ],
        env=CALC_ENV,
    )
    base.update(fields)
    return Task(**base)


FLAKY_ID = "tests/test_flaky.py::test_state"
# a hidden test whose outcome is read from a file of the task's own layer: the host changes it between runs,
# so its status differs between identical grades of the same diff (what a flaky test is)
FLAKY_TEST_PATCH = (
    "diff --git a/tests/test_flaky.py b/tests/test_flaky.py\nnew file mode 100644\n--- /dev/null\n"
    "+++ b/tests/test_flaky.py\n@@ -0,0 +1,2 @@\n+def test_state():\n"
    "+    assert open('/flaky/state').read().strip() == 'pass'\n"
)


def flaky_task() -> Task:
    """The calc task plus the hidden flaky test (a P2P test), over its own task layer ``flaky``."""
    good = calc_task()
    return calc_task(
        instance_id="calc-flaky",
        task_layer_key="flaky",
        test_patch=FLAKY_TEST_PATCH,
        PASS_TO_PASS=[*good.PASS_TO_PASS, FLAKY_ID],
    )


def flaky_layer(root: Path) -> Path:
    """The flaky task's layer under a layer-dirs folder ``root``: /flaky/state, 'pass' until changed; returns
    the state file."""
    (root / "flaky" / "flaky").mkdir(parents=True)
    state = root / "flaky" / "flaky" / "state"
    state.write_text("pass\n")
    return state


def layer_dirs(tmp_path: Path, calc: Path) -> Path:
    """A LayerSource.dirs folder holding the calc layer under its env key (a symlink)."""
    root = tmp_path / "layer-dirs"
    root.mkdir()
    (root / CALC_ENV.key()).symlink_to(calc)
    return root


def bash(command: str) -> str:
    """A bash_block reply running ``command``."""
    return f"I will run a command.\n```bash\n{command}\n```"


def apply_patch(diff: str) -> str:
    """A bash_block reply that applies ``diff`` with git apply from a here-document."""
    return bash(f"cd /testbed && git apply <<'SWEBOX_EOF'\n{diff}SWEBOX_EOF")


SUBMIT = bash("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")
GOLD = GOLD_ADD


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
