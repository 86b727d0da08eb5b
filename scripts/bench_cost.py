"""What measuring the cost per rollout costs: the rollout phase of a step with ``env.cost`` on and off.

The trainer's real rollout path (``RolloutWorker.run``: G episodes per task forked from one prepared start,
threads, real sandboxes, real grading, grade cache off so every episode runs its tests), the policy scripted
with the tasks' gold replies (as ``swebox bench grade-cache``). Modes alternate, their order swapped every
repetition, so machine noise hits both alike. Besides the step times, every ``Sandbox.usage`` call (the whole
of the collection: the episode sandbox at reset and at the end, the grading sandbox at its end) is timed in
place, and, after the repetitions, the procfs fallback (``usage.from_procfs``) on the same sandboxes, since a
host without cgroups pays that instead.
Usage: ``swebox bench cost --tasks DIR/tasks.jsonl --store DIR/layers``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from swebox.envs.episodes.layers_resolver import close_shared_caches
from swebox.envs.sandbox import Sandbox
from swebox.envs.sandbox.usage import from_procfs
from swebox.scripts.bench_grade_cache import GoldRollouts
from swebox.scripts.bench_tasks import add_task_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_task_arguments(parser, limit=2, limit_help="tasks per step", reps=5, reps_help="repetitions per mode")
    parser.add_argument("--group-size", type=int, default=4, help="rollouts per task (default 4)")
    parser.add_argument("--parallel", type=int, default=2, help="episodes in flight (default 2)")
    parser.set_defaults(func=run)


class TimedUsage:
    """Wraps ``Sandbox.usage`` (the real one runs) to time each call; ``procfs``: also time the fallback."""

    def __init__(self) -> None:
        self.real = Sandbox.usage
        self.calls: list[float] = []
        self.procfs: list[float] = []
        self.with_procfs = False

    def __enter__(self) -> TimedUsage:
        timed = self

        def usage(sandbox: Sandbox, reset_peak: bool = False):
            t0 = time.perf_counter()
            try:
                return timed.real(sandbox, reset_peak=reset_peak)
            finally:
                timed.calls.append(time.perf_counter() - t0)
                if timed.with_procfs:
                    t1 = time.perf_counter()
                    from_procfs(sandbox.pid)
                    timed.procfs.append(time.perf_counter() - t1)

        Sandbox.usage = usage
        return self

    def __exit__(self, *exc) -> None:
        Sandbox.usage = self.real


def run(args: argparse.Namespace) -> int:
    gold = GoldRollouts(args, "env.grade_cache=false")
    tasks = gold.tasks
    times: dict[str, list[float]] = {"off": [], "on": []}
    per_episode: list[float] = []
    loads = [os.getloadavg()[0]]
    episodes = len(tasks) * args.group_size

    def step(mode: str, timer: TimedUsage) -> float:
        worker = gold.worker(f"env.cost={mode == 'on'}")
        before = len(timer.calls)
        t0 = time.perf_counter()
        trajs = worker.run(list(tasks), args.group_size)
        took = time.perf_counter() - t0
        if any(t.failed for t in trajs) or not all(t.reward == 1.0 for t in trajs):
            raise SystemExit(f"a gold rollout failed or did not resolve: {[t.error for t in trajs][:2]}")
        if mode == "on" and not all((t.cost or {}).get("cpu_s") for t in trajs):
            raise SystemExit("env.cost=true but a rollout has no CPU seconds")
        if mode == "on":
            per_episode.append(sum(timer.calls[before:]) / episodes)
        return took

    try:
        with TimedUsage() as timer:
            for rep in range(args.reps):
                for mode in ("off", "on") if rep % 2 == 0 else ("on", "off"):
                    times[mode].append(step(mode, timer))
                loads.append(os.getloadavg()[0])
            calls = len(timer.calls)
            timer.with_procfs = True
            step("on", timer)  # not counted: times the procfs fallback on the same kind of sandboxes
    finally:
        close_shared_caches()
    off, on = statistics.median(times["off"]), statistics.median(times["on"])
    collect = statistics.median(per_episode)
    procfs = statistics.median(timer.procfs) * (calls / (args.reps * episodes))
    print(
        f"{len(tasks)} tasks x {args.group_size} rollouts ({episodes} episodes, {args.parallel} in flight), "
        f"{args.reps} reps per mode; load average (1 min) {min(loads):.2f}-{max(loads):.2f}"
    )
    print("| env.cost | rollout phase p50 | runs (s) |")
    print("|---|---|---|")
    for mode, value in (("off", off), ("on", on)):
        print(f"| {mode} | {value:.2f} s | {', '.join(f'{t:.2f}' for t in times[mode])} |")
    print(
        f"on/off: {on / off:.3f}x; reading the cost, timed in place: {collect * 1000:.2f} ms per episode "
        f"({calls / (args.reps * episodes):.1f} reads), {collect * episodes / off:.2%} of the off step's "
        f"rollout phase; the procfs fallback: {procfs * 1000:.2f} ms per episode "
        f"({procfs * episodes / off:.2%})"
    )
    return 0
