"""Grading's rewritten-test cache (envs/tasks/graders/rewrite_cache.py), in real sandboxes over the calc fixture layer.

What it must never do: hold the fix, take anything the agent's diff or its code wrote, or change a verdict.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import marshal
from pathlib import Path

import pytest
from _pytest.assertion.rewrite import rewrite_asserts
from swebox.envs.tasks.graders import runner_origins
from swebox.envs.tasks.graders.grading import grade
from swebox.envs.tasks.graders.rewrite_cache import PLAIN_SUFFIX, plain_tables
from swebox.envs.tasks.graders.rewrite_tests import entry_name

from tests.calc import CALC_TESTS

TEST_FILE = "/testbed/tests/test_ops.py"
PRISTINE = entry_name(TEST_FILE, CALC_TESTS.encode())
TABLE = PRISTINE + PLAIN_SUFFIX
"""The entry's table of tests nothing may wrap (runner_origins.plain_tests of the same pristine bytes)."""


@pytest.fixture
def cache_root(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "rewritten"
    monkeypatch.setenv("SWEBOX_REWRITE_CACHE", str(root))
    return root


def entries(root: Path) -> dict[str, bytes]:
    """Every entry of every task folder under root: name -> sha256 of its bytes."""
    return {p.name: hashlib.sha256(p.read_bytes()).digest() for p in root.glob("*/*") if p.is_file()}


def outcomes(report) -> dict[str, tuple[str, str]]:
    return {test_id: (t.status, t.message) for test_id, t in report.tests.items()}


def test_verdicts_are_the_same_with_and_without_the_cache(calc_layer, calc_task, gold, cache_root):
    off = {
        diff: grade(calc_task, gold[diff] if diff else "", layers=[calc_layer], rewrite_cache_on=False)
        for diff in ("add", "")
    }
    assert off["add"].resolved and not off[""].resolved and off["add"].rewritten == {}
    cold = grade(calc_task, gold["add"], layers=[calc_layer])
    assert cold.rewritten == {"entries": 1, "compiled": 1}
    assert set(entries(cache_root)) == {PRISTINE, TABLE}
    warm = {diff: grade(calc_task, gold[diff] if diff else "", layers=[calc_layer]) for diff in ("add", "")}
    assert all(r.rewritten == {"entries": 1, "compiled": 0} for r in warm.values())
    for report in (cold, warm["add"]):
        assert report.resolved and report.reward == 1.0 and report.errors == [] and report.tampered == []
        assert outcomes(report) == outcomes(off["add"])
    assert not warm[""].resolved and warm[""].reward == 0.0
    # the failure message is pytest's assertion rewriting at work, from the cached code
    assert outcomes(warm[""]) == outcomes(off[""])
    assert "assert -1 == 5" in warm[""].tests["tests/test_ops.py::test_add"].message


def test_an_entry_holds_only_the_pristine_test_file_whatever_the_diff(
    calc_layer, calc_task, gold, tmp_path, monkeypatch
):
    # The same task graded with the fix and with nothing, each into a cache of its own: the entries are the
    # same bytes under the same name, so no entry can carry a fix (or anything else of a diff).
    made = {}
    for name, diff in (("gold", gold["add"]), ("empty", "")):
        monkeypatch.setenv("SWEBOX_REWRITE_CACHE", str(tmp_path / name))
        grade(calc_task, diff, layers=[calc_layer])
        made[name] = entries(tmp_path / name)
    assert made["gold"] == made["empty"] and set(made["gold"]) == {PRISTINE, TABLE}
    # ... and the entry is pytest's rewrite of the pristine file, for its path in the sandbox
    data = next((tmp_path / "gold").glob(f"*/{PRISTINE}")).read_bytes()
    magic = importlib.util.MAGIC_NUMBER
    assert data[: len(magic)] == magic
    tree = ast.parse(CALC_TESTS.encode(), filename=TEST_FILE)
    rewrite_asserts(tree, CALC_TESTS.encode(), TEST_FILE, None)
    assert marshal.loads(data[len(magic) :]) == compile(tree, TEST_FILE, "exec", dont_inherit=True)


def test_an_agents_diff_cannot_poison_the_cache(calc_layer, calc_task, gold, cache_root):
    grade(calc_task, "", layers=[calc_layer])  # fill the cache
    before = entries(cache_root)
    folder = next(cache_root.iterdir())
    passing = compile("def test_add():\n    pass\n", TEST_FILE, "exec")
    forged = importlib.util.MAGIC_NUMBER + marshal.dumps(passing)
    # No fix; at import the project's code tries to overwrite the test file's entry (and add a new one) with a
    # test_add that passes. The diff also changes the test file and adds a pytest pyc of it in __pycache__
    # (both dropped by the filter, and the entry is named by the restored file's bytes).
    attack = (
        "import os\n"
        "_refused = []\n"
        f"for _name in ({PRISTINE!r}, 'x' * 64):\n"
        "    try:\n"
        f"        with open(os.path.join({str(folder)!r}, _name), 'wb') as _fh:\n"
        f"            _fh.write({forged!r})\n"
        "    except OSError as _exc:\n"
        "        _refused.append(_exc.strerror)\n"
        "from calc import ops\n"
        "ops.add = lambda a, b: ' / '.join(_refused) or 'written'  # the refusals show in test_add's message\n"
    )
    lines = attack.splitlines(keepends=True)
    diff = (
        "diff --git a/calc/__init__.py b/calc/__init__.py\n--- a/calc/__init__.py\n+++ b/calc/__init__.py\n"
        f"@@ -0,0 +1,{len(lines)} @@\n"
        + "".join("+" + line for line in lines)
        + "diff --git a/tests/test_ops.py b/tests/test_ops.py\n--- a/tests/test_ops.py\n+++ b/tests/test_ops.py\n"
        "@@ -6,2 +6,2 @@ from calc.ops import add, div, mul, sub\n def test_add():\n"
        "-    assert add(2, 3) == 5\n+    assert add(2, 3) == -1\n"
        "diff --git a/tests/__pycache__/test_ops.cpython-311-pytest-9.2.0.pyc "
        "b/tests/__pycache__/test_ops.cpython-311-pytest-9.2.0.pyc\nnew file mode 100644\n"
        "--- /dev/null\n+++ b/tests/__pycache__/test_ops.cpython-311-pytest-9.2.0.pyc\n@@ -0,0 +1 @@\n+forged\n"
    )
    poisoner = grade(calc_task, diff, layers=[calc_layer])
    assert {path for path, _ in poisoner.dropped} == {
        "tests/test_ops.py",
        "tests/__pycache__/test_ops.cpython-311-pytest-9.2.0.pyc",
    }
    assert poisoner.applied and not poisoner.resolved and poisoner.reward == 0.0
    add = poisoner.tests["tests/test_ops.py::test_add"]
    assert add.status == "failed" and "'Read-only file system / Read-only file system' == 5" in add.message
    assert entries(cache_root) == before  # nothing changed, nothing added
    after = {diff: grade(calc_task, gold[diff] if diff else "", layers=[calc_layer]) for diff in ("add", "")}
    assert after["add"].resolved and not after[""].resolved
    assert after[""].tests["tests/test_ops.py::test_add"].status == "failed"


def test_the_runner_takes_the_cached_code(calc_layer, calc_task, cache_root):
    # What makes a warm grade fast is also why only the host may write the folder: the runner gives pytest the
    # entry's code for the test file. A doctored entry under the pristine name (no sandbox can write one)
    # shows it: the bug's test passes with an empty diff.
    grade(calc_task, "", layers=[calc_layer])
    entry = next(cache_root.glob(f"*/{PRISTINE}"))
    doctored = CALC_TESTS.replace("assert add(2, 3) == 5", "assert add(2, 3) == -1")
    entry.write_bytes(importlib.util.MAGIC_NUMBER + marshal.dumps(compile(doctored, TEST_FILE, "exec")))
    report = grade(calc_task, "", layers=[calc_layer])
    assert report.rewritten == {"entries": 1, "compiled": 0}
    assert report.tests["tests/test_ops.py::test_add"].status == "passed"


def test_a_cache_folder_someone_else_can_write_is_refused(tmp_path, monkeypatch):
    from swebox.envs.tasks.graders.rewrite_cache import folder_for

    root = tmp_path / "planted"
    root.mkdir()
    root.chmod(0o777)
    monkeypatch.setenv("SWEBOX_REWRITE_CACHE", str(root))
    with pytest.raises(RuntimeError, match="only it can write"):
        folder_for(["/layers/env"], "/venv/bin/python")


def test_the_plain_tests_table_is_the_runners_own_reading_of_the_pristine_file(
    calc_layer, calc_task, gold, cache_root, tmp_path
):
    # The table the runner is handed instead of parsing the test file is what runner_origins.plain_tests reads
    # from the pristine file (here on the host, there by the task's interpreter), whatever the diff was
    for diff in (gold["add"], ""):
        grade(calc_task, diff, layers=[calc_layer])
    entry = next(cache_root.glob(f"*/{PRISTINE}"))
    copy = tmp_path / "tests" / "test_ops.py"
    copy.parent.mkdir()
    copy.write_text(CALC_TESTS)
    expected = runner_origins.plain_tests([str(copy)])[str(copy)]
    assert expected  # the fixture's tests are plain defs: the check has something to compare
    assert plain_tables({TEST_FILE: str(entry)}) == {TEST_FILE: sorted(expected)}
    # a missing or unreadable table is no table: the runner parses that file itself
    assert plain_tables({TEST_FILE: str(tmp_path / "nothing")}) == {}
