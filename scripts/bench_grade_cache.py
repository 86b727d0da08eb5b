"""Grade memoisation in a GRPO step with a converged policy: the rollout phase with and without the cache.

A converged policy gives every rollout of a group the same diff. The policy here is scripted (the trainer's
real rollout path: ``RolloutWorker.run`` with G episodes per task forked from one prepared start, threads,
real sandboxes, real grading; only token generation is replaced by the gold replies of ``swebox eval
--policy gold``: write the gold patch, apply it, submit). Each repetition builds a fresh worker per mode and
runs two steps on it: step 1 starts with an empty cache (one grade per group), step 2 sees the same diffs
again (none graded). Modes alternate, their order swapped every repetition, so machine noise hits both alike.
Usage: ``swebox bench grade-cache --tasks DIR/tasks.jsonl --store DIR/layers``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

from swebox.envs.episodes.layers_resolver import close_shared_caches
from swebox.scripts.bench_tasks import add_task_arguments, bench_tasks


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_task_arguments(parser, limit=2, limit_help="tasks per step", reps=3, reps_help="repetitions per mode")
    parser.add_argument("--group-size", type=int, default=4, help="rollouts per task (default 4)")
    parser.add_argument("--parallel", type=int, default=2, help="episodes in flight (default 2)")
    parser.set_defaults(func=run)


class GoldBackend:
    """Replies with each task's gold replies, turn by turn; the task is found by its prompt."""

    def __init__(self, tokenizer: Any, prompts: dict[str, list[str]]) -> None:
        self.tokenizer, self.prompts = tokenizer, prompts  # decoded first prompt -> replies

    def generate(self, prompts: list[list[int]], max_new_tokens: int, seeds: list[int] | None = None) -> list[Any]:
        from swebox.trainers.policy.generation import Generated

        out = []
        for ids in prompts:
            text = self.tokenizer.decode(ids)
            replies = next(r for start, r in self.prompts.items() if text.startswith(start))
            turn = min(text.count("<|im_start|>assistant") - 1, len(replies) - 1)
            tokens = [*self.tokenizer.encode(replies[turn], add_special_tokens=False), self.tokenizer.eos_token_id]
            out.append(Generated(tokens, [0.0] * len(tokens), "stop"))
        return out

    def update_weights(self, state_dict: Any) -> None:
        pass


class GoldRollouts:
    """The trainer's rollout path with the scripted gold policy on the bench's tasks: ``worker(overrides)`` is a
    fresh ``RolloutWorker`` whose config is the bench's base settings plus ``overrides``."""

    def __init__(self, args: argparse.Namespace, *settings: str) -> None:
        from swebox.envs.episodes.episode import first_messages
        from swebox.scripts.eval_policies import gold_replies
        from swebox.trainers.policy.models import build_builtin_tokenizer
        from swebox.trainers.rl.rollout import prompt_ids
        from swebox.trainers.run.config import load_config

        self.tasks, self.source = bench_tasks(args)
        self.tokenizer = build_builtin_tokenizer()
        self.base = [
            "generation.max_context_tokens=65536",
            "model.max_position_embeddings=65536",
            "generation.max_new_tokens=16384",
            "env.max_turns=4",
            f"rollout.max_parallel_episodes={args.parallel}",
            *settings,
        ]
        config = load_config(None, self.base).env.episode()
        self.prompts = {
            self.tokenizer.decode(prompt_ids(self.tokenizer, first_messages(t, config))): gold_replies(t)
            for t in self.tasks
        }

    def worker(self, *overrides: str) -> Any:
        from swebox.trainers.rl.rollout import RolloutWorker, swe_episode_factory
        from swebox.trainers.run.config import load_config

        cfg = load_config(None, [*self.base, *overrides])
        return RolloutWorker(
            cfg,
            swe_episode_factory(cfg, source=self.source),
            tokenizer=self.tokenizer,
            backend=GoldBackend(self.tokenizer, self.prompts),
        )


def run(args: argparse.Namespace) -> int:
    gold = GoldRollouts(args)
    tasks = gold.tasks
    times: dict[tuple[str, int], list[float]] = {}
    counts: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
    try:
        for rep in range(args.reps):
            for mode in ("off", "on") if rep % 2 == 0 else ("on", "off"):
                worker = gold.worker(f"env.grade_cache={mode == 'on'}")
                for step in (1, 2):
                    t0 = time.perf_counter()
                    trajs = worker.run(list(tasks), args.group_size)
                    times.setdefault((mode, step), []).append(time.perf_counter() - t0)
                    if any(t.failed for t in trajs):
                        raise SystemExit(f"a rollout failed: {next(t.error for t in trajs if t.failed)}")
                    hits = sum(t.metrics.get("env/grade_cache_hits", 0.0) for t in trajs)
                    counts.setdefault((mode, step), []).append(
                        (
                            hits,
                            statistics.mean(t.reward for t in trajs),
                            statistics.mean(t.metrics.get("env/grade_s", 0.0) for t in trajs),
                        )
                    )
    finally:
        close_shared_caches()
    episodes = len(tasks) * args.group_size
    print(
        f"{len(tasks)} tasks x {args.group_size} rollouts ({episodes} episodes, {args.parallel} in flight), "
        f"{args.reps} reps; load average {os.getloadavg()[0]:.2f}"
    )
    print("| step | cache | rollout p50 | graded (tests run) | served from cache | reward/mean | env/grade_s |")
    print("|---|---|---|---|---|---|---|")
    for step in (1, 2):
        for mode in ("off", "on"):
            rows = counts[(mode, step)]
            hits = statistics.median(r[0] for r in rows)
            print(
                f"| {step} | {mode} | {statistics.median(times[(mode, step)]):.2f} s | {episodes - hits:.0f} | "
                f"{hits:.0f} | {statistics.median(r[1] for r in rows):.2f} | "
                f"{statistics.median(r[2] for r in rows):.2f} s |"
            )
        off, on = statistics.median(times[("off", step)]), statistics.median(times[("on", step)])
        print(f"| {step} | off/on | {off / on:.2f}x | | | | |")
    return 0
