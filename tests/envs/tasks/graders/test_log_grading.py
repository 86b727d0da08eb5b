"""The 'log' grader: SWE-bench's parsers on real test logs (Django's runtests.py, sympy's runner, pytest -rA).

The e2e tests run the projects' own test runners from PyPI sdists in sandboxes on small selections and check
that the gold patch resolves and an empty or wrong one does not, with the statuses the parsers read.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
from swebox.envs.tasks import Task, TaskError
from swebox.envs.tasks.graders import log_canaries, log_grading, log_parsers, swebench_harness
from swebox.envs.tasks.graders.grading import GradeReport, grade

from tests.calc import CALC_TEST_PATCH, calc_log_task
from tests.sdist_env import build_sdist_layer, sdist

# the real SWE-bench Verified test split (500 rows); $SWEBOX_VERIFIED_PARQUET points elsewhere
_VERIFIED = Path(os.environ.get("SWEBOX_VERIFIED_PARQUET", "/work/shared/data/swe-bench-verified.parquet"))

# -- Django 5.0 (runs on Python 3.11, like Verified's django 5.0 rows) ------------------------------------------
DJ_TEST_PATCH = (
    "diff --git a/tests/utils_tests/test_text.py b/tests/utils_tests/test_text.py\n"
    "--- a/tests/utils_tests/test_text.py\n+++ b/tests/utils_tests/test_text.py\n"
    "@@ -13,4 +13,11 @@ IS_WIDE_BUILD = len(\"\\U0001F4A9\") == 1\n \n \n class TestUtilsText(SimpleTestCase):\n"
    "+    def test_capfirst_plain(self):\n"
    "+        self.assertEqual(text.capfirst(\"hello\"), \"Hello\")\n+\n"
    "+    def test_capfirst_documented(self):\n"
    "+        \"\"\"capfirst() upper-cases the first letter only.\"\"\"\n"
    "+        self.assertEqual(text.capfirst(\"hello World\"), \"Hello World\")\n+\n"
    "     def test_get_text_list(self):\n"
)
DJ_FIX = "    return x[0].upper() + x[1:]\n"
DJ_BUG = "    return x[0] + x[1:]\n"


def _one_line_patch(path: str, line: int, before: str, old: str, new: str) -> str:
    """A diff replacing line ``line`` (``old``) by ``new``, after the context lines ``before``; a blank line follows
    (git anchors a hunk without trailing context to the end of the file)."""
    n = before.count("\n")
    context = "".join(f" {c}\n" for c in before.splitlines())
    return (
        f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -{line - n},{n + 2} +{line - n},{n + 2} @@\n"
        f"{context}-{old}+{new} \n"
    )


# Real Verified rows of Django 5.0 whose fix and tests Django 5.0.14 contains: the layer undoes both (the row's
# starting state for those files), grading applies them again, with the row's own ids and SWE-bench's test command.
VERIFIED_DJANGO = ("django__django-16502",)  # its P2P has docstring-line ids


def verified_rows(ids: tuple[str, ...]) -> list[dict]:
    import pyarrow.parquet as pq

    if not _VERIFIED.is_file():
        return []
    table = pq.read_table(_VERIFIED).to_pylist()
    return [r for r in table if r["instance_id"] in ids]


@pytest.fixture(scope="module")
def django_layer():
    undo = tuple(d for r in verified_rows(VERIFIED_DJANGO) for d in (r["patch"], r["test_patch"]))
    layer = build_sdist_layer(
        sdist("Django", "5.0.14"),
        ["asgiref==3.12.1", "sqlparse==0.6.0"],
        {"django/utils/text.py": (DJ_FIX, DJ_BUG)},
        reverse=undo,
    )
    yield layer
    import shutil

    shutil.rmtree(layer.path, ignore_errors=True)


def django_task() -> Task:
    directives = log_parsers.test_directives("django/django", DJ_TEST_PATCH)
    return Task(
        instance_id="django__django-capfirst",
        repo="django/django",
        patch=_one_line_patch(
            "django/utils/text.py", 24, "    if not isinstance(x, str):\n        x = str(x)\n", DJ_BUG, DJ_FIX
        ),
        test_patch=DJ_TEST_PATCH,
        grader="log",
        log_parser="django/django",
        test_cmd="./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 " + " ".join(directives),
        eval_commands=("export LANG=C.UTF-8",),
        FAIL_TO_PASS=[
            "test_capfirst_plain (utils_tests.test_text.TestUtilsText.test_capfirst_plain)",
            "capfirst() upper-cases the first letter only.",  # a docstring-line id, as Django prints it
        ],
        PASS_TO_PASS=[
            "test_get_text_list (utils_tests.test_text.TestUtilsText.test_get_text_list)",
            "test_wrap (utils_tests.test_text.TestUtilsText.test_wrap)",
        ],
    )


@pytest.mark.e2e
def test_django_runtests_log_gold_resolves_empty_and_wrong_do_not(django_layer):
    task = django_task()
    assert task.test_cmd.endswith(" utils_tests.test_text")
    gold = grade(task, task.patch, layers=[django_layer], timeout=300)
    assert gold.log_status == "ok" and gold.errors == [], (gold.errors, gold.output_tail)
    assert gold.resolved and gold.reward == 1.0
    assert {t: o.status for t, o in gold.tests.items()} == dict.fromkeys(
        task.FAIL_TO_PASS + task.PASS_TO_PASS, "passed"
    )
    empty = grade(task, "", layers=[django_layer], timeout=300)
    assert not empty.resolved and empty.log_status == "ok"
    assert [empty.tests[t].status for t in task.FAIL_TO_PASS] == ["failed", "failed"]
    assert [empty.tests[t].status for t in task.PASS_TO_PASS] == ["passed", "passed"]
    lowers_the_rest = task.patch.replace(
        "+    return x[0].upper() + x[1:]\n", "+    return x[0].upper() + x[1:].lower()\n"
    )
    wrong = grade(task, lowers_the_rest, layers=[django_layer], timeout=300)
    assert wrong.applied and not wrong.resolved
    assert wrong.tests[task.FAIL_TO_PASS[0]].status == "passed"
    assert wrong.tests[task.FAIL_TO_PASS[1]].status == "failed"


@pytest.mark.e2e
@pytest.mark.parametrize("instance_id", VERIFIED_DJANGO)
def test_real_verified_django_rows_resolve_with_gold_and_not_empty(django_layer, instance_id):
    check_verified_row(instance_id, django_layer)


def check_verified_row(instance_id: str, layer) -> None:
    """Grade a real Verified row with its own ids, parser and SWE-bench's spec test command: gold yes, empty no."""
    import json

    rows = verified_rows((instance_id,))
    if not rows:
        pytest.skip(f"the Verified parquet is not at {_VERIFIED} (set SWEBOX_VERIFIED_PARQUET)")
    row = rows[0]
    spec = swebench_harness.module("harness.constants.python").MAP_REPO_VERSION_TO_SPECS_PY[row["repo"]][row["version"]]
    task = Task(
        instance_id=row["instance_id"],
        repo=row["repo"],
        base_commit=row["base_commit"],
        patch=row["patch"],
        test_patch=row["test_patch"],
        version=row["version"],
        FAIL_TO_PASS=json.loads(row["FAIL_TO_PASS"]),
        PASS_TO_PASS=json.loads(row["PASS_TO_PASS"]),
        grader="log",
        log_parser=row["repo"],
        test_cmd=" ".join([spec["test_cmd"], *log_parsers.test_directives(row["repo"], row["test_patch"])]),
        eval_commands=spec.get("eval_commands", ()),
    )
    gold = grade(task, task.patch, layers=[layer], timeout=300)
    assert gold.log_status == "ok" and gold.errors == [], (gold.errors, gold.output_tail)
    assert gold.resolved and {o.status for o in gold.tests.values()} == {"passed"}, gold.tests
    empty = grade(task, "", layers=[layer], timeout=300)
    assert not empty.resolved and {empty.tests[t].status for t in task.FAIL_TO_PASS} <= {"failed", "error"}
    assert empty.p2p_passed == empty.p2p_total


# -- sympy: its own runner (bin/test) ------------------------------------------------------------------------------
# sympy's sdists do not ship bin/test (checked: 1.6.2, 1.9, 1.12, 1.13.3); this stand-in does what it does for the
# flags SWE-bench passes (-C: no cache, --verbose) and calls sympy's own runner, sympy.testing.runtests.test (in
# 1.13 `sympy.test` became a pytest wrapper), whose output the sympy parser reads.
SYMPY_BIN_TEST = """#!/usr/bin/env python
import os
import sys

args = sys.argv[1:]
if "-C" in args:
    os.environ["SYMPY_USE_CACHE"] = "no"
from sympy.testing.runtests import test

paths = [a for a in args if not a.startswith("-")]
sys.exit(0 if test(*paths, verbose="--verbose" in args) else 1)
"""
SY_TEST_PATCH = (
    "diff --git a/sympy/utilities/tests/test_iterables.py b/sympy/utilities/tests/test_iterables.py\n"
    "--- a/sympy/utilities/tests/test_iterables.py\n+++ b/sympy/utilities/tests/test_iterables.py\n"
    "@@ -943,3 +943,7 @@ def test_signed_permutations():\n"
    "     assert list(signed_permutations((0, 1, 1))) == ans\n"
    "     assert list(signed_permutations((1, 0, 1))) == ans\n"
    "     assert list(signed_permutations((1, 1, 0))) == ans\n"
    "+\n+\n+def test_rotate_left_hidden():\n+    assert rotate_left([1, 2, 3], 1) == [2, 3, 1]\n"
    "+\n+\n+def test_rotate_left_last():\n+    assert rotate_left([1, 2], 1) == [2, 1]\n"
)
SY_FIX = "    return x[y:] + x[:y]\n"
SY_BUG = "    return x[:y] + x[y:]\n"
SY_BEFORE = "    y = y % len(x)\n"  # rotate_right ends the same way, after `y = len(x) - y % len(x)`


VERIFIED_SYMPY = ("sympy__sympy-24443",)  # fix and tests released in 1.13.3, undone below


@pytest.fixture(scope="module")
def sympy_layer():
    undo = tuple(d for r in verified_rows(VERIFIED_SYMPY) for d in (r["patch"], r["test_patch"]))
    layer = build_sdist_layer(
        sdist("sympy", "1.13.3"),
        ["mpmath==1.3.0"],
        {"sympy/utilities/iterables.py": (SY_BEFORE + SY_FIX, SY_BEFORE + SY_BUG)},
        {"bin/test": SYMPY_BIN_TEST},
        reverse=undo,
    )
    yield layer
    import shutil

    shutil.rmtree(layer.path, ignore_errors=True)


@pytest.mark.e2e
def test_sympy_bin_test_log_gold_resolves_empty_does_not(sympy_layer):
    directives = log_parsers.test_directives("sympy/sympy", SY_TEST_PATCH)
    assert directives == ["sympy/utilities/tests/test_iterables.py"]
    task = Task(
        instance_id="sympy__sympy-rotate",
        repo="sympy/sympy",
        patch=_one_line_patch("sympy/utilities/iterables.py", 1143, SY_BEFORE, SY_BUG, SY_FIX),
        test_patch=SY_TEST_PATCH,
        grader="log",
        log_parser="sympy/sympy",
        test_cmd="PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose "
        + " ".join(directives),
        FAIL_TO_PASS=["test_rotate_left_hidden", "test_rotate"],
        PASS_TO_PASS=["test_flatten", "test_signed_permutations"],
    )
    gold = grade(task, task.patch, layers=[sympy_layer], timeout=300)
    assert gold.log_status == "ok" and gold.errors == [], (gold.errors, gold.output_tail)
    assert gold.resolved and all(o.status == "passed" for o in gold.tests.values()), (gold.tests, gold.output_tail)
    # The last test of a file is printed as `test_x ok   [OK]`, which SWE-bench's sympy parser does not read: the
    # official harness never sees it (so no Verified id names one), and neither does swebox.
    assert "test_rotate_left_last ok" in gold.output_tail
    assert "test_rotate_left_last" not in log_parsers.parse_log("sympy/sympy", gold.output_tail)
    empty = grade(task, "", layers=[sympy_layer], timeout=300)
    assert not empty.resolved
    assert [empty.tests[t].status for t in task.FAIL_TO_PASS] == ["failed", "failed"]
    assert [empty.tests[t].status for t in task.PASS_TO_PASS] == ["passed", "passed"]


@pytest.mark.e2e
@pytest.mark.parametrize("instance_id", VERIFIED_SYMPY)
def test_real_verified_sympy_rows_resolve_with_gold_and_not_empty(sympy_layer, instance_id):
    check_verified_row(instance_id, sympy_layer)


# -- pytest -rA over the calc fixture (calc_log_task: tests/envs/tasks/conftest.py) ------------------------------
@pytest.mark.e2e
def test_pytest_ra_log_gold_resolves_empty_does_not_and_truncated_ids_match(calc_layer, calc_task, gold):
    task = calc_log_task(calc_task)
    good = grade(task, gold["add"], layers=[calc_layer])
    assert good.log_status == "ok" and good.errors == [], (good.errors, good.output_tail)
    assert good.resolved and good.reward == 1.0
    # besides test_div (calc's other bug, in no id of the task) the gold run's one failure is the canary planted
    # to fail, and its passing twin ran too (log_canaries): 7 + 1 tests of the task's files, 2 canaries
    failed = [line.split()[1] for line in good.output_tail.splitlines() if line.startswith("FAILED ")]
    assert len(failed) == 2 and "tests/test_ops.py::test_div" in failed, failed
    assert "2 failed, 8 passed" in good.output_tail
    spaced = good.tests["tests/test_spaces.py::test_add_ids[one plus two]"]
    assert spaced.status == "passed" and "test_add_ids[one'" in spaced.message  # the parser cuts at the space
    empty = grade(task, "", layers=[calc_layer])
    assert not empty.resolved and empty.tests["tests/test_ops.py::test_add"].status == "failed"
    assert empty.p2p_passed == empty.p2p_total == 5
    # the same -rA log through the parsers of Verified's pytest-run repositories (tox's output, for sphinx, holds
    # the same lines): every one reads every id of the task as passed
    ids = [*task.FAIL_TO_PASS, *task.PASS_TO_PASS]
    for name in (
        "astropy/astropy",
        "matplotlib/matplotlib",
        "mwaskom/seaborn",
        "psf/requests",
        "pylint-dev/pylint",
        "pydata/xarray",
        "scikit-learn/scikit-learn",
        "pallets/flask",
        "sphinx-doc/sphinx",
        "pytest-dev/pytest",
    ):
        statuses = log_parsers.parse_log(name, good.output_tail)
        assert {t: statuses.get(log_parsers.lookup(name, t, statuses)) for t in ids} == dict.fromkeys(ids, "PASSED")


@pytest.mark.e2e
def test_a_log_the_parser_cannot_read_is_unresolved_with_the_reason(calc_layer, calc_task, gold):
    task = calc_log_task(calc_task, parser="django/django")  # Django's parser over pytest's output
    report = grade(task, gold["add"], layers=[calc_layer])
    assert not report.resolved and report.reward == 0.0 and report.log_status == "no-results"
    assert "found no test results" in report.errors[0]
    crashed = dataclasses.replace(calc_log_task(calc_task), test_cmd="kill -9 $$")
    report = grade(crashed, gold["add"], layers=[calc_layer])
    assert not report.resolved and report.log_status == "unfinished"


@pytest.mark.e2e
def test_log_grading_keeps_the_tamper_locks(calc_layer, calc_task, diff_of, repo):
    """An empty fix plus edited tests, a conftest that passes everything, test config and a start-up hook: all
    dropped (test_patch's files are protected too), still unresolved."""
    task = calc_log_task(calc_task)

    def cheat(path):
        (path / "tests").mkdir()
        (path / "tests" / "test_ops.py").write_text("def test_add():\n    pass\n")
        (path / "conftest.py").write_text(
            "import pytest\n@pytest.hookimpl(tryfirst=True)\ndef pytest_runtest_call(item):\n    return True\n"
        )
        (path / "tests" / "test_spaces.py").write_text("def test_add_ids():\n    pass\n")
        (path / "pytest.ini").write_text("[pytest]\naddopts = -k 'not add'\n")
        (path / "sitecustomize.py").write_text("import calc.ops\ncalc.ops.add = lambda a, b: a + b\n")

    report = grade(task, diff_of(repo, cheat), layers=[calc_layer])
    assert {p for p, _ in report.dropped} == {
        "tests/test_ops.py",
        "conftest.py",
        "tests/test_spaces.py",
        "pytest.ini",
        "sitecustomize.py",
    }
    assert not report.resolved and report.tests["tests/test_ops.py::test_add"].status == "failed"


# -- fast checks of the pieces ----------------------------------------------------------------------------------------
def test_score_follows_swebench_rules():
    task = Task(
        instance_id="x",
        grader="log",
        log_parser="pytest",
        test_cmd="pytest -rA",
        FAIL_TO_PASS=["t.py::a", "t.py::b[x y]"],
        PASS_TO_PASS=["t.py::c", "t.py::d"],
    )

    def verdict(status_map, **over):
        report = GradeReport("x", applied=True, log_status="ok")
        log_grading.score(dataclasses.replace(task, **over), report, status_map)
        return report

    ok = verdict({"t.py::a": "PASSED", "t.py::b[x": "XFAIL", "t.py::c": "PASSED", "t.py::d": "SKIPPED"})
    assert ok.resolved and ok.tests["t.py::d"].status == "skipped"  # SKIPPED is neither pass nor failure
    assert ok.tests["t.py::b[x y]"].status == "xfailed"
    missing = verdict({"t.py::a": "PASSED", "t.py::b[x": "PASSED", "t.py::c": "PASSED"})
    assert not missing.resolved and missing.tests["t.py::d"].status == "missing"
    errored = verdict({"t.py::a": "ERROR", "t.py::b[x": "PASSED", "t.py::c": "PASSED", "t.py::d": "PASSED"})
    assert not errored.resolved
    all_pass = {
        "t.py::a": "PASSED",
        "t.py::b[x": "PASSED",
        "t.py::c": "PASSED",
        "t.py::d": "PASSED",
        "t.py::e": "FAILED",
    }
    assert verdict(all_pass).resolved
    assert verdict(all_pass, expected_status={"t.py::e": "FAILED"}).resolved
    wrong = verdict(all_pass, expected_status={"t.py::e": "PASSED"})
    assert not wrong.resolved and "t.py::e should be PASSED, is failed" in wrong.errors[0]


def test_verdict_equals_the_official_harness_on_random_status_maps():
    """swebox's score() against swebench's own get_eval_tests_report + get_resolution_status."""
    import random

    official = swebench_harness.module("harness.grading")
    rng = random.Random(0)
    statuses = [*log_parsers.STATUS_NAMES, None]
    for _ in range(400):
        ids = [f"t.py::t{i}" for i in range(rng.randint(2, 6))]
        cut = rng.randint(1, len(ids) - 1)
        task = Task(
            instance_id="x",
            grader="log",
            log_parser="pytest",
            test_cmd="pytest -rA",
            FAIL_TO_PASS=ids[:cut],
            PASS_TO_PASS=ids[cut:],
        )
        status_map = {t: s for t in ids if (s := rng.choice(statuses)) is not None}
        status_map["t.py::other"] = "PASSED"  # the log is never empty here
        report = GradeReport("x", applied=True, log_status="ok")
        log_grading.score(task, report, status_map)
        gold = {"FAIL_TO_PASS": ids[:cut], "PASS_TO_PASS": ids[cut:]}
        theirs = official.get_resolution_status(official.get_eval_tests_report(status_map, gold))
        assert report.resolved == (theirs == "RESOLVED_FULL"), (status_map, gold)


def test_every_verified_id_is_already_in_its_parsers_form():
    """For the 61,658 ids of SWE-bench Verified the parser's key is the id itself: lookup = the harness's verbatim."""
    import json

    import pyarrow.parquet as pq

    if not _VERIFIED.is_file():
        pytest.skip(f"the Verified parquet is not at {_VERIFIED} (set SWEBOX_VERIFIED_PARQUET)")
    rows = pq.read_table(_VERIFIED).to_pandas()
    changed = [
        (r.repo, i)
        for r in rows.itertuples()
        for c in ("FAIL_TO_PASS", "PASS_TO_PASS")
        for i in json.loads(getattr(r, c))
        if log_parsers.parser_key(r.repo, i) != i
    ]
    assert len(rows) == 500 and changed == []


def test_log_section_needs_both_markers():
    assert log_grading.log_section("x\nSWEBOX-LOG-START n\nbody\nSWEBOX-LOG-END n 0\n", "n") == ("body", "", "")
    assert log_grading.log_section("x\n", "n")[1].startswith("the test command never started")
    assert "did not finish" in log_grading.log_section("SWEBOX-LOG-START n\nhalf", "n")[1]
    # a second marker can only be printed by the code under test (it can learn the nonce): tampering
    forged = "SWEBOX-LOG-START n\nPASSED a\nSWEBOX-LOG-END n 0\nFAILED a\nSWEBOX-LOG-END n 1\n"
    assert "1 start and 2 end markers" in log_grading.log_section(forged, "n")[2]
    script = log_grading.eval_script(django_task(), "n")
    assert script.index("export LANG=C.UTF-8") < script.index("SWEBOX-LOG-START n") < script.index("runtests.py")


def test_parser_keys_follow_each_parsers_format():
    assert log_parsers.parser_key("pytest", "tests/a.py::t[x y]") == "tests/a.py::t[x"
    assert log_parsers.parser_key("psf/requests", "tests/a.py::t[/tmp/a/b]") == "tests/a.py::t[/b]"
    assert log_parsers.parser_key("django/django", "test_a (m.T.test_a)") == "test_a (m.T.test_a)"
    assert log_parsers.parser_key("django/django", "A docstring line.") == "A docstring line."
    assert log_parsers.parser_key("sympy/sympy", "test_x") == "test_x"
    assert log_parsers.test_directives("django/django", DJ_TEST_PATCH) == ["utils_tests.test_text"]
    data = "diff --git a/tests/data.json b/tests/data.json\n"
    assert log_parsers.test_directives("pydata/xarray", data + CALC_TEST_PATCH) == ["tests/test_spaces.py"]
    assert "sympy/sympy" in log_parsers.parser_names() and "pytest" in log_parsers.parser_names()


def test_log_canaries_go_into_a_file_the_command_runs_and_must_come_out_as_planted(calc_task):
    import random

    task = calc_log_task(calc_task)
    assert log_canaries.host_files(task) == ["tests/test_ops.py", "tests/test_spaces.py"]
    django = django_task()
    assert log_canaries.host_files(django) == ["tests/utils_tests/test_text.py"]
    text, expected = log_canaries.source(django, random.SystemRandom())
    namespace: dict = {}
    exec(compile(text, "canaries", "exec"), namespace)  # a unittest.TestCase: what Django's runner collects
    (case,) = [v for v in namespace.values() if isinstance(v, type)]
    assert sorted(n for n in dir(case) if n.startswith("test_")) == sorted(expected)
    assert sorted(expected.values()) == ["FAILED", "PASSED"]
    passed, failed = sorted(expected, key=expected.get, reverse=True)
    canaries = log_canaries.LogCanaries("tests/utils_tests/test_text.py", expected)
    honest = {
        f"{passed} (utils_tests.test_text.X.{passed})": "PASSED",
        f"{failed} (x.X.{failed})": "FAILED",
        failed: "FAILED",
    }
    assert log_canaries.problems(canaries, honest) == []
    forged = {**honest, failed: "PASSED"}
    assert log_canaries.problems(canaries, forged) == [
        f"canary test tests/utils_tests/test_text.py::{failed} was reported FAILED/PASSED, planted to be FAILED"
    ]
    assert "missing" in log_canaries.problems(canaries, {})[0]
    sympy = dataclasses.replace(django, log_parser="sympy/sympy")
    assert log_canaries.plant(None, sympy, "/x").skipped.startswith("sympy's parser")


def test_a_pass_printed_after_a_failure_is_tampering_and_an_honest_order_is_not():
    task = Task(
        instance_id="x",
        grader="log",
        log_parser="astropy/astropy",
        test_cmd="pytest -rA",
        FAIL_TO_PASS=["t.py::a"],
        PASS_TO_PASS=["t.py::b"],
    )
    # -vv progress, then the short summary (passes first): b passed then errored at teardown, ending ERROR
    honest = "t.py::a PASSED\nt.py::b PASSED\nt.py::b ERROR\nPASSED t.py::a\nPASSED t.py::b\nERROR t.py::b - x\n"
    status_map = log_parsers.parse_log(task.log_parser, honest)
    assert status_map == {"t.py::a": "PASSED", "t.py::b": "ERROR"}
    assert log_grading.passes_after_failures(task, honest, status_map) == []
    forged = "t.py::a FAILED\nFAILED t.py::a - assert\n== 1 failed in 0.1s ==\nPASSED t.py::a\n"
    status_map = log_parsers.parse_log(task.log_parser, forged)
    assert status_map["t.py::a"] == "PASSED"  # what the official harness would believe
    assert log_grading.passes_after_failures(task, forged, status_map) == [
        "test t.py::a was reported failed and then passed: a result line printed after pytest's own"
    ]
    django = dataclasses.replace(task, log_parser="django/django")  # multi-line results: not read line by line
    assert log_grading.passes_after_failures(django, forged, {"t.py::a": "PASSED"}) == []


def test_schema_checks_the_grader_fields():
    base = dict(instance_id="x", FAIL_TO_PASS=["a"])
    task = Task(
        **base,
        grader="log",
        log_parser="django/django",
        test_cmd="./tests/runtests.py a",
        eval_commands=["export LANG=en_US.UTF-8"],
        expected_status={"a": "PASSED"},
    )
    assert Task.from_json(task.to_json()) == task and Task.from_json(task.to_json()).to_json() == task.to_json()
    with pytest.raises(TaskError, match="Task.grader: expected one of"):
        Task(**base, grader="xml")
    with pytest.raises(TaskError, match="no log parser for 'nobody/nothing'"):
        Task(**base, grader="log", log_parser="nobody/nothing", test_cmd="pytest")
    with pytest.raises(TaskError, match="Task.log_parser"):
        Task(**base, grader="log", test_cmd="pytest")
    with pytest.raises(TaskError, match="grader='junit'"):
        Task(**base, log_parser="pytest")
    with pytest.raises(TaskError, match="Task.expected_status"):
        Task(**base, expected_status={"a": "GREEN"})
    with pytest.raises(TaskError, match="Task.test_cmd"):  # the pytest form is still required for junit
        Task(**base, test_cmd="./tests/runtests.py")


def test_a_missing_or_wrong_swebench_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(swebench_harness, "installed_version", lambda: "5.0.0")
    with pytest.raises(swebench_harness.HarnessUnavailable, match=r"swebench==4\.1\.0; found version 5\.0\.0"):
        swebench_harness.module.__wrapped__("harness.log_parsers.python")
    monkeypatch.setattr(swebench_harness, "installed_version", lambda: None)
    with pytest.raises(swebench_harness.HarnessUnavailable, match="pip install --no-deps swebench==4.1.0"):
        swebench_harness.module.__wrapped__("harness.log_parsers.python")


def test_without_swebench_a_log_task_loads_and_grading_says_how_to_install(monkeypatch):
    def unavailable(*_args):
        raise swebench_harness.HarnessUnavailable("install swebench==4.1.0")

    monkeypatch.setattr(log_parsers, "parser_names", unavailable)
    monkeypatch.setattr(swebench_harness, "python_parsers", unavailable)
    task = Task(
        instance_id="x", grader="log", log_parser="pylint-dev/astroid", test_cmd="pytest -rA", FAIL_TO_PASS=["a"]
    )  # the name's form is checked; the package is needed to grade
    with pytest.raises(TaskError, match="Task.log_parser"):
        Task(instance_id="x", grader="log", log_parser="not a repo", test_cmd="pytest -rA", FAIL_TO_PASS=["a"])
    with pytest.raises(swebench_harness.HarnessUnavailable, match="install swebench"):
        grade(task, "", layers=[])  # raised before any sandbox starts (there are no layers to start one)


def test_grading_env_is_fixed_or_the_images_own():
    from swebox.envs.cache.images import ImageRecord, image_policy
    from swebox.envs.sandbox import SandboxPolicy

    # a sandbox's own environment (PATH, variables) does not reach the tests outside an image
    fixed = log_grading.grading_env(SandboxPolicy(env={"PATH": "/agent/bin", "SECRET": "x"}), "/g")
    assert fixed == {
        "PATH": "/venv/bin:/usr/local/bin:/usr/bin:/bin",
        "HOME": "/g/home",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TMPDIR": "/tmp",
        "TERM": "dumb",
    }
    record = ImageRecord(
        ref="r",
        digest="sha256:0",
        platform="linux/amd64",
        layers=[],
        runtime_layer="rt",
        config={"Env": ["PATH=/opt/conda/bin:/usr/bin", "CONDA_DEFAULT_ENV=testbed"]},
    )
    image = log_grading.grading_env(image_policy(record), "/g")
    assert image["PATH"] == "/opt/conda/bin:/usr/bin" and image["CONDA_DEFAULT_ENV"] == "testbed"
    assert image["HOME"] == "/root" and image["BASH_ENV"] == "/.swebox/image-start.sh"
    command = log_grading.run_command("/g", image)
    assert command.startswith("cd /testbed && py=/venv/bin/python && { [ -x $py ] || py=python3; } && env -i ")
    assert "BASH_ENV=/.swebox/image-start.sh" in command and command.endswith("$py -I -S -B /g/log_monitor.py /g")


# -- issue 31, class 8: a parser that raises on the log is a verdict of 0, never a masked episode -----------------
# Lines that crash SWE-bench's parsers (IndexError); the code under test prints one at exit, after pytest's own
# output, so it lands inside the graded log.
CRASH_LINES = {"mwaskom/seaborn": "PASSED", "django/django": "FAIL:"}


def crash_diff(gold_add: str, line: str) -> str:
    from tests.envs.tasks.graders.test_grading_tamper import new_file_over_empty

    code = f"import atexit, os\natexit.register(os.write, 1, b'\\n{line}\\n')\n"
    return gold_add + new_file_over_empty("calc/__init__.py", code)


@pytest.mark.e2e
@pytest.mark.parametrize("parser", sorted(CRASH_LINES))
def test_a_log_line_that_crashes_the_parser_scores_zero_instead_of_raising(calc_layer, calc_task, gold, parser):
    task = calc_log_task(calc_task, parser=parser)
    with pytest.raises(IndexError):  # the parser's own behaviour, which grade() used to let through
        log_parsers.get_parser(parser)(CRASH_LINES[parser] + "\n")
    report = grade(task, crash_diff(gold["add"], CRASH_LINES[parser]), layers=[calc_layer])
    assert report.applied and report.log_status == "unparsable", report.to_dict()
    assert "raised IndexError" in report.errors[0] and not report.resolved and report.reward == 0.0


@pytest.mark.e2e
def test_the_same_fix_without_the_crashing_line_resolves_under_that_parser(calc_layer, calc_task, gold):
    report = grade(calc_log_task(calc_task, parser="mwaskom/seaborn"), gold["add"], layers=[calc_layer])
    assert report.log_status == "ok" and report.resolved and report.reward == 1.0, report.to_dict()


def test_googletest_canaries_go_only_into_a_test_patch_file_the_command_compiles():
    import random

    from tests.envs.tasks.graders.test_lang_logs import GT_CMD, GT_TEST_FILE, GT_TESTS, new_file_patch

    base = dict(
        instance_id="g__t-1",
        repo="google/googletest",
        language="cpp",
        patch="",
        grader="log",
        FAIL_TO_PASS=("A.B",),
        test_patch=new_file_patch(GT_TEST_FILE, GT_TESTS),
    )
    named = Task(**base, log_parser="parse_log_googletest", test_cmd=GT_CMD)
    assert log_canaries.host_files(named) == [GT_TEST_FILE]
    text, expected = log_canaries.source(named, random.SystemRandom())
    suites = {name.split(".")[0] for name in expected}
    assert len(suites) == 1 and sorted(expected.values()) == ["FAILED", "PASSED"]
    assert all(f"TEST({suite}, {name.split('.')[1]})" in text for suite in suites for name in expected)
    # a CMake build may not compile a file its command does not name: no canary that could be missing
    cmake = Task(**base, log_parser="googletest", test_cmd="cmake --build build && ctest --test-dir build -V")
    assert log_canaries.host_files(cmake) == []
    # named as a word of the command, not inside another path
    other = Task(**base, log_parser="googletest", test_cmd=GT_CMD.replace(GT_TEST_FILE, "x/" + GT_TEST_FILE))
    assert log_canaries.host_files(other) == []
    assert "that the test command names" in log_canaries.plant(None, cmake, "/x").skipped
    redis = Task(**base, log_parser="parse_log_redis", test_cmd=GT_CMD)
    assert "other than GoogleTest" in log_canaries.plant(None, redis, "/x").skipped
