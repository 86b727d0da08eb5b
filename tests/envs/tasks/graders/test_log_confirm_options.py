"""The confirmation rerun carries the log run's outcome-changing pytest options (confirm_options.py).

In real sandboxes, a calc log task whose new tests pass only with an option of the log run: ``-p pytester`` in
test_cmd (the test asks for the ``pytester`` fixture, an error without it) and ``-W error::UserWarning`` in
the ini's addopts (test_patch writes pytest.ini, as the log run reads it; the test fails without it). Gold is
resolved and confirmed, the empty diff is not, and a diff that forges its log still earns 0. The unit tests
pin what is carried and what is dropped (log shapes, the runner's own options, selection, xdist), and where
addopts come from.
"""

from __future__ import annotations

import dataclasses

import pytest
from swebox.envs.tasks.graders import confirm_options as co
from swebox.envs.tasks.graders.grading import grade
from swebox.envs.tasks.graders.log_confirm import PREFIX, runner_task

from tests.calc import CALC_TEST_PATCH, GOLD, calc_log_task, calc_task
from tests.envs.tasks.graders.test_grading_tamper import new_file, new_file_over_empty
from tests.envs.tasks.graders.test_log_confirm import BREAK_SUB, P2P_FILTER, SUB_IDS

OPTIONS_TESTS = """\
import warnings

import pytest

from calc.ops import add


def test_add_with_pytester(pytester):
    assert add(2, 3) == 5


def test_add_warns_as_an_error():
    with pytest.raises(UserWarning):
        warnings.warn("add", UserWarning)
    assert add(2, 3) == 5
"""
NEEDS = ("tests/test_options.py::test_add_with_pytester", "tests/test_options.py::test_add_warns_as_an_error")


# test_patch: calc's (test_spaces.py), the tests above, and pytest.ini's addopts (calc's deselects add)
INI_PATCH = (
    "diff --git a/pytest.ini b/pytest.ini\n--- a/pytest.ini\n+++ b/pytest.ini\n@@ -1,2 +1,2 @@\n [pytest]\n"
    "-addopts = -k 'not add'\n+addopts = -W error::UserWarning\n"
)


def options_task(calc_task):
    """The calc log task whose F2P tests need ``-p pytester`` (test_cmd) and ``-W error::...`` (addopts)."""
    base = calc_log_task(calc_task)
    return dataclasses.replace(
        base,
        instance_id="calc-options",
        test_cmd="/venv/bin/python -m pytest -rA --tb=no -p no:cacheprovider -p pytester tests/test_ops.py "
        "tests/test_spaces.py tests/test_options.py",
        test_patch=CALC_TEST_PATCH + new_file("tests/test_options.py", OPTIONS_TESTS) + INI_PATCH,
        FAIL_TO_PASS=(*base.FAIL_TO_PASS, *NEEDS),
    )


def test_gold_is_resolved_and_confirmed_with_the_log_run_s_options(calc_layer, calc_task):
    report = grade(options_task(calc_task), GOLD, layers=[calc_layer])
    assert report.resolved and report.reward == 1.0 and report.confirm == "confirmed", report.to_dict()
    assert all(report.tests[t].status == "passed" for t in NEEDS), report.to_dict()


def test_an_empty_diff_is_unresolved(calc_layer, calc_task):
    report = grade(options_task(calc_task), "", layers=[calc_layer])
    assert not report.resolved and report.reward == 0.0 and report.confirm == "", report.to_dict()


def test_a_forged_log_is_still_rejected_by_the_confirmation(calc_layer, calc_task):
    report = grade(
        options_task(calc_task), BREAK_SUB + new_file_over_empty("calc/__init__.py", P2P_FILTER), layers=[calc_layer]
    )
    assert report.log_status == "ok" and all(report.tests[t].status == "passed" for t in SUB_IDS), report.to_dict()
    assert report.confirm == "failed" and report.reward == 0.0 and not report.resolved, report.to_dict()
    said = {e for e in report.errors if e.startswith(PREFIX)}
    assert said == {f"{PREFIX}P2P test {t} is failed there (the log's status: passed)" for t in SUB_IDS}, report.errors


@pytest.mark.parametrize("extra", ["--runxfail", "--import-mode=importlib --capture=no", "-p no:doctest --strict"])
def test_gold_stays_confirmed_with_other_options_of_the_log_run(calc_layer, calc_task, extra):
    # carried ones must not trip the runner; --runxfail would (it replaces pytest.xfail), so it is dropped
    task = options_task(calc_task)
    task = dataclasses.replace(task, test_cmd=task.test_cmd.replace(" -p pytester", f" -p pytester {extra}"))
    report = grade(task, GOLD, layers=[calc_layer])
    assert report.resolved and report.reward == 1.0 and report.confirm == "confirmed", report.to_dict()


# -- what is carried ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "test_cmd, expected",
    [
        ("pytest -rA tests/test_x.py", []),  # SWE-bench's: log shapes and directives only
        ("pytest -rA -vv -o console_output_style=classic --tb=no astropy/io/tests/test_x.py", []),
        ("pytest --no-header -rA tests/test_x.py", []),
        ("tox --current-env -epy39 -v -- tests/test_x.py", []),  # not a pytest command
        (
            "/venv/bin/python -m pytest -p pytester -W error::UserWarning tests/t.py",
            ["-p", "pytester", "-W", "error::UserWarning"],
        ),
        (
            "python -m pytest -ppytester -Werror --import-mode=importlib t.py",
            ["-p", "pytester", "-W", "error", "--import-mode=importlib"],
        ),
        (
            "pytest -o xfail_strict=true --ds=proj.settings -p no:randomly t.py",
            ["-o", "xfail_strict=true", "--ds=proj.settings", "-p", "no:randomly"],
        ),
        ("pytest -sv --tb short --runxfail t.py", ["-s"]),
        ("pytest --ds proj.settings t.py", ["--ds", "proj.settings"]),  # an option's value, not a directive
        ("pytest --junitxml=x.xml --rootdir=/ -c other.ini --lf -p no:cacheprovider -p junitxml t.py", []),
        ("pytest -k 'not slow' -m fast --deselect t.py::a -x --maxfail=2 -n 4 --dist load --cov=proj t.py", []),
        ("pytest -o junit_family=xunit2 -o cache_dir=/x -o addopts= t.py", []),
        ("pytest -rA t.py && echo done", []),  # more than one command: nothing is read
    ],
)
def test_what_test_cmd_carries(test_cmd, expected):
    assert co.rerun_options(test_cmd, {}) == expected


INI = {"setup.cfg": "[metadata]\nname = x\n\n[tool:pytest]\naddopts =\n    -p pytester\n    --color=yes -rN\n"}


def test_the_ini_s_addopts_come_first_and_test_cmd_s_override_replaces_them():
    assert co.rerun_options("pytest -rA -W error t.py", INI) == ["-p", "pytester", "-W", "error"]
    assert co.rerun_options("pytest -o 'addopts=-p no:warnings' t.py", INI) == ["-p", "no:warnings"]
    assert co.rerun_options("pytest -o addopts= t.py", INI) == []
    assert co.rerun_options("tox -e py39 -- t.py", INI) == ["-p", "pytester"]  # the pytest it starts reads it


@pytest.mark.parametrize(
    "files, expected",
    [
        ({"pytest.ini": "", "setup.cfg": INI["setup.cfg"]}, ""),  # a pytest.ini wins even without its section
        ({"pytest.ini": "[pytest]\naddopts = -p a\n", "setup.cfg": INI["setup.cfg"]}, "-p a"),
        ({"pyproject.toml": "[tool.black]\n", "tox.ini": "[pytest]\naddopts = -p b\n"}, "-p b"),
        ({"pyproject.toml": "[tool.pytest.ini_options]\naddopts = ['-p', 'c d']\n"}, "-p 'c d'"),
        ({"pyproject.toml": "[tool.pytest.ini_options]\naddopts = '-p e'\n", "setup.cfg": INI["setup.cfg"]}, "-p e"),
        ({"tox.ini": "[tox]\nenvlist = py\n", "setup.cfg": INI["setup.cfg"]}, "-p pytester --color=yes -rN"),
        ({"setup.cfg": "[flake8]\nmax-line-length = 99\n"}, ""),
        ({}, ""),
        ({"pytest.toml": "[pytest]\naddopts = ['-p', 'f']\n", "pytest.ini": "[pytest]\naddopts = -p a\n"}, "-p f"),
        ({".pytest.toml": "", "setup.cfg": INI["setup.cfg"]}, ""),  # pytest 9: it wins even when empty
        ({"pyproject.toml": "[tool.pytest]\naddopts = ['-p', 'g']\n", "setup.cfg": INI["setup.cfg"]}, "-p g"),
    ],
)
def test_the_ini_pytest_chooses_at_the_root(files, expected):
    assert co.ini_addopts(files) == expected


def test_the_rerun_task_takes_the_options_before_the_runner_s_hardening():
    rerun = runner_task(calc_log_task(calc_task()), "/venv/bin/python", ["-p", "pytester", "-W", "error::UserWarning"])
    assert rerun.test_cmd == "/venv/bin/python -m pytest -p pytester -W error::UserWarning"
    assert rerun.pytest_options == ["-p", "pytester", "-W", "error::UserWarning"]


# -- the root ini's addopts are the record's ---------------------------------------------------------------
# A task whose log run reads calc's own pytest.ini (no -o addopts= in test_cmd, no test_patch hunk on it). Its
# F2P test has no 'add' in its name, so calc's `-k 'not add'` keeps it in the log run; the rerun drops -k.
PLUS_TEST = "from calc.ops import add\n\n\ndef test_plus():\n    assert add(2, 3) == 5\n"
# a diff may not change what the rerun reads: its config-file sections are dropped (diffs.TEST_CONFIG_FILES),
# and the rerun reads the config before the diff is applied anyway
INI_EDIT = (
    "diff --git a/pytest.ini b/pytest.ini\n--- a/pytest.ini\n+++ b/pytest.ini\n@@ -1,2 +1,2 @@\n [pytest]\n"
    "-addopts = -k 'not add'\n+addopts = -k 'not add' -p calc.fixplugin\n"
)


def plus_task(calc_task):
    base = calc_log_task(calc_task)
    return dataclasses.replace(
        base,
        instance_id="calc-plus",
        test_cmd="/venv/bin/python -m pytest -rA --tb=no -p no:cacheprovider tests/test_ops.py tests/test_plus.py",
        test_patch=new_file("tests/test_plus.py", PLUS_TEST),
        FAIL_TO_PASS=("tests/test_plus.py::test_plus",),
    )


def test_the_base_ini_s_selection_is_not_carried_and_gold_is_confirmed(calc_layer, calc_task):
    report = grade(plus_task(calc_task), GOLD, layers=[calc_layer])
    assert report.resolved and report.reward == 1.0 and report.confirm == "confirmed", report.to_dict()
    assert not grade(plus_task(calc_task), "", layers=[calc_layer]).resolved


def test_a_diff_s_config_edit_reaches_neither_run(calc_layer, calc_task):
    report = grade(plus_task(calc_task), GOLD + INI_EDIT, layers=[calc_layer])
    assert report.dropped == [("pytest.ini", "test configuration: pytest.ini")], report.to_dict()
    assert report.resolved and report.confirm == "confirmed", report.to_dict()
