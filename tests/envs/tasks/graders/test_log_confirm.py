"""``Task.confirm``: the rule that decides, per task and before any agent acts, whether a log verdict is
confirmed under swebox's runner (log_confirm.py), the opt-out, and the field's round trips; the verdict's
combination (F2P and P2P, ids cut at a space) and, in real sandboxes on the calc log task, the P2P tests
re-run: gold confirmed, a diff that breaks a P2P test and forges its log line 0, an empty diff 0.

The confirmation itself is exercised in sandboxes by the attack files (``graded_task``'s log case: the
targeted forger of test_grading_attacks.py and the fd-level filter of test_grading_origins.py earn 0, the gold
patch resolves, test_grading_tamper.py) and by test_validate.py (gold failing only at the confirmation).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections import Counter
from pathlib import Path

import pytest
from swebox.envs.tasks import Task, TaskError, load
from swebox.envs.tasks.graders import log_parsers, swebench_harness
from swebox.envs.tasks.graders.grading import grade
from swebox.envs.tasks.graders.junit import MISSING, TestResult
from swebox.envs.tasks.graders.log_confirm import (
    PREFIX,
    _fold,
    cut_statuses,
    named_python,
    needed,
    recover_cut_ids,
    runner_task,
)
from swebox.envs.tasks.graders.report import GradeReport, TestOutcome

from tests.calc import GOLD, calc_log_task, calc_task
from tests.envs.tasks.graders.test_grading_tamper import new_file_over_empty


def log_task(parser: str, **over) -> Task:
    return dataclasses.replace(calc_log_task(calc_task()), log_parser=parser, **over)


@pytest.mark.parametrize(
    "parser, mode",
    [
        ("pytest", "runner"),
        ("astropy/astropy", "runner"),
        ("sphinx-doc/sphinx", "runner"),
        ("matplotlib/matplotlib", "runner"),
        ("pytest-dev/pytest", "off"),  # the repository under test is pytest: RUNNER_UNFIT
        ("django/django", "off"),
        ("sympy/sympy", "off"),
        ("go_test", "off"),
        ("cargo", "off"),
        ("tap", "off"),
    ],
)
def test_the_default_rule_confirms_pytest_family_logs_only(parser, mode):
    task = log_task(parser)
    assert task.confirm == "" and task.confirm_mode == mode


def test_junit_and_harbor_tasks_have_nothing_to_confirm():
    assert calc_task().confirm_mode == "off"
    with pytest.raises(TaskError, match=r"Task\.confirm: expected '' with grader='junit'"):
        calc_task(confirm="off")


def test_the_opt_out_and_an_explicit_runner():
    assert log_task("pytest", confirm="off").confirm_mode == "off"
    assert log_task("pytest-dev/pytest", confirm="runner").confirm_mode == "runner"  # the user's call
    with pytest.raises(TaskError, match=r"Task\.confirm: expected 'off' or '' for log parser 'django/django'"):
        log_task("django/django", confirm="runner")
    with pytest.raises(TaskError, match=r"Task\.confirm: expected one of \['', 'runner', 'off'\]; found 'on'"):
        log_task("pytest", confirm="on")


def test_the_field_round_trips():
    for confirm in ("", "off", "runner"):
        task = log_task("pytest", confirm=confirm)
        line = task.to_json()
        assert json.loads(line)["confirm"] == confirm
        assert Task.from_json(line) == task and Task.from_json(line).to_json() == line
    # a record written before the field existed loads with the default rule
    old = log_task("pytest").to_dict()
    del old["confirm"]
    assert Task.from_dict(old).confirm_mode == "runner"


def test_the_rule_is_swebench_s_pytest_family():
    try:
        parsers = swebench_harness.python_parsers()
    except swebench_harness.HarnessUnavailable:
        pytest.skip("needs swebench")
    own_runners = {"django/django", "sympy/sympy"}
    assert {log_parsers.PYTEST, *(set(parsers) - own_runners)} == log_parsers.PYTEST_FAMILY
    assert set(log_parsers.RUNNER_UNFIT) <= log_parsers.PYTEST_FAMILY


def test_only_a_rewarded_log_verdict_is_confirmed():
    task = log_task("pytest")
    earned, nothing = GradeReport(task.instance_id, reward=1.0), GradeReport(task.instance_id, reward=0.0)
    assert needed(task, earned) and not needed(task, nothing)
    assert not needed(log_task("pytest", confirm="off"), earned) and not needed(calc_task(), earned)


def test_the_rerun_is_the_f2p_and_p2p_files_under_the_named_python():
    task = log_task("pytest", PASS_TO_PASS=(*calc_task().PASS_TO_PASS, "tests/test_more.py::test_x"))
    assert named_python(task) == "/venv/bin/python"
    assert named_python(dataclasses.replace(task, test_cmd="pytest -rA tests/test_ops.py")) == ""
    rerun = runner_task(task, "/venv/bin/python")
    assert rerun.grader == "junit" and rerun.FAIL_TO_PASS == task.FAIL_TO_PASS
    assert rerun.PASS_TO_PASS == task.PASS_TO_PASS
    assert rerun.all_test_files() == ("tests/test_ops.py", "tests/test_spaces.py", "tests/test_more.py")
    assert rerun.test_cmd == "/venv/bin/python -m pytest" and rerun.pytest_options == []
    assert PREFIX.endswith(": ")


def test_verified_rows_are_confirmed_but_django_sympy_and_pytest_s_own():
    verified = Path(os.environ.get("SWEBOX_VERIFIED_PARQUET", "/work/shared/data/swe-bench-verified.parquet"))
    if not verified.exists():
        pytest.skip("needs the Verified parquet")
    modes = Counter((t.repo, t.confirm_mode) for t in load(verified))
    off = {repo for repo, mode in modes if mode == "off"}
    assert off == {"django/django", "sympy/sympy", "pytest-dev/pytest"}, modes
    assert sum(n for (_, mode), n in modes.items() if mode == "runner") == 500 - 231 - 75 - 19


# -- the verdict's combination: the log's statuses and the runner's, F2P and P2P ------------------------------
F2P, P2P = "tests/test_ops.py::test_add", "tests/test_ops.py::test_sub"


def combined(log: dict[str, str], runner: dict[str, str], verdict: str = "ok", **task_fields) -> GradeReport:
    """The log grade ``log`` (id -> status, rewarded) after folding in a runner run that gave ``runner``."""
    task = log_task("pytest", FAIL_TO_PASS=(F2P,), PASS_TO_PASS=(P2P,), **task_fields)
    report = GradeReport(task.instance_id, resolved=True, reward=1.0)
    report.tests = {t: TestOutcome(s, 0.0, "") for t, s in log.items()}
    found = GradeReport(task.instance_id, applied=True, verdict=verdict)
    found.tests = {t: TestOutcome(s, 0.0, "") for t, s in runner.items()}
    _fold(task, report, found)
    return report


@pytest.mark.parametrize("f2p", ["passed", "xfailed", "skipped"])
@pytest.mark.parametrize("p2p", ["passed", "xfailed", "skipped"])
def test_every_status_the_log_rule_accepts_is_confirmed(f2p, p2p):
    report = combined({F2P: "passed", P2P: "passed"}, {F2P: f2p, P2P: p2p})
    assert report.confirm == "confirmed" and report.reward == 1.0 and report.errors == [], report.to_dict()


@pytest.mark.parametrize("status", ["failed", "error", "xpassed", MISSING, "unknown"])
@pytest.mark.parametrize("which", [F2P, P2P])
def test_a_test_the_log_passed_and_the_runner_did_not_is_zero(which, status):
    runner = {F2P: "passed", P2P: "passed", which: status}
    report = combined({F2P: "passed", P2P: "passed"}, runner)
    kind = "F2P" if which == F2P else "P2P"
    assert report.confirm == "failed" and report.reward == 0.0 and not report.resolved, report.to_dict()
    assert report.errors == [f"{PREFIX}{kind} test {which} is {status} there (the log's status: passed)"]


def test_a_p2p_test_absent_from_the_runner_s_results_is_zero():
    report = combined({F2P: "passed", P2P: "passed"}, {F2P: "passed"})
    assert report.reward == 0.0 and report.errors == [
        f"{PREFIX}P2P test {P2P} is {MISSING} there (the log's status: passed)"
    ]


def test_without_a_signed_verdict_nothing_is_confirmed():
    report = combined({F2P: "passed", P2P: "passed"}, {}, verdict="missing")
    assert report.confirm == "unfinished" and report.reward == 0.0, report.to_dict()
    assert report.errors == [f"{PREFIX}no signed verdict (missing)"]


def test_under_fraction_a_test_the_log_failed_is_not_asked_again():
    # reward_mode='fraction': an F2P test the log failed earned nothing, so the runner's status of it is moot;
    # every P2P test (which the log must not have failed for any reward) is asked all the same
    report = combined({F2P: "failed", P2P: "passed"}, {F2P: "failed", P2P: "passed"})
    assert report.confirm == "confirmed" and report.reward == 1.0, report.to_dict()
    report = combined({F2P: "failed", P2P: "passed"}, {F2P: "failed", P2P: "failed"})
    assert report.confirm == "failed" and report.reward == 0.0, report.to_dict()


def result(node_id: str, status: str) -> tuple[tuple[str, str], TestResult]:
    path, _, name = node_id.partition("::")
    classname = path.removesuffix(".py").replace("/", ".")
    return (classname, name), TestResult(classname, name, status, file=path)


CUT = "tests/test_ops.py::test_add_ids[one"  # SWE-bench's pytest parser keeps a node id up to its first space


@pytest.mark.parametrize(
    "statuses, expected",
    [
        (["passed", "passed"], "passed"),
        (["failed", "passed"], "failed"),  # stricter than the log, where the last line of a key wins
        (["passed", "error"], "error"),
        (["skipped", "xfailed"], "xfailed"),
    ],
)
def test_an_id_cut_at_a_space_takes_the_worst_runner_status_of_what_it_names(statuses, expected):
    ids = ["tests/test_ops.py::test_add_ids[one plus two]", "tests/test_ops.py::test_add_ids[one minus two]"]
    results = dict(result(i, s) for i, s in zip(ids, statuses, strict=True))
    assert cut_statuses("pytest", results) == {CUT: expected}
    task = log_task("pytest", FAIL_TO_PASS=(F2P,), PASS_TO_PASS=(CUT, P2P))
    found = GradeReport(task.instance_id)
    found.tests = {
        F2P: TestOutcome("passed", 0.0, ""),
        CUT: TestOutcome(MISSING, 0.0, ""),
        P2P: TestOutcome(MISSING, 0.0, ""),
    }
    recover_cut_ids(task, found, results)
    assert found.tests[CUT].status == expected and found.tests[P2P].status == MISSING  # no reading names P2P


# -- in real sandboxes: the calc log task, P2P tests re-run under the runner --------------------------------
# The diff fixes add (the F2P tests) and breaks sub (P2P: test_sub, TestMore::test_sub_negative); in the log
# run only (its command has -rA; the runner's has not) it turns the sub tests' FAILED lines into PASSED at
# the fd level (test_grading_origins.py's filter, aimed at P2P), so the log says resolved. The runner is
# untouched, so confirming the F2P tests alone would believe it; the P2P tests re-run there do not.
BREAK_SUB = (
    "diff --git a/calc/ops.py b/calc/ops.py\n--- a/calc/ops.py\n+++ b/calc/ops.py\n@@ -1,9 +1,9 @@\n"
    " def add(a, b):\n-    return a - b\n+    return a + b\n \n \n"
    " def sub(a, b):\n-    return a - b\n+    return a + b\n \n \n def mul(a, b):\n"
)
P2P_FILTER = (
    "import os, re, sys\n"
    "if '-rA' in sys.argv:\n"
    "    _target = os.readlink('/proc/%d/fd/1' % os.getppid())\n"
    "    _same = []\n"
    "    for _f in [int(f) for f in os.listdir('/proc/self/fd') if f.isdigit()]:\n"
    "        try:\n"
    "            if os.readlink('/proc/self/fd/%d' % _f) == _target:\n"
    "                _same.append(_f)\n"
    "        except OSError:\n"
    "            pass\n"
    "    if _same:\n"
    "        _out = os.dup(_same[0])\n"
    "        _r, _w = os.pipe()\n"
    "        if os.fork() == 0:\n"
    "            os.close(_w)\n"
    "            _bad = re.compile(r'^FAILED (tests/test_ops.py::(test_sub|TestMore::test_sub_negative))( - .*)?$')\n"
    "            with os.fdopen(_r, 'rb') as _src:\n"
    "                for _line in _src:\n"
    "                    _text = _bad.sub(lambda m: 'PASSED ' + m.group(1), _line.decode().rstrip('\\n'))\n"
    "                    os.write(_out, re.sub(r'\\d+ failed, ', '', _text + '\\n').encode())\n"
    "            os._exit(0)\n"
    "        os.close(_r)\n"
    "        for _f in _same:\n"
    "            os.dup2(_w, _f)\n"
    "        os.close(_w)\n"
)
SUB_IDS = ("tests/test_ops.py::test_sub", "tests/test_ops.py::TestMore::test_sub_negative")


def test_gold_is_confirmed_with_the_p2p_tests_re_run(calc_layer, calc_task):
    report = grade(calc_log_task(calc_task), GOLD, layers=[calc_layer])
    assert report.resolved and report.reward == 1.0 and report.confirm == "confirmed", report.to_dict()
    assert report.p2p_total == len(calc_task.PASS_TO_PASS) > 0 and report.durations["confirm"] > 0


def test_a_broken_p2p_test_with_forged_log_lines_earns_0(calc_layer, calc_task):
    diff = BREAK_SUB + new_file_over_empty("calc/__init__.py", P2P_FILTER)
    report = grade(calc_log_task(calc_task), diff, layers=[calc_layer])
    # the log believed the forged lines: every F2P and P2P test reads as passed there
    assert report.log_status == "ok" and report.tampered == [], report.to_dict()
    assert all(report.tests[t].status == "passed" for t in SUB_IDS), report.to_dict()
    assert report.confirm == "failed" and report.reward == 0.0 and not report.resolved, report.to_dict()
    said = {e for e in report.errors if e.startswith(PREFIX)}
    assert said == {f"{PREFIX}P2P test {t} is failed there (the log's status: passed)" for t in SUB_IDS}, report.errors


def test_the_same_diff_with_confirm_off_is_what_the_log_alone_believes(calc_layer, calc_task):
    task = dataclasses.replace(calc_log_task(calc_task), confirm="off")
    report = grade(task, BREAK_SUB + new_file_over_empty("calc/__init__.py", P2P_FILTER), layers=[calc_layer])
    assert report.resolved and report.reward == 1.0 and report.confirm == "off", report.to_dict()


def test_an_empty_diff_earns_0_and_costs_no_confirmation(calc_layer, calc_task):
    report = grade(calc_log_task(calc_task), "", layers=[calc_layer])
    assert not report.resolved and report.reward == 0.0 and report.confirm == "", report.to_dict()
    assert "confirm" not in report.durations
