"""Grading in a real sandbox over a fixture env layer: the verdict, the reward modes, and the failure modes."""

from __future__ import annotations

import dataclasses

import pytest
from swebox.envs.tasks.graders.grading import grade


def test_gold_patch_resolves(calc_layer, calc_task, gold):
    report = grade(calc_task, gold["add"], layers=[calc_layer])
    assert report.errors == [] and report.tampered == [] and report.dropped == []
    assert report.applied and report.verdict == "ok"
    assert (report.f2p_passed, report.f2p_total, report.p2p_passed, report.p2p_total) == (1, 1, 5, 5)
    assert report.resolved and report.reward == 1.0
    assert report.tests["tests/test_ops.py::test_add"].status == "passed"
    assert report.tests["tests/test_ops.py::test_add"].duration_s >= 0.0
    assert set(report.durations) == {"start", "apply", "rewrite", "tests", "total"}


def test_empty_diff_does_not_resolve(calc_layer, calc_task):
    report = grade(calc_task, "", layers=[calc_layer])
    assert report.applied and not report.resolved and report.reward == 0.0
    assert report.tests["tests/test_ops.py::test_add"].status == "failed"
    assert "assert -1 == 5" in report.tests["tests/test_ops.py::test_add"].message
    assert (report.f2p_passed, report.p2p_passed) == (0, 5)


def test_fraction_reward_counts_f2p_and_zeroes_on_a_p2p_failure(calc_layer, calc_task, gold):
    task = dataclasses.replace(calc_task, FAIL_TO_PASS=("tests/test_ops.py::test_add", "tests/test_ops.py::test_div"))
    half = grade(task, gold["add"], layers=[calc_layer], reward_mode="fraction")
    assert (half.f2p_passed, half.resolved, half.reward) == (1, False, 0.5)
    both = grade(task, gold["add"] + gold["div"], layers=[calc_layer], reward_mode="fraction")
    assert (both.f2p_passed, both.resolved, both.reward) == (2, True, 1.0)
    breaks_mul = gold["add"] + (
        "diff --git a/calc/ops.py b/calc/ops.py\n--- a/calc/ops.py\n+++ b/calc/ops.py\n"
        "@@ -9,5 +9,5 @@ def sub(a, b):\n def mul(a, b):\n-    return a * b\n+    return a * b + 1\n"
        " \n \n def div(a, b):\n"
    )
    broken = grade(task, breaks_mul, layers=[calc_layer], reward_mode="fraction")
    assert broken.applied and broken.f2p_passed == 1 and broken.p2p_passed < 5 and broken.reward == 0.0
    with pytest.raises(ValueError, match="expected one of"):
        grade(task, "", layers=[calc_layer], reward_mode="partial")


def test_a_diff_that_does_not_apply_gets_zero_and_the_reason(calc_layer, calc_task, gold):
    bad = gold["add"].replace("-    return a - b", "-    return a * b * b")
    report = grade(calc_task, bad, layers=[calc_layer])
    assert not report.applied and report.reward == 0.0 and not report.resolved
    assert "calc/ops.py" in report.apply_error and report.errors[0].startswith("the diff does not apply")
    assert report.tests == {}


def test_unknown_test_ids_are_reported_not_dropped(calc_layer, calc_task, gold):
    task = dataclasses.replace(
        calc_task,
        PASS_TO_PASS=(*calc_task.PASS_TO_PASS, "tests/test_ops.py::test_nope", "tests/test_gone.py::test_x"),
    )
    report = grade(task, gold["add"], layers=[calc_layer])
    assert not report.resolved and report.reward == 0.0
    assert report.tests["tests/test_ops.py::test_nope"].status == "missing"
    assert [i for i, _ in report.unknown_ids] == [
        "tests/test_ops.py::test_nope",
        "tests/test_gone.py::test_x",
    ]


def test_the_verdict_does_not_depend_on_the_commands_output_cap(calc_layer, calc_task, gold):
    from swebox.envs.sandbox import SandboxPolicy

    # the monitor's verdict travels in a file: a run whose output is cut still has all of it
    policy = SandboxPolicy(network="none", max_output_bytes=200)
    report = grade(calc_task, gold["add"], layers=[calc_layer], policy=policy)
    assert report.verdict == "ok" and report.resolved and report.reward == 1.0, report.to_dict()
