"""Hypothesis's ``@given`` under the runner's return watch (issue 31), graded for real under both graders.

A test its file wraps is run by pytest through its decorators' layers, and the call passes only if the test's
own ``def`` ran to its end (``runner_origins.watch_returns``). That was proved with ``mock.patch``
(test_redteam_round3.py), which calls the test once. ``@given``, the commonest wrapping decorator in real
projects, calls it many times, lets some of those calls unwind on purpose (``assume``, a draw that runs out of
data), shrinks a failure by calling it again, and wraps it in layers of its own making (whose code claims the
test file's name). A false flag there would give an honest gold patch 0 on every project that uses hypothesis.

The task: calc (tests/calc.py) in an env with hypothesis installed, plus ``tests/test_hyp.py``, whose F2P tests
are ``@given`` tests (plain, with ``@settings``, and with ``@pytest.mark.parametrize``) and whose P2P tests are
a passing ``@given`` test that rejects examples with ``assume`` and one marked ``xfail`` that fails with div's bug
in place (the gold patch fixes add only). The gold patch resolves with no tampering entry; the empty diff does
not; a layer planted around a ``@given`` test (one that never calls it, one that calls it and swallows its
failure) earns nothing. The swallowing layer shows why the watch looks at every layer and not only at the
``def``: hypothesis ran the ``def`` to its end on the examples add gets right (``b == 0``), and only its own
layer, which raised the failure the planted one swallowed, never returned (shown on the parametrized test too,
whose ``def`` returns on the examples with ``a == 0``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
from swebox.envs.tasks.graders.grading import grade

from tests.calc import CALC_FILES, calc_log_task
from tests.envs.tasks.graders.test_grading_tamper import new_file
from tests.envs.tasks.graders.test_redteam_round3 import NEVER_CALLS, SWALLOWS, _caught, _graded, _wrap_on_bind
from tests.fixture_env import build_env_layer, discard_env_layer

HYPOTHESIS = ("hypothesis==6.168.3", "sortedcontainers==2.4.0")
FILE = "tests/test_hyp.py"
HYP_LINES = [
    "import pytest",
    "from hypothesis import assume, given, settings",
    "from hypothesis import strategies as st",
    "",
    "from calc.ops import add, div, sub",
    "",
    "# no deadline: a grade may run on a loaded machine, and under the runner's profile function",
    'settings.register_profile("grade", deadline=None, database=None)',
    'settings.load_profile("grade")',
    "",
    "",
    "@given(st.integers(), st.integers())",
    "def test_add_given(a, b):",
    "    assert add(a, b) == a + b",
    "",
    "",
    "@settings(max_examples=30, derandomize=True)",
    "@given(a=st.integers(min_value=-1000, max_value=1000))",
    "def test_add_settings(a):",
    "    assert add(a, a) == 2 * a",
    "",
    "",
    '@pytest.mark.parametrize("b", [1, 7])',
    "@settings(max_examples=25)",
    "@given(st.integers())",
    "def test_add_param(b, a):",
    "    assert add(b, a) == a + b",
    "",
    "",
    "@given(st.integers(), st.integers())",
    "def test_sub_given(a, b):",
    "    assume(a != b)",
    "    assert sub(a, b) != 0",
    "",
    "",
    '@pytest.mark.xfail(strict=True, reason="div is still buggy")',
    "@given(st.integers(), st.integers(min_value=1, max_value=100))",
    "def test_div_given(a, b):",
    "    assert div(a, b) * b == a",
]
HYP_TEST_PATCH = new_file(FILE, "".join(line + "\n" for line in HYP_LINES))
GIVEN_ID = f"{FILE}::test_add_given"
F2P = [GIVEN_ID, f"{FILE}::test_add_settings", f"{FILE}::test_add_param[1]", f"{FILE}::test_add_param[7]"]
P2P = [f"{FILE}::test_sub_given", f"{FILE}::test_div_given", "tests/test_ops.py::test_sub"]


@pytest.fixture(scope="module")
def hyp_layer() -> Iterator[Path]:
    """calc's env layer with hypothesis installed in its /venv (from the package index's wheels)."""
    layer = build_env_layer(CALC_FILES, "calc", HYPOTHESIS)
    yield layer.path
    discard_env_layer(layer)


@pytest.fixture(params=["junit", "log"])
def hyp_task(request, calc_task):
    """calc with tests/test_hyp.py, graded by the JUnit runner or by its log (whose passes of F2P tests go on to
    the confirmation under the same runner)."""
    fields = {"test_patch": HYP_TEST_PATCH, "FAIL_TO_PASS": F2P, "PASS_TO_PASS": P2P}
    if request.param == "junit":
        return dataclasses.replace(calc_task, **fields)
    log = calc_log_task(calc_task)
    return dataclasses.replace(log, **fields, test_cmd=log.test_cmd.replace("tests/test_spaces.py", FILE))


def test_the_hypothesis_tests_fail_with_the_bug_in_place(hyp_layer, hyp_task):
    control = grade(hyp_task, "", layers=[hyp_layer])
    assert {t: control.tests[t].status for t in F2P} == dict.fromkeys(F2P, "failed"), control.to_dict()
    assert control.tests[P2P[0]].status == "passed", control.to_dict()  # assume() unwinds some calls: no alarm
    assert control.tests[P2P[1]].status == "xfailed", control.to_dict()
    assert not control.resolved and control.reward == 0.0 and control.tampered == [], control.to_dict()


def test_the_gold_patch_resolves_the_hypothesis_tests_with_no_alarm(hyp_layer, hyp_task, gold):
    report = grade(hyp_task, gold["add"], layers=[hyp_layer])
    assert {t: report.tests[t].status for t in F2P} == dict.fromkeys(F2P, "passed"), report.to_dict()
    assert report.tests[P2P[1]].status == "xfailed", report.to_dict()  # a failing @given test: no alarm either
    assert report.resolved and report.reward == 1.0 and report.tampered == [], report.to_dict()
    assert report.confirm == ("confirmed" if hyp_task.grader == "log" else ""), report.to_dict()


# A @given test with a deadline its examples meet unwatched (about 15 ms each here) but not under the watch's
# profile function (4-7x slower, docs/tasks.md): the harness passes it with the gold patch, and so must the runner.
TIMED_FILE = "tests/test_timed.py"
TIMED_TEST = """from hypothesis import given, settings
from hypothesis import strategies as st

from calc.ops import add


@settings(deadline=25, max_examples=5, database=None)
@given(st.integers(0, 10))
def test_add_in_time(a):
    for i in range(120000):
        assert add(a, i) == a + i
"""
TIMED_ID = f"{TIMED_FILE}::test_add_in_time"


def test_hypothesis_timing_checks_do_not_fail_a_watched_test(hyp_layer, calc_task, gold):
    task = dataclasses.replace(
        calc_task, test_patch=new_file(TIMED_FILE, TIMED_TEST), FAIL_TO_PASS=[TIMED_ID], PASS_TO_PASS=[]
    )
    report = grade(task, gold["add"], layers=[hyp_layer])
    assert report.tests[TIMED_ID].status == "passed", report.to_dict()
    assert report.resolved and report.reward == 1.0 and report.tampered == [], report.to_dict()
    control = grade(task, "", layers=[hyp_layer])  # the lifted clock passes nothing the assertion fails
    assert control.tests[TIMED_ID].status == "failed" and control.reward == 0.0, control.to_dict()


PARAM_IDS = F2P[2:]


@pytest.mark.parametrize(
    ("test", "layer", "reason"),
    [
        ("test_add_given", NEVER_CALLS, "its own def (line 12) did not run to its end"),
        # the def returned on the examples add gets right; hypothesis's layer raised the failure the forger swallowed
        ("test_add_given", SWALLOWS, "its layer test_add_given (line 12 of /testbed/tests/test_hyp.py) did not return"),
        # under @pytest.mark.parametrize and @settings (each returns the function it marks): the same, per case
        ("test_add_param", SWALLOWS, "its layer test_add_param (line 23 of /testbed/tests/test_hyp.py) did not return"),
    ],
    ids=["never-calls", "swallows-its-failure", "swallows-under-parametrize"],
)
def test_a_layer_planted_around_a_given_test_earns_nothing(hyp_layer, hyp_task, test, layer, reason):
    # the planted test is the only F2P one, so a log that says it passed goes on to the confirmation
    ids = [GIVEN_ID] if test == "test_add_given" else PARAM_IDS
    task = dataclasses.replace(hyp_task, FAIL_TO_PASS=ids)
    report = _graded(task, _wrap_on_bind(FILE, test, layer), layers=[hyp_layer])
    if task.grader == "log":  # the log believed the layer; the confirmation under the runner did not
        assert report.confirm == "failed", report.to_dict()
    assert {t: report.tests[t].status for t in ids} == dict.fromkeys(ids, "passed"), report.to_dict()
    _caught(report, f"{ids[0]}: the test function is wrapped, and {reason}")


# A swallowing layer set as the handle's inner_test, which hypothesis reads at each call (a plain attribute that
# hypothesis documents for plugins to replace): the chain is given's layer, the planted one, the def; each returns.
SET_INNER_TEST = _wrap_on_bind(FILE, "test_add_given", SWALLOWS).replace(
    "        self.mod['test_add_given'] = functools.wraps(inner)(_swallowing(inner))\n",
    "        h = inner.hypothesis\n        h.inner_test = functools.wraps(h.inner_test)(_swallowing(h.inner_test))\n",
)


@pytest.mark.xfail(
    strict=True,
    reason="not seen: a layer set as a @given test's .hypothesis.inner_test that swallows its failures, as a "
    "changed closure cell is not; docs/tasks.md, 'What remains'",
)
def test_a_swallowing_layer_set_as_the_inner_test_earns_nothing(hyp_layer, calc_task):
    # strict: were the line not replaced, the rebinding layer would be caught and this test would xpass
    task = dataclasses.replace(calc_task, test_patch=HYP_TEST_PATCH, FAIL_TO_PASS=[GIVEN_ID], PASS_TO_PASS=P2P)
    report = _graded(task, SET_INNER_TEST, layers=[hyp_layer])
    assert not report.resolved and report.reward == 0.0, report.to_dict()
