"""Grading overhead: `grade(task, gold_patch)` against running the same tests directly in the built venv.

For each task (layers from the layer store): the direct run is `python -m pytest <the task's test files>` in an
already started sandbox over the task's layers with the gold patch applied, bytecode written and warmed by one
run first (the warm floor: pytest's rewritten tests and the project's pycs in `__pycache__`); the
graded run is the whole `swebox.envs.tasks.graders.grading.grade` (fresh sandbox, the diff judged by git and applied,
protected files restored, the tests and two canaries under the grade monitor, its signed verdict checked),
with the rewritten-test cache (`rewrite_cache`, warmed by one grade first) and, with `--no-cache-too`, also
without it. The modes are timed alternately, rep by rep, so machine noise hits all alike; the table reports
medians, their ratios and the load average before and after. Usage:
`swebox bench grading --tasks runs/demo/tasks.jsonl [--no-cache-too]`.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import time

from swebox.envs.episodes.layers_resolver import acquire_layers, close_shared_caches
from swebox.envs.sandbox import Sandbox
from swebox.envs.tasks.graders.grading import grade
from swebox.scripts.bench_tasks import add_task_arguments, bench_tasks


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_task_arguments(
        parser, limit=10, limit_help="tasks to measure", reps=5, reps_help="repetitions per task and mode"
    )
    parser.add_argument(
        "--no-cache-too", action="store_true", help="also time grades without the rewritten-test cache, side by side"
    )
    parser.set_defaults(func=run)


def direct_command(task) -> str:
    """The warm floor: pytest as a developer runs it twice, bytecode written (the sandbox's shell sets
    PYTHONDONTWRITEBYTECODE) so the second run reuses pytest's rewritten tests and the project's pycs."""
    files = " ".join(shlex.quote(f) for f in task.all_test_files())
    options = " ".join(shlex.quote(o) for o in task.pytest_options)
    return (
        f"cd /testbed && env -u PYTHONDONTWRITEBYTECODE {shlex.quote(task.python)} -m pytest -q "
        f"-p no:cacheprovider {options} {files}"
    )


def _graded(task, layers, cache_on: bool) -> tuple[float, float]:
    """A whole grade's seconds, and its test command's (the monitor and pytest: durations['tests'])."""
    t0 = time.perf_counter()
    report = grade(task, task.patch, layers=layers, rewrite_cache_on=cache_on)
    elapsed = time.perf_counter() - t0
    if not report.resolved:
        raise SystemExit(f"{task.instance_id}: the gold patch did not resolve: {report.errors}")
    return elapsed, report.durations["tests"]


def run(args: argparse.Namespace) -> int:
    tasks, source = bench_tasks(args)
    modes = ["cached", "uncached"] if args.no_cache_too else ["cached"]
    rows = []
    load_before = os.getloadavg()
    try:
        for task in tasks:
            with acquire_layers(task, source) as layers, Sandbox(layers.paths) as sb:
                sb.write_file("/tmp/gold.diff", task.patch)
                applied = sb.exec("cd /testbed && git apply /tmp/gold.diff")
                if applied.exit_code != 0:
                    raise SystemExit(f"{task.instance_id}: the gold patch does not apply: {applied.output}")
                _graded(task, layers.paths, True)  # fills the rewritten-test cache: later grades reuse it
                sb.exec(direct_command(task), timeout=900)  # and warms the floor's __pycache__
                times: dict[str, list[float]] = {c: [] for c in ["direct", *modes, *(f"{m} tests" for m in modes)]}
                for _ in range(args.reps):
                    t0 = time.perf_counter()
                    sb.exec(direct_command(task), timeout=900)
                    times["direct"].append(time.perf_counter() - t0)
                    for mode in modes:
                        whole, tests = _graded(task, layers.paths, mode == "cached")
                        times[mode].append(whole)
                        times[mode + " tests"].append(tests)
                rows.append((task.instance_id, {k: statistics.median(v) for k, v in times.items()}))
    finally:
        close_shared_caches()
    load_after = os.getloadavg()
    columns = ["direct", *modes, *(m + " tests" for m in modes)]
    titles = {
        "direct": "direct p50",
        "cached": "graded p50",
        "uncached": "graded, no cache p50",
        "cached tests": "its test command p50",
        "uncached tests": "no cache: test command p50",
    }
    ratios = [("graded/direct", "cached", "direct")]
    if args.no_cache_too:
        ratios += [
            ("graded/no cache", "cached", "uncached"),
            ("test command/no cache", "cached tests", "uncached tests"),
        ]
    head = ["task", *(titles[c] for c in columns), *(r[0] for r in ratios)]
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("-" * (len(h) + 2) for h in head) + "|")
    total = {c: sum(r[1][c] for r in rows) for c in columns}
    for name, med in [*rows, ("all tasks (sum of medians)", total)]:
        cells = [name, *(f"{med[c]:.3f} s" for c in columns), *(f"{med[a] / med[b]:.2f}x" for _, a, b in ratios)]
        print("| " + " | ".join(cells) + " |")
    alternating = " / ".join(["direct", *modes])
    print(
        f"\n{len(rows)} tasks x {args.reps} reps, {alternating} alternating rep by rep; "
        f"load average (1/5/15 min) before {'/'.join(f'{x:.2f}' for x in load_before)}, "
        f"after {'/'.join(f'{x:.2f}' for x in load_after)}"
    )
    return 0
