"""Grade memoisation: an episode whose final diff was already graded for the same task reuses that verdict.

In GRPO, the G rollouts of a group often end with the same diff (a converged policy submits the same fix; a
weak one submits nothing), and grading (a fresh sandbox running the task's tests) is the slowest part of an
episode. A task's verdict is meant to be a function of the diff, the task and the layers it is graded over:
synthesis keeps only tests that pass in every one of its baseline runs (``SynthConfig.baseline_runs``) and
drops flaky ones. For a task set with flaky tests, a kept verdict stands where a rerun might differ: turn the
cache off (``env.grade_cache=false``).

The key is content-addressed: SHA-256 over the task (its full record: tests, test_patch, F2P/P2P ids), the
grade layers (folders named by their content keys), the reward mode, the grade timeout and the sandbox
policy, the text the grader applies (the filtered diff, its sections in the order given: git applies them in
that order, and two sections of one file in the other order are another tree, or do not apply) and the
agent's diff exactly as given (git's reading of the whole diff, dropped sections and text between sections
included, can refuse it). Nothing is normalised: the agent controls the order of its diff's sections (e.g.
``diff.orderFile`` in its own ``.git/config``), so sorting them would serve one diff another's verdict.
A verdict that could depend on timing (the test run timed out, the runner did not finish) is not kept.

One :class:`GradeCache` is shared by the episodes of one process (a rollout worker, a Ray actor); it is
thread-safe and single-flight: when several episodes finish with the same diff at once, one grades and the
others wait for its verdict instead of grading it again.
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from swebox.envs.tasks.graders.diffs import filter_diff, own_modules
from swebox.envs.tasks.graders.grading import GradeReport, protected_files
from swebox.envs.tasks.schema import Task


def applied_text(task: Task, diff: str) -> str:
    """The text :func:`swebox.envs.tasks.graders.grading.grade` applies for ``diff``: its filtered sections, in
    order."""
    return filter_diff(diff or "", protected_files(task), own_modules(task.repo)).text


def grade_key(
    task: Task, diff: str, layers: list, *, reward_mode: str, timeout: float, policy: dict[str, Any] | None = None
) -> str:
    """The content address of grading ``diff`` for ``task`` over ``layers`` (hex SHA-256)."""
    context = json.dumps(
        {
            "task": task.to_dict(),
            "layers": [str(p) for p in layers],
            "reward_mode": reward_mode,
            "timeout": float(timeout),
            "policy": policy or {},
        },
        sort_keys=True,
        default=str,
    )
    digest = hashlib.sha256()
    digest.update(hashlib.sha256(context.encode()).digest())
    for text in (applied_text(task, diff), diff or ""):  # each hashed first: no two pairs share one stream
        # surrogatepass is lossless for any str (an agent's text may hold lone surrogates)
        digest.update(hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).digest())
    return digest.hexdigest()


def cacheable(report: GradeReport) -> bool:
    """A verdict the same diff would get again: the run finished in time and its results were read."""
    if report.timed_out:
        return False
    if not report.applied:  # git apply's refusal depends only on the diff and the layers
        return True
    # the grader read a whole run: the monitor's signed verdict (junit) or a finished, parsed log (log), and
    # the log verdict's confirmation, when it ran, had one too
    if report.confirm == "unfinished":
        return False
    return (report.log_status if report.log_status else report.verdict) == "ok"


class GradeCache:
    """Verdicts by :func:`grade_key`, at most ``max_entries`` (least recently used go first)."""

    def __init__(self, max_entries: int = 4096) -> None:
        if max_entries < 1:
            raise ValueError(f"GradeCache.max_entries: expected >= 1; found {max_entries}. Use e.g. 4096.")
        self.max_entries = max_entries
        self.hits = 0
        self.misses = 0
        self._done: OrderedDict[str, GradeReport] = OrderedDict()
        self._running: dict[str, Future] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._done)

    def get_or_grade(self, key: str, run: Callable[[], GradeReport]) -> tuple[GradeReport, bool]:
        """(report, hit): the kept verdict of ``key``, else ``run()``'s (kept when :func:`cacheable`).

        A caller that finds ``key`` being graded by another thread waits for that verdict. ``run`` raising
        propagates to its caller and leaves nothing kept; the waiters then grade themselves.
        """
        while True:
            with self._lock:
                if key in self._done:
                    self._done.move_to_end(key)
                    self.hits += 1
                    return copy.deepcopy(self._done[key]), True
                waiting = self._running.get(key)
                if waiting is None:
                    mine: Future = Future()
                    self._running[key] = mine
                    self.misses += 1
                    break
            try:
                report = waiting.result()
            except Exception:
                continue  # the grader failed: try again (this thread may become the grader)
            if report is None:  # graded but not cacheable (e.g. timed out): grade this one too
                with self._lock:
                    self.misses += 1
                return run(), False
            with self._lock:
                self.hits += 1
            return copy.deepcopy(report), True
        try:
            report = run()
        except BaseException as exc:
            with self._lock:
                del self._running[key]
            mine.set_exception(exc)
            raise
        keep = cacheable(report)
        with self._lock:
            del self._running[key]
            if keep:
                self._done[key] = copy.deepcopy(report)
                while len(self._done) > self.max_entries:
                    self._done.popitem(last=False)
        mine.set_result(copy.deepcopy(report) if keep else None)
        return report, False
