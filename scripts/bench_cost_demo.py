"""What auditable rollouts cost a demo step: the demo's GRPO steps with the exploit audit, provenance and cost
collection on, against the same steps with all of it off (`swebox bench cost-demo`).

The input is a ``swebox demo --out RUN`` folder: its corpus (tasks and layers), its SFT warm start (the policy and
optimizer moments the demo's GRPO starts from) and the tasks its GRPO trained on (the tasks of its trajectories;
without them, the demo's split of the corpus). Two trainers are built from configs/demo.yaml exactly as the demo
builds its GRPO run (same seed, same warm start), one with ``env.audit=report env.cost=true`` ("on", the defaults),
one with ``env.audit=off env.cost=false`` ("off"), and their steps (rollouts, update, sync, logging, trajectory
records) alternate, the order swapped every repetition so that machine noise hits both alike. Rollouts run in this
process (``LocalWorkerPool``), not on the demo's Ray actor: the episode code is the same, and the in-place timers
below must see it. Provenance cannot be switched off (every grade report carries it), and a calibration file is
applied once when a trainer starts, not per step (the demo uses none); so besides the step times, what #35 adds is
timed where it runs, summed per step: the audit (``EpisodeAudit``: per turn, at the end, per fork), the provenance
stamps (``provenance()`` in grading and in the episode's final info) and the cost reads (``Sandbox.usage``: the
episode sandbox at reset and end, the grading sandbox at its end).
Usage: ``swebox bench cost-demo --run runs/demo --steps 3``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gzip
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from swebox.scripts.demo import DEFAULT_CONFIG

MODES = {"on": ["env.audit=report", "env.cost=true"], "off": ["env.audit='off'", "env.cost=false"]}
"""Everything #35 adds per episode switched on (the defaults) and off ('off' quoted: bare, YAML reads it as false)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--run",
        default="runs/demo",
        help="a finished `swebox demo --out RUN` folder (default runs/demo): its corpus/ and sft/ are used",
    )
    parser.add_argument("--steps", type=int, default=3, help="GRPO steps per mode (default 3; the demo runs 8)")
    parser.add_argument(
        "--warmup", type=int, default=1, help="untimed steps per mode first (default 1: first-use caches, imports)"
    )
    parser.add_argument("--config", default=str(DEFAULT_CONFIG), help="training config (default configs/demo.yaml)")
    parser.add_argument("overrides", nargs="*", help="config overrides KEY=VALUE for both modes")
    parser.set_defaults(func=run)


@dataclasses.dataclass
class DemoInputs:
    """What a finished demo folder gives the bench."""

    tasks_file: Path
    """corpus/tasks.jsonl."""
    store: Path
    """corpus/layers: the layer store."""
    policy: Path
    """sft/policy: the warm start's weights and tokenizer."""
    checkpoint: Path | None
    """The warm start's last checkpoint (its optimizer moments), when kept."""
    train_ids: list[str]
    """The tasks the demo's GRPO trained on."""


def demo_inputs(run_dir: str | Path) -> DemoInputs:
    """The inputs of ``run_dir``, or SystemExit with one line naming what is missing and how to make it."""
    from swebox.trainers.run import checkpoint as ckpt
    from swebox.trainers.run import trajectories

    root = Path(run_dir)
    need = {
        "tasks": root / "corpus" / "tasks.jsonl",
        "layers": root / "corpus" / "layers",
        "sft": root / "sft" / "policy",
    }
    missing = [str(p) for p in need.values() if not p.exists()]
    if missing:
        raise SystemExit(
            f"--run {run_dir}: expected a `swebox demo --out {run_dir}` folder (its corpus and SFT warm start); "
            f"found {', '.join(missing)} missing; run `swebox demo --out {run_dir} total_steps=1` first"
        )
    steps = sorted((root / trajectories.FOLDER).glob("step_*.jsonl.gz"))
    if steps:  # what the demo's GRPO trained on
        with gzip.open(steps[0], "rt", encoding="utf-8") as f:
            ids = list(dict.fromkeys(json.loads(line)["task_id"] for line in f if line.strip()))
    else:  # stopped after its warm start: the demo's split (it also moves tasks the warm start left out)
        from swebox.scripts.demo import split_tasks
        from swebox.trainers.rl.task_order import load_tasks

        ids = [t.instance_id for t in split_tasks(load_tasks(str(need["tasks"])))[0]]
    return DemoInputs(
        need["tasks"], need["layers"], need["sft"], ckpt.latest_checkpoint(root / "sft" / "checkpoints"), ids
    )


class InPlace:
    """Wraps callables (``owner.name``; the real ones run) to add each call's seconds to its label, per step."""

    def __init__(self, targets: dict[str, list[tuple[Any, str]]]) -> None:
        self.targets = targets
        self.seconds = dict.fromkeys(targets, 0.0)
        self.calls = dict.fromkeys(targets, 0)
        self._saved: list[tuple[Any, str, Any]] = []

    def _wrap(self, label: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:  # episodes run in threads: += on a float under the GIL may lose an update only in theory
                self.seconds[label] += time.perf_counter() - t0
                self.calls[label] += 1

        return timed

    def take(self) -> tuple[dict[str, float], dict[str, int]]:
        """The seconds and calls since the last take."""
        seconds, calls = dict(self.seconds), dict(self.calls)
        self.seconds, self.calls = dict.fromkeys(self.targets, 0.0), dict.fromkeys(self.targets, 0)
        return seconds, calls

    def __enter__(self) -> InPlace:
        for label, places in self.targets.items():
            for owner, name in places:
                real = getattr(owner, name)
                self._saved.append((owner, name, real))
                setattr(owner, name, self._wrap(label, real))
        return self

    def __exit__(self, *exc: object) -> None:
        for owner, name, real in reversed(self._saved):
            setattr(owner, name, real)


def timed_places() -> dict[str, list[tuple[Any, str]]]:
    """Where #35's per-episode work runs. ``provenance`` is imported by name into two modules: both are wrapped."""
    from swebox.envs.audit import EpisodeAudit
    from swebox.envs.episodes import episode
    from swebox.envs.sandbox import Sandbox
    from swebox.envs.tasks.graders import grading

    return {
        "audit": [(EpisodeAudit, "__init__"), (EpisodeAudit, "turn"), (EpisodeAudit, "finish"), (EpisodeAudit, "copy")],
        "provenance": [(grading, "provenance"), (episode, "provenance")],
        "cost": [(Sandbox, "usage")],
    }


@contextlib.contextmanager
def trainers(args: argparse.Namespace, inputs: DemoInputs, work: Path) -> Iterator[dict[str, Any]]:
    """The two trainers, closed (pools, sandboxes, trackers) however the bench ends."""
    from swebox.scripts.demo import demo_config, from_policy
    from swebox.trainers.rl.task_order import load_tasks
    from swebox.trainers.rl.trainer import Trainer

    tasks = {t.instance_id: t for t in load_tasks(str(inputs.tasks_file))}
    train = [tasks[i] for i in inputs.train_ids if i in tasks]
    fixed = [
        f"total_steps={args.warmup + args.steps + 1000}",  # no final checkpoint inside the timed steps
        "checkpoint.every_steps=0",
        "logging.wandb=disabled",
        "logging.progress=false",
    ]
    built: dict[str, Any] = {}
    try:
        for mode, switches in MODES.items():
            cfg = demo_config(args.config, work / mode, inputs.tasks_file, [*args.overrides, *fixed, *switches])
            cfg = from_policy(cfg, inputs.policy, inputs.checkpoint)
            built[mode] = Trainer(cfg, tasks=train, use_ray=False, echo=lambda *_: None)
        yield built
    finally:
        for trainer in built.values():
            trainer.close()


def run(args: argparse.Namespace) -> int:
    if args.steps < 1:
        raise SystemExit(f"--steps: expected >= 1; found {args.steps}; use 3")
    if args.warmup < 0:
        raise SystemExit(f"--warmup: expected >= 0; found {args.warmup}; use 1")
    inputs = demo_inputs(args.run)
    from swebox.envs.episodes.layers_resolver import close_shared_caches

    previous = os.environ.get("SWEBOX_LAYER_STORE")
    os.environ["SWEBOX_LAYER_STORE"] = str(inputs.store.absolute())  # as the demo sets it for its actors
    records: dict[str, list[dict[str, Any]]] = {"on": [], "off": []}
    timed: dict[str, list[dict[str, float]]] = {"on": [], "off": []}
    loads = [os.getloadavg()]
    try:
        with (
            tempfile.TemporaryDirectory(prefix="swebox-bench-cost-demo-") as work,
            InPlace(timed_places()) as clock,
            trainers(args, inputs, Path(work)) as built,
        ):
            for _ in range(args.warmup):
                for mode in MODES:
                    built[mode].step()
            loads.append(os.getloadavg())
            for rep in range(args.steps):
                for mode in ("off", "on") if rep % 2 == 0 else ("on", "off"):
                    clock.take()
                    records[mode].append(built[mode].step())
                    seconds, calls = clock.take()
                    timed[mode].append({**seconds, **{f"{k}_calls": float(v) for k, v in calls.items()}})
                    print(  # as it goes: a run cut short still says what it measured
                        f"rep {rep + 1} {mode}: step {records[mode][-1]['timing/step_s']:.2f} s, "
                        + ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in seconds.items())
                        + f"; load {os.getloadavg()[0]:.2f}",
                        flush=True,
                    )
                loads.append(os.getloadavg())
            episodes = len(built["on"].last.rewards) if built["on"].last is not None else 0
    finally:
        close_shared_caches()
        if previous is None:
            os.environ.pop("SWEBOX_LAYER_STORE", None)
        else:
            os.environ["SWEBOX_LAYER_STORE"] = previous
    report(args, records, timed, loads, episodes)
    return 0


def _p50(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def report(
    args: argparse.Namespace,
    records: dict[str, list[dict[str, Any]]],
    timed: dict[str, list[dict[str, float]]],
    loads: list[tuple[float, float, float]],
    episodes: int,
) -> None:
    step = {m: [r["timing/step_s"] for r in records[m]] for m in records}
    # as docs/benchmarks.md "Env share of a training step": (env + grade) / step, both unions over the episodes
    env = {m: [(r["timing/env_s"] + r["timing/grade_s"]) / r["timing/step_s"] for r in records[m]] for m in records}
    part = {m: {k: _p50([r[f"timing/{k}_s"] for r in records[m]]) for k in ("rollout", "update")} for m in records}
    off, on = _p50(step["off"]), _p50(step["on"])
    print(
        f"{args.steps} demo GRPO steps per mode after {args.warmup} untimed, alternating ({episodes} episodes a "
        f"step); load average (1, 5, 15 "
        f"min) before {' '.join(f'{x:.2f}' for x in loads[1])}, after {' '.join(f'{x:.2f}' for x in loads[-1])}, "
        f"1-min range {min(x[0] for x in loads[1:]):.2f}-{max(x[0] for x in loads[1:]):.2f}"
    )
    print("| mode | step p50 | rollout p50 | update p50 | env share p50 | reward mean | steps (s) |")
    print("|---|---|---|---|---|---|---|")
    for mode, value in (("off", off), ("on", on)):
        rewards = statistics.mean(r["reward/mean"] for r in records[mode])
        runs = ", ".join(f"{t:.2f}" for t in step[mode])
        print(
            f"| {mode} | {value:.2f} s | {part[mode]['rollout']:.2f} s | {part[mode]['update']:.2f} s | "
            f"{_p50(env[mode]):.1%} | {rewards:.3f} | {runs} |"
        )
    print(f"on/off: {on / off:.3f}x")
    print("| timed in place, per step (summed over its episodes) | mode | p50 | calls | share of the off step p50 |")
    print("|---|---|---|---|---|")
    total = 0.0
    for label in ("audit", "provenance", "cost"):
        for mode in ("on", "off"):
            seconds = _p50([t[label] for t in timed[mode]])
            calls = _p50([t[f"{label}_calls"] for t in timed[mode]])
            if mode == "on":
                total += seconds
            print(f"| {label} | {mode} | {seconds * 1000:.1f} ms | {calls:.0f} | {seconds / off:.2%} |")
    print(f"all three, on: {total * 1000:.1f} ms a step, {total / off:.2%} of the off step's median")
