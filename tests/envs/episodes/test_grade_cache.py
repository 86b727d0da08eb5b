"""Grade memoisation: identical final diffs of one task are graded once; any other diff is graded afresh."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from swebox.envs import group
from swebox.envs.episodes.grade_cache import GradeCache, applied_text, cacheable, grade_key
from swebox.envs.tasks.graders.grading import GradeReport, grade

from tests.calc import GOLD, SUBMIT, apply_patch, calc_task

WRONG = GOLD.replace("+    return a + b", "+    return a * b")
"""Touches the same file and line as the gold fix, but add(2, 3) == 6."""
README = "diff --git a/README.md b/README.md\n--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-calc\n+calc!\n"
TEST_EDIT = (
    "diff --git a/tests/test_ops.py b/tests/test_ops.py\n--- a/tests/test_ops.py\n+++ b/tests/test_ops.py\n"
    "@@ -1 +1 @@\n-import pytest\n+import pytest  # dropped by the filter\n"
)
# Two sections of calc/ops.py: in this order add becomes a * b, then a + b (the fix); in the other order the
# first section's context is not there yet and git refuses the diff. The old key sorted them: one verdict.
TO_MUL = GOLD.replace("+    return a + b", "+    return a * b")
MUL_TO_ADD = GOLD.replace("-    return a - b", "-    return a * b")


def test_the_key_is_the_text_graded_in_its_order_and_any_other_difference_changes_it():
    task = calc_task()
    key = lambda diff, **kw: grade_key(task, diff, ["/layers/env"], **{"reward_mode": "binary", "timeout": 60, **kw})  # noqa: E731
    assert key(GOLD + README) == key(GOLD + README)
    # issue 31 class 6: git applies sections in the order given and the agent controls that order
    # (diff.orderFile); the old key sorted them, so two orders shared one verdict
    assert key(GOLD + README) != key(README + GOLD)
    assert applied_text(task, README + GOLD) == README + GOLD
    # a dropped section or text between sections can change git's reading of the whole diff: never shared
    assert key("preamble\n" + GOLD) != key(GOLD) != key(GOLD + TEST_EDIT)
    assert (
        len(
            {
                key(GOLD),
                key(WRONG),
                key(GOLD + README),
                key(""),
                key(GOLD, reward_mode="fraction"),
                key(GOLD, timeout=61),
                grade_key(calc_task(instance_id="other"), GOLD, ["/layers/env"], reward_mode="binary", timeout=60),
                grade_key(task, GOLD, ["/layers/other"], reward_mode="binary", timeout=60),
            }
        )
        == 8
    )


def test_a_diff_in_another_section_order_is_graded_afresh(calc_layer):
    task = calc_task()

    def graded(cache: GradeCache, diff: str):
        key = grade_key(task, diff, [calc_layer], reward_mode="binary", timeout=120)
        return cache.get_or_grade(key, lambda: grade(task, diff, layers=[calc_layer], timeout=120))

    first = GradeCache()
    fixed, hit = graded(first, TO_MUL + MUL_TO_ADD)
    assert fixed.resolved and fixed.reward == 1.0 and not hit, fixed.to_dict()
    swapped, hit = graded(first, MUL_TO_ADD + TO_MUL)  # was served the cached 1.0
    assert not hit and not swapped.applied and swapped.reward == 0.0, swapped.to_dict()
    # and the reverse: the refused order graded first must not cost the working order its reward
    second = GradeCache()
    assert graded(second, MUL_TO_ADD + TO_MUL)[0].reward == 0.0
    again, hit = graded(second, TO_MUL + MUL_TO_ADD)
    assert not hit and again.resolved and again.reward == 1.0, again.to_dict()
    assert first.misses == second.misses == 2 and first.hits == second.hits == 0


def test_timing_dependent_verdicts_are_not_kept():
    assert cacheable(GradeReport("t", applied=True, verdict="ok"))
    assert cacheable(GradeReport("t", applied=False, apply_error="corrupt patch"))
    assert not cacheable(GradeReport("t", applied=True, verdict="ok", timed_out=True))
    assert not cacheable(GradeReport("t", applied=True, verdict="missing"))
    # a log grade: its confirmation under the runner must have had a whole run too (log_confirm.py)
    assert cacheable(GradeReport("t", applied=True, log_status="ok", confirm="failed"))
    assert not cacheable(GradeReport("t", applied=True, log_status="ok", confirm="unfinished"))
    cache, runs = GradeCache(), []

    def timed_out() -> GradeReport:
        runs.append(1)
        return GradeReport("t", applied=True, timed_out=True)

    assert [cache.get_or_grade("k", timed_out)[1] for _ in range(2)] == [False, False] and len(runs) == 2
    assert cache.hits == 0 and len(cache) == 0


def test_single_flight_under_threads_and_a_failed_grader_keeps_nothing():
    cache, runs, gate = GradeCache(max_entries=2), [], threading.Event()

    def slow() -> GradeReport:
        runs.append(1)
        gate.wait(5)
        return GradeReport("t", resolved=True, reward=1.0, applied=True, verdict="ok")

    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(cache.get_or_grade, "k", slow) for _ in range(8)]
        time.sleep(0.2)
        gate.set()
        results = [f.result() for f in futures]
    assert len(runs) == 1 and sorted(hit for _, hit in results) == [False] + [True] * 7
    assert cache.hits == 7 and cache.misses == 1 and all(r.reward == 1.0 for r, _ in results)
    results[1][0].reward = -5.0  # a served copy, never the kept verdict
    assert cache.get_or_grade("k", slow)[0].reward == 1.0

    def broken() -> GradeReport:
        raise OSError("sandbox failed")

    with pytest.raises(OSError, match="sandbox failed"):
        cache.get_or_grade("j", broken)
    assert cache.get_or_grade("j", slow)[1] is False  # graded afresh, not a kept failure
    cache.get_or_grade("x", slow)  # max_entries=2: the least recently used ("k") goes
    assert cache.get_or_grade("k", slow)[1] is False


def _finish(episode, diff: str):
    episode.reset()
    if diff:
        episode.step(apply_patch(diff))
    return episode.step(SUBMIT)


def test_identical_diffs_reuse_the_verdict_and_a_wrong_diff_is_graded(calc_layer):
    cache = GradeCache()
    task = calc_task()
    with group(task, 4, layers=[calc_layer], config={"max_turns": 4}, grade_cache=cache) as g:
        gold_a = _finish(g[0], GOLD)
        wrong = _finish(g[1], WRONG)  # after the gold verdict is kept: it must not be served it
        gold_b = _finish(g[2], GOLD)
        empty = _finish(g[3], "")
        hits = [ep.metrics["env/grade_cache_hits"] for ep in g]
    assert [gold_a.reward, wrong.reward, gold_b.reward, empty.reward] == [1.0, 0.0, 1.0, 0.0]
    assert hits == [0.0, 0.0, 1.0, 0.0] and cache.hits == 1 and cache.misses == 3
    assert wrong.info["grade"]["resolved"] is False
    assert wrong.info["grade"]["tests"]["tests/test_ops.py::test_add"]["status"] == "failed"
    assert gold_b.info["grade"] == gold_a.info["grade"] and gold_b.info["diff"] == gold_a.info["diff"]
    # a later group of the same task (the next step): its episodes finishing at once are graded once per diff
    with group(task, 3, layers=[calc_layer], config={"max_turns": 4}, grade_cache=cache) as g:
        with ThreadPoolExecutor(3) as pool:
            later = list(pool.map(_finish, g, [GOLD, "", ""]))
        assert [ep.metrics["env/grade_cache_hits"] for ep in g] == [1.0, 1.0, 1.0]
        assert max(ep.metrics["env/grade_s"] for ep in g) < gold_a.info["metrics"]["env/grade_s"]
    assert [r.reward for r in later] == [1.0, 0.0, 0.0] and later[1].info["grade"] == empty.info["grade"]
    assert cache.misses == 3 and len(cache) == 3


def test_without_a_cache_every_episode_is_graded(calc_layer):
    with group(calc_task(), 2, layers=[calc_layer], config={"max_turns": 4}) as g:
        results = [_finish(ep, GOLD) for ep in g]
        assert [ep.grade_cache for ep in g] == [None, None]
        assert [ep.metrics["env/grade_cache_hits"] for ep in g] == [0.0, 0.0]
        assert all(r.info["grade"]["durations"]["tests"] > 0 for r in results)
        assert results[0].info["grade"]["durations"] != results[1].info["grade"]["durations"]  # two real runs
    assert [r.reward for r in results] == [1.0, 1.0]
