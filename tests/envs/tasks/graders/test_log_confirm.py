"""``Task.confirm``: the rule that decides, per task and before any agent acts, whether a log verdict is
confirmed under swebox's runner (log_confirm.py), the opt-out, and the field's round trips.

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
from swebox.envs.tasks.graders.log_confirm import PREFIX, named_python, needed, runner_task
from swebox.envs.tasks.graders.report import GradeReport

from tests.calc import calc_log_task, calc_task


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


def test_the_rerun_is_the_f2p_files_under_the_named_python():
    task = log_task("pytest")
    assert named_python(task) == "/venv/bin/python"
    assert named_python(dataclasses.replace(task, test_cmd="pytest -rA tests/test_ops.py")) == ""
    rerun = runner_task(task, "/venv/bin/python")
    assert rerun.grader == "junit" and rerun.FAIL_TO_PASS == task.FAIL_TO_PASS and rerun.PASS_TO_PASS == ()
    assert rerun.all_test_files() == ("tests/test_ops.py", "tests/test_spaces.py")
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
