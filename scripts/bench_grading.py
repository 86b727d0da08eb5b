"""Grading overhead: `grade(task, gold_patch)` against running the same tests directly in the built venv.

For each task (layers from the layer store): the direct run is `python -m pytest <the task's test files>` in an
already started sandbox over the task's layers with the gold patch applied (the venv is already built); the
graded run is the whole `swebox.envs.tasks.grading.grade` (fresh sandbox, the diff judged by git and applied,
protected files restored, the tests and two canaries under the grade monitor, its signed verdict checked).
Both are timed alternately, task by task, so machine noise hits both alike; the table reports medians and their
ratio. Usage: `swebox bench grading --tasks runs/demo/tasks.jsonl`.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import time

from swebox.envs.layers_resolver import acquire_layers, close_shared_caches
from swebox.envs.sandbox import Sandbox
from swebox.envs.tasks.grading import grade
from swebox.scripts.bench_tasks import add_task_arguments, bench_tasks


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_task_arguments(parser, limit=10, limit_help="tasks to measure", reps=5,
                       reps_help="repetitions per task and mode")
    parser.set_defaults(func=run)


def direct_command(task) -> str:
    files = " ".join(shlex.quote(f) for f in task.all_test_files())
    options = " ".join(shlex.quote(o) for o in task.pytest_options)
    return f"cd /testbed && {shlex.quote(task.python)} -m pytest -q -p no:cacheprovider {options} {files}"


def run(args: argparse.Namespace) -> int:
    tasks, source = bench_tasks(args)
    rows = []
    try:
        for task in tasks:
            with acquire_layers(task, source) as layers, Sandbox(layers.paths) as sb:
                sb.write_file("/tmp/gold.diff", task.patch)
                applied = sb.exec("cd /testbed && git apply /tmp/gold.diff")
                if applied.exit_code != 0:
                    raise SystemExit(f"{task.instance_id}: the gold patch does not apply: {applied.output}")
                direct, graded = [], []
                for _ in range(args.reps):
                    t0 = time.perf_counter()
                    sb.exec(direct_command(task), timeout=900)
                    direct.append(time.perf_counter() - t0)
                    t0 = time.perf_counter()
                    report = grade(task, task.patch, layers=layers.paths)
                    graded.append(time.perf_counter() - t0)
                    if not report.resolved:
                        raise SystemExit(f"{task.instance_id}: the gold patch did not resolve: {report.errors}")
                rows.append((task.instance_id, statistics.median(direct), statistics.median(graded)))
    finally:
        close_shared_caches()
    print(f"| {'task':<48} | {'direct p50':>10} | {'graded p50':>10} | {'ratio':>6} |")
    print(f"|{'-' * 50}|{'-' * 12}|{'-' * 12}|{'-' * 8}|")
    for name, d, g in rows:
        print(f"| {name[:48]:<48} | {d:>8.3f} s | {g:>8.3f} s | {g / d:>5.2f}x |")
    total_d, total_g = sum(r[1] for r in rows), sum(r[2] for r in rows)
    name = "all tasks (sum of medians)"
    print(f"| {name:<48} | {total_d:>8.3f} s | {total_g:>8.3f} s | {total_g / total_d:>5.2f}x |")
    print(f"\n{len(rows)} tasks x {args.reps} reps, alternating direct and graded runs")
    return 0
