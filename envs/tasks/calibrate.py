"""Task calibration: is a task solvable and stable before anyone trains on it?

:func:`calibrate_task` grades a task's gold patch ``runs`` times and the empty diff ``runs`` times, each in a
fresh sandbox (:func:`swebox.envs.tasks.graders.grading.grade`), and records how often each resolved, which tests are
flaky (a test whose status is not the same in every run of the same diff) and how long grading took.
:func:`write_calibration` saves a table of them (JSON, docs/tasks.md "Calibration"); :mod:`calibrate_select`
reads it back for the trainer and ``swebox eval``.

A flaky test is *quarantined*: left out of the task's F2P/P2P lists. Whether a task is usable is then judged on
the runs with the flaky tests left out (``gold_stable``, ``empty_stable``), so a task whose gold only failed
because of a flaky P2P test stays usable once that test is quarantined.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from swebox.envs.cache.durable import write_atomic
from swebox.envs.tasks.graders.grading import F2P_PASSING, P2P_PASSING, GradeReport, grade
from swebox.envs.tasks.graders.provenance import task_digest
from swebox.envs.tasks.schema import Task
from swebox.envs.tasks.validate import LayerResolver

FORMAT = 1
KINDS = ("gold", "empty")


@dataclass
class TaskCalibration:
    """One task's calibration: ``runs`` grades of its gold patch and of the empty diff."""

    instance_id: str
    """The task."""
    task_digest: str
    """The task's content digest (provenance.task_digest): a calibration of another version of it is stale."""
    runs: int
    """Grades of each diff (gold, empty)."""
    gold_resolved: int = 0
    """Gold runs that resolved the task, as graded (flaky tests included)."""
    empty_resolved: int = 0
    """Empty-diff runs that resolved the task, as graded."""
    gold_stable: int = 0
    """Gold runs that resolve once the flaky tests are quarantined."""
    empty_stable: int = 0
    """Empty-diff runs that resolve once the flaky tests are quarantined."""
    flaky_tests: dict[str, str] = field(default_factory=dict)
    """Test id -> its statuses run by run, e.g. ``gold: passed,failed,passed``."""
    mean_grade_s: float = 0.0
    """Mean seconds per grade (fresh sandbox, apply, tests)."""
    total_s: float = 0.0
    """Seconds the task's calibration took."""
    problem: str = ""
    """Why grading could not run ('' when it could); such a task is never usable."""
    first_error: str = ""
    """The first grading error seen in any run, for humans."""
    policy: dict[str, Any] | None = None
    """A policy's episodes on the task (``swebox tasks calibrate --policy``): ``{"name", "resolved", "runs"}``
    (and ``errors``: runs that could not be played, counted in ``runs``, never resolved); None when no policy
    played. Its solve rate orders a curriculum (``env.calibration_order``)."""

    def solve_rate(self) -> float | None:
        """The policy's resolved fraction, or None without a policy entry."""
        if not self.policy or not self.policy.get("runs"):
            return None
        return self.policy["resolved"] / self.policy["runs"]

    def unusable(self) -> str:
        """'' when the task is usable (gold always resolves, empty never, flaky tests quarantined); else why not."""
        if self.problem:
            return self.problem
        if self.gold_stable < self.runs:
            return f"gold resolved {self.gold_stable}/{self.runs}"
        if self.empty_stable > 0:
            return f"empty diff resolved {self.empty_stable}/{self.runs}"
        return ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (one entry of the calibration file's ``tasks``)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TaskCalibration:
        """Back from :meth:`to_dict`; TypeError for unknown keys or a value of the wrong type."""
        cal = cls(**data)
        for name, kind in (
            ("instance_id", str),
            ("task_digest", str),
            ("problem", str),
            ("first_error", str),
            ("runs", int),
            ("gold_resolved", int),
            ("empty_resolved", int),
            ("gold_stable", int),
            ("empty_stable", int),
            ("mean_grade_s", (int, float)),
            ("total_s", (int, float)),
        ):
            if not isinstance(getattr(cal, name), kind) or isinstance(getattr(cal, name), bool):
                raise TypeError(f"{name} should be {getattr(kind, '__name__', 'a number')}, is {getattr(cal, name)!r}")
        if not isinstance(cal.flaky_tests, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in cal.flaky_tests.items()
        ):
            raise TypeError(f"flaky_tests should map test ids to text, is {cal.flaky_tests!r}")
        if cal.policy is not None and not _policy_entry_ok(cal.policy):
            raise TypeError(
                f'policy should be {{"name": text, "resolved": k, "runs": K}} with 0 <= k <= K, is {cal.policy!r}'
            )
        return cal


def _policy_entry_ok(entry: Any) -> bool:
    """A ``policy`` entry: a name, whole counts, ``resolved`` (and ``errors``) at most ``runs``."""
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        return False
    counts = [entry.get(k) for k in ("resolved", "runs")] + ([entry["errors"]] if "errors" in entry else [])
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts):
        return False
    return (
        set(entry) <= {"name", "resolved", "runs", "errors"}
        and entry["resolved"] <= entry["runs"]
        and (entry.get("errors", 0) <= entry["runs"])
    )


def would_resolve(task: Task, report: GradeReport, quarantined: set[str]) -> bool:
    """The verdict with the ``quarantined`` tests left out: a clean run (applied, no error, no tampering, no
    timeout) where every other F2P test passed (at least one is left) and every other P2P test still passes."""
    if not quarantined:
        return report.resolved
    clean = report.applied and not (report.errors or report.tampered or report.timed_out)
    f2p = [t for t in task.FAIL_TO_PASS if t not in quarantined]
    p2p = [t for t in task.PASS_TO_PASS if t not in quarantined]

    def status(test_id: str) -> str:
        return report.tests[test_id].status if test_id in report.tests else "missing"

    return (
        clean
        and bool(f2p)
        and all(status(t) in F2P_PASSING for t in f2p)
        and all(status(t) in P2P_PASSING for t in p2p)
    )


def flaky_tests(reports: dict[str, list[GradeReport]]) -> dict[str, str]:
    """Tests whose status differs between runs of the same diff -> their statuses run by run."""
    out: dict[str, str] = {}
    for kind, runs in reports.items():
        ids = dict.fromkeys(t for r in runs for t in r.tests)
        for test_id in ids:
            statuses = [r.tests[test_id].status if test_id in r.tests else "missing" for r in runs]
            if len(set(statuses)) > 1:
                seen = f"{kind}: {','.join(statuses)}"
                out[test_id] = f"{out[test_id]}; {seen}" if test_id in out else seen
    return out


def calibrate_task(
    task: Task,
    resolve: LayerResolver,
    *,
    runs: int = 3,
    timeout: float = 900.0,
    on_run: Callable[[str, str, int, GradeReport], None] | None = None,
) -> TaskCalibration:
    """Grade the gold patch and the empty diff ``runs`` times each (fresh sandboxes), gold and empty taking
    turns so that a slow period of the host weighs on both; ``on_run(id, kind, i, report)`` after each grade."""
    if runs < 1:
        raise ValueError(f"calibrate_task(runs=...): expected runs >= 1; found {runs}.")
    cal = TaskCalibration(task.instance_id, task_digest(task), runs)
    started = time.monotonic()
    reports: dict[str, list[GradeReport]] = {kind: [] for kind in KINDS}
    try:
        layers = resolve(task)
        for i in range(runs):
            for kind, diff in zip(KINDS, (task.patch, ""), strict=True):
                report = grade(task, diff, layers=layers, timeout=timeout)
                reports[kind].append(report)
                if report.errors and not cal.first_error:
                    cal.first_error = f"{kind} run {i + 1}: {report.errors[0]}"[:500]
                if on_run is not None:
                    on_run(task.instance_id, kind, i, report)
    except Exception as exc:  # a broken task must not stop the others
        cal.problem = f"could not grade: {type(exc).__name__}: {exc}"
    finally:
        release = getattr(resolve, "release", None)
        if release is not None:
            release(task)
    cal.total_s = time.monotonic() - started
    if cal.problem:
        return cal
    cal.flaky_tests = flaky_tests(reports)
    quarantined = set(cal.flaky_tests)
    cal.gold_resolved = sum(r.resolved for r in reports["gold"])
    cal.empty_resolved = sum(r.resolved for r in reports["empty"])
    cal.gold_stable = sum(would_resolve(task, r, quarantined) for r in reports["gold"])
    cal.empty_stable = sum(would_resolve(task, r, quarantined) for r in reports["empty"])
    every = reports["gold"] + reports["empty"]
    cal.mean_grade_s = sum(r.durations.get("total", 0.0) for r in every) / len(every)
    return cal


def calibrate(
    tasks: Iterable[Task],
    resolve: LayerResolver,
    *,
    runs: int = 3,
    timeout: float = 900.0,
    jobs: int = 1,
    on_result: Callable[[TaskCalibration], None] | None = None,
    on_run: Callable[[str, str, int, GradeReport], None] | None = None,
) -> list[TaskCalibration]:
    """Calibrate every task, ``jobs`` tasks at a time; results in the tasks' order."""
    if jobs < 1:
        raise ValueError(f"calibrate(jobs=...): expected jobs >= 1; found {jobs}.")
    tasks = list(tasks)
    results: dict[int, TaskCalibration] = {}  # by input position: every future fills its slot or raises
    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="calibrate") as pool:
        futures = {
            pool.submit(calibrate_task, t, resolve, runs=runs, timeout=timeout, on_run=on_run): i
            for i, t in enumerate(tasks)
        }
        for future in as_completed(futures):
            results[futures[future]] = future.result()
            if on_result is not None:
                on_result(results[futures[future]])
    return [results[i] for i in range(len(tasks))]


def write_calibration(path: str | Path, results: list[TaskCalibration], *, source: str = "") -> None:
    """Save the table (whole or not at all): ``{"format", "source", "runs", "created", "tasks": [...]}``."""
    doc = {
        "format": FORMAT,
        "source": source,
        "runs": max((c.runs for c in results), default=0),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "tasks": [c.to_dict() for c in results],
    }
    write_atomic(path, json.dumps(doc, indent=1) + "\n")


def row(cal: TaskCalibration, width: int = 40) -> str:
    """One line of ``swebox tasks calibrate``'s table."""
    verdict = "ok" if not cal.unusable() else "SKIP"
    flaky = f"{len(cal.flaky_tests)} flaky" if cal.flaky_tests else "-"
    return (
        f"{cal.instance_id:<{width}} {verdict:<5} {cal.gold_resolved}/{cal.runs:<6} {cal.empty_resolved}/"
        f"{cal.runs:<6} {flaky:<9} {cal.mean_grade_s:>7.2f}  {cal.unusable()}"
    )


def policy_row(cal: TaskCalibration, width: int = 40) -> str:
    """One line of the policy table: ``ID  policy NAME resolved k/K`` (and the runs that could not be played)."""
    p = cal.policy or {}
    errors = f" ({p['errors']} could not be played)" if p.get("errors") else ""
    return (
        f"{cal.instance_id:<{width}} policy {p.get('name', '?')} resolved {p.get('resolved', 0)}/"
        f"{p.get('runs', 0)}{errors}"
    )


def header(width: int = 40) -> str:
    """The table's first line."""
    return f"{'task':<{width}} {'':<5} {'gold':<8} {'empty':<8} {'flaky':<9} {'grade s':>7}  why skipped"


def summary(results: list[TaskCalibration]) -> str:
    """``N usable, M not (unsolvable U, empty resolves E, could not grade C); F flaky tests in T tasks``."""
    why = Counter(
        ("could not grade" if c.problem else "unsolvable" if c.gold_stable < c.runs else "empty resolves")
        for c in results
        if c.unusable()
    )
    flaky = [c for c in results if c.flaky_tests]
    bad = sum(why.values())
    detail = ", ".join(f"{k} {v}" for k, v in sorted(why.items()))
    return (
        f"{len(results) - bad} usable, {bad} not{f' ({detail})' if detail else ''}; "
        f"{sum(len(c.flaky_tests) for c in flaky)} flaky tests in {len(flaky)} tasks"
    )
