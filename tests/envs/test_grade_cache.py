"""Grade memoisation: identical final diffs of one task are graded once; any other diff is graded afresh."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from swebox.envs import group
from swebox.envs.grade_cache import GradeCache, cacheable, grade_key, normalise_diff
from swebox.envs.tasks.grading import GradeReport

from tests.calc import GOLD, SUBMIT, apply_patch, calc_task

WRONG = GOLD.replace("+    return a + b", "+    return a * b")
"""Touches the same file and line as the gold fix, but add(2, 3) == 6."""
README = "diff --git a/README.md b/README.md\n--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-calc\n+calc!\n"


def test_normalised_diffs_share_a_key_and_any_other_difference_does_not():
    task = calc_task()
    key = lambda diff, **kw: grade_key(task, diff, ["/layers/env"], **{"reward_mode": "binary", "timeout": 60, **kw})  # noqa: E731
    assert normalise_diff("preamble\n" + GOLD + README) == normalise_diff(README + GOLD)
    assert key(GOLD + README) == key(README + GOLD)
    assert len({key(GOLD), key(WRONG), key(GOLD + README), key(""), key(GOLD, reward_mode="fraction"),
                key(GOLD, timeout=61), grade_key(calc_task(instance_id="other"), GOLD, ["/layers/env"],
                                                 reward_mode="binary", timeout=60),
                grade_key(task, GOLD, ["/layers/other"], reward_mode="binary", timeout=60)}) == 8


def test_timing_dependent_verdicts_are_not_kept():
    assert cacheable(GradeReport("t", applied=True, verdict="ok"))
    assert cacheable(GradeReport("t", applied=False, apply_error="corrupt patch"))
    assert not cacheable(GradeReport("t", applied=True, verdict="ok", timed_out=True))
    assert not cacheable(GradeReport("t", applied=True, verdict="missing"))
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
