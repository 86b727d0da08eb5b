"""The GRPO loop: sample tasks -> rollouts -> rewards -> advantages -> updates -> weight sync -> log -> save.

One step, in the order the code runs it (:meth:`Trainer.step`):

1. take ``rollout.tasks_per_step`` tasks from the seeded task order (task_order.py; its position is checkpointed);
2. roll out ``rollout.group_size`` episodes per task through the worker pool (in-process or Ray); with
   dynamic sampling, roll out more tasks until enough groups have differing rewards;
3. rewards (with DAPO's overlong penalty when configured) -> group-normalised advantages; failed and, per
   ``rollout.on_context_overflow='mask'``, overflowing trajectories are masked out, never dropped;
4. the learner's epochs x mini-batches of clipped policy-gradient updates (trainers/rl/learner.py);
5. the new weights go to the pool (``timing/sync_s``);
6. the step's rollouts go to trajectories/step_NNNNNN.jsonl.gz (trainers/run/trajectories.py), its metrics
   (docs/metrics.md, step_metrics.py) to metrics.jsonl and wandb (with a ``rollouts`` Table now and then);
   then, every ``checkpoint.every_steps``, a complete checkpoint is written atomically, and
   ``checkpoint.resume`` continues from the newest one.

Kill-anywhere safety: a step's metrics line is written (and flushed) before its checkpoint, so a checkpoint never
covers a step whose metrics are missing; a resumed run drops the lines of steps after its checkpoint, redoes
those steps, and gives the wandb run every step (tracking.py). ``SWEBOX_TEST_KILL_AT=PHASE:STEP`` makes the
process SIGKILL itself at that boundary of that step (rollout, update, sync, log, checkpoint): the tests' hook.
"""

from __future__ import annotations

import os
import random
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from swebox.envs.tasks.schema import Task
from swebox.trainers.policy.models import build_model, build_tokenizer
from swebox.trainers.rl import grpo
from swebox.trainers.rl.learner import Learner, make_batch
from swebox.trainers.rl.rollout import LocalWorkerPool, Trajectory, WorkerPool
from swebox.trainers.rl.step_metrics import rollout_metrics
from swebox.trainers.rl.task_order import TaskSampler, as_tasks, load_tasks
from swebox.trainers.run import checkpoint as ckpt
from swebox.trainers.run import trajectories
from swebox.trainers.run.config import ConfigError, TrainConfig, save_config, to_dict
from swebox.trainers.run.tracking import Tracker


class TrainingError(RuntimeError):
    """The run cannot go on (tasks that cannot start, too many environment errors); the message says why."""


KILL_AT_ENV = "SWEBOX_TEST_KILL_AT"
"""``PHASE:STEP``: the trainer SIGKILLs itself after that phase of that step (a test hook; see the docstring)."""


@dataclass
class StepData:
    """The last step's batch, kept for inspection (tests, debugging)."""

    trajectories: list[Trajectory]
    rewards: torch.Tensor
    group_ids: torch.Tensor
    valid: torch.Tensor
    advantages: torch.Tensor


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class Trainer:
    """GRPO on the tasks of ``env.tasks`` (or ``tasks``), rolling out through ``pool``.

    ``pool``: any :class:`~swebox.trainers.rl.rollout.WorkerPool`; by default a Ray pool when ``use_ray`` (default:
    ``ray.address`` is set) and otherwise one in-process worker (``episode_factory`` goes to it).
    """

    def __init__(
        self,
        cfg: TrainConfig,
        pool: WorkerPool | None = None,
        *,
        tasks: list[Task | dict] | None = None,
        episode_factory: Any | None = None,
        use_ray: bool | None = None,
        echo=print,
    ) -> None:
        self.cfg = cfg
        self.echo = echo
        # the inputs first: a wrong tasks path must not leave a run folder behind
        self.tasks = as_tasks(tasks) if tasks is not None else load_tasks(cfg.env.tasks)
        if cfg.env.calibration:
            from swebox.envs.tasks.calibrate_select import CalibrationError, apply_calibration

            try:
                self.tasks = apply_calibration(
                    self.tasks, cfg.env.calibration, echo=echo, order=cfg.env.calibration_order
                )
            except CalibrationError as exc:
                raise ConfigError(str(exc).replace("--calibration", "env.calibration", 1)) from None
        self.run_dir = Path(cfg.logging.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.ckpt_dir = Path(cfg.checkpoint.dir or self.run_dir / "checkpoints")
        seed_everything(cfg.seed)
        self.tokenizer = build_tokenizer(cfg.model)
        device = "cuda" if torch.cuda.is_available() else "cpu"
        self.learner = Learner(cfg, build_model(cfg.model, self.tokenizer), device)
        # a curriculum (env.calibration_order) is an order: shuffling would undo it, so it replaces the shuffle
        self.sampler = TaskSampler(
            len(self.tasks), cfg.seed, cfg.rollout.shuffle and cfg.env.calibration_order == "none"
        )
        self.step_count = 0
        self.last: StepData | None = None
        resume_step = self._resume() if cfg.checkpoint.resume else None
        self._own_pool = pool is None
        if pool is None:
            if use_ray if use_ray is not None else bool(cfg.ray.address):
                from swebox.trainers.distributed.ray_pool import RayWorkerPool

                pool = RayWorkerPool(cfg, echo=echo)
            else:
                pool = LocalWorkerPool(cfg, episode_factory, model=self.learner.model, tokenizer=self.tokenizer)
        self.pool = pool
        self.errored_tasks: dict[str, str] = {}
        """Task id -> its first environment error in this process (each logged once, when it happens)."""
        try:
            self._preflight()
        except BaseException:
            if self._own_pool:
                self.pool.close()
            raise
        self.pool.set_weights(self.learner.state_dict(), self.step_count)
        save_config(cfg, self.run_dir / "config.yaml")
        self.trajectories = trajectories.TrajectoryWriter(
            self.run_dir, cfg.logging.trajectories_every, cfg.logging.trajectories_keep_last
        )
        self.tracker = Tracker.for_run(
            cfg.logging, self.run_dir, to_dict(cfg), "grpo", resume_step=resume_step, echo=echo
        )

    def _resume(self) -> int | None:
        if self.ckpt_dir.is_dir():  # a save the last process did not finish: free its space before anything is written
            ckpt.remove_stale_temps(self.ckpt_dir)
        found = ckpt.latest_checkpoint(self.ckpt_dir)
        if found is None:
            self.echo(f"resume: no complete checkpoint in {self.ckpt_dir}; starting at step 0")
            return None
        state = ckpt.load_checkpoint(
            found, self.learner.model, self.learner.optimizer, self.learner.scheduler, map_location=self.learner.device
        )
        self.step_count = state.step
        self.sampler.load(state.data_position)
        self.echo(f"resume: continuing from {found} (step {state.step})")
        return state.step

    def _preflight(self) -> None:
        """Every task can start on every rollout node (its layers are in the store that node sees), or the run
        stops before step 1 with the list of what is missing and the command that builds it."""
        problems = self.pool.preflight(self.tasks)
        if problems:
            shown = "\n  ".join(problems[:20]) + (
                f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
            )
            raise TrainingError(
                f"preflight: expected every task's layers on every rollout node; found "
                f"{len(problems)} problem(s):\n  {shown}\nbuild what is missing, or drop those "
                "tasks from env.tasks, and start again"
            )

    def _check_errors(self, trajs: list[Trajectory]) -> None:
        """Log each task's first environment error; stop when the step's error share passes the threshold."""
        failed = [t for t in trajs if t.failed]
        for t in failed:
            if t.task_id not in self.errored_tasks:
                self.errored_tasks[t.task_id] = t.error
                first_line = (t.error.strip().splitlines() or ["(no message)"])[0]
                self.echo(
                    f"episode error in task {t.task_id} (step {self.step_count}, first for this task): {first_line}"
                )
        frac = len(failed) / max(1, len(trajs))
        if frac > self.cfg.rollout.max_error_frac:
            tasks = sorted({t.task_id for t in failed})
            raise TrainingError(
                f"step {self.step_count}: expected at most rollout.max_error_frac={self.cfg.rollout.max_error_frac:g}"
                f" of the episodes to fail in the environment; found {len(failed)}/{len(trajs)} from tasks "
                f"{tasks[:10]}{' ...' if len(tasks) > 10 else ''}; first error: "
                f"{(failed[0].error.strip().splitlines() or [''])[0]}; fix the environment (the lines above name "
                "each task's first error) and resume with --resume, or raise rollout.max_error_frac"
            )

    # ----------------------------------------------------------------------------------------- the loop

    def train(self) -> list[dict[str, Any]]:
        """Run to ``total_steps``; returns the records logged by this call."""
        records = []
        progress = None
        if self.cfg.logging.progress:
            from tqdm import tqdm

            progress = tqdm(total=self.cfg.total_steps, initial=self.step_count, desc="train", unit="step")
        try:
            while self.step_count < self.cfg.total_steps:
                records.append(self.step())
                if progress is not None:
                    progress.update(1)
                    progress.set_postfix(reward=f"{records[-1]['reward/mean']:.2f}")
            self.save_policy(self.run_dir / "policy")
        finally:
            if progress is not None:
                progress.close()
            self.close()
        return records

    def collect(self) -> list[Trajectory]:
        """The step's trajectories: tasks_per_step groups (informative ones first with dynamic sampling)."""
        r, a = self.cfg.rollout, self.cfg.algorithm
        tasks = [self.tasks[i] for i in self.sampler.take(r.tasks_per_step)]
        trajs = self.pool.run_groups(tasks, r.group_size)
        if not a.dynamic_sampling:
            return trajs
        for _ in range(a.max_sampling_rounds - 1):
            rewards, gids, valid = self._signals(trajs)
            selection = grpo.select_informative_groups(rewards, gids, r.tasks_per_step, valid)
            if selection.num_informative >= r.tasks_per_step:
                break
            more = [self.tasks[i] for i in self.sampler.take(r.tasks_per_step)]
            trajs += self.pool.run_groups(more, r.group_size)
        rewards, gids, valid = self._signals(trajs)
        chosen = grpo.select_informative_groups(rewards, gids, r.tasks_per_step, valid).indices.tolist()
        return [trajs[i] for i in chosen]

    def _signals(self, trajs: list[Trajectory]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Rewards (with the overlong penalty), integer group ids, and which trajectories may train."""
        cfg = self.cfg
        rewards = torch.tensor([t.reward for t in trajs], dtype=torch.float32)
        if cfg.algorithm.overlong_buffer_len > 0:
            lengths = torch.tensor([len(t.prompt_ids) + len(t.response_ids) for t in trajs])
            rewards = rewards + grpo.overlong_penalty(
                lengths,
                cfg.generation.max_context_tokens,
                cfg.algorithm.overlong_buffer_len,
                cfg.algorithm.overlong_penalty_factor,
            )
        ids: dict[str, int] = {}
        gids = torch.tensor([ids.setdefault(t.group_id, len(ids)) for t in trajs], dtype=torch.long)
        masked_overflow = cfg.rollout.on_context_overflow == "mask"
        valid = torch.tensor(
            [
                not (
                    (t.failed and cfg.algorithm.mask_errored)
                    or (t.truncated and masked_overflow)
                    or (t.audit or {}).get("action") == "dropped"
                )  # env.audit: drop
                for t in trajs
            ]
        )
        return rewards, gids, valid

    def step(self) -> dict[str, Any]:
        """One GRPO step; returns the logged record."""
        cfg = self.cfg
        t_step = time.monotonic()
        t0 = time.monotonic()
        trajs = self.collect()
        rollout_s = time.monotonic() - t0
        self._boundary("rollout")

        t0 = time.monotonic()
        rewards, gids, valid = self._signals(trajs)
        advantages = grpo.group_advantages(rewards, gids, valid, cfg.algorithm.norm_adv_by_std, cfg.algorithm.adv_eps)
        advantages = grpo.scale_negative_advantages(advantages, cfg.algorithm.negative_advantage_scale)
        batch = make_batch(trajs, advantages, valid, int(self.tokenizer.pad_token_id))
        policy = self.learner.recompute_old_logprobs(batch)
        policy.update(self.learner.update(batch))
        update_s = time.monotonic() - t0
        self._boundary("update")

        t0 = time.monotonic()
        self.step_count += 1
        self.pool.set_weights(self.learner.state_dict(), self.step_count)
        sync_s = time.monotonic() - t0
        self._boundary("sync")

        self.last = StepData(trajs, rewards, gids, valid, advantages)
        self._write_rollouts(trajs, rewards, advantages, valid)
        metrics = {**rollout_metrics(trajs), **policy}
        metrics["reward/mean"] = float(rewards.mean())  # after penalties
        metrics["reward/std"] = float(rewards.std(unbiased=False)) if len(trajs) > 1 else 0.0
        metrics["reward/frac_zero_std_groups"] = grpo.frac_zero_std_groups(rewards, gids, valid)
        metrics["advantages/mean"] = float(advantages[valid].mean()) if bool(valid.any()) else 0.0
        metrics["advantages/abs_mean"] = float(advantages[valid].abs().mean()) if bool(valid.any()) else 0.0
        metrics["batch/masked_frac"] = float(1.0 - valid.float().mean())
        metrics.update(self.pool.step_metrics())
        metrics.update({"timing/rollout_s": rollout_s, "timing/update_s": update_s, "timing/sync_s": sync_s})
        metrics["timing/step_s"] = time.monotonic() - t_step
        # throughput over the whole step (rollouts, update, sync): what a change of hardware or settings moves
        metrics["throughput/tokens_per_s"] = sum(t.num_model_tokens for t in trajs) / max(
            metrics["timing/step_s"], 1e-9
        )
        metrics["throughput/episodes_per_s"] = len(trajs) / max(metrics["timing/step_s"], 1e-9)
        # the metrics are durable before the checkpoint: a kill between the two redoes the step on resume
        record = self.tracker.log(self.step_count, metrics)
        self._boundary("log")
        self._check_errors(trajs)
        every = cfg.checkpoint.every_steps
        if (every and self.step_count % every == 0) or self.step_count == cfg.total_steps:
            self.save_checkpoint()
            self._boundary("checkpoint")
        return record

    def _boundary(self, phase: str) -> None:
        """The tests' kill hook (KILL_AT_ENV); the step in the name is the one being made."""
        step = self.step_count if phase in ("sync", "log", "checkpoint") else self.step_count + 1
        if os.environ.get(KILL_AT_ENV) == f"{phase}:{step}":
            os.kill(os.getpid(), signal.SIGKILL)

    def _write_rollouts(
        self, trajs: list[Trajectory], rewards: torch.Tensor, advantages: torch.Tensor, valid: torch.Tensor
    ) -> None:
        """The step's rollouts to trajectories/ and, every logging.wandb_rollouts_every steps, to wandb."""
        every = self.cfg.logging.wandb_rollouts_every
        if not (self.trajectories.due(self.step_count) or (every and self.step_count % every == 0)):
            return
        records = trajectories.step_records(
            self.step_count, trajs, rewards.tolist(), advantages.tolist(), valid.tolist()
        )
        self.trajectories.write(self.step_count, records)
        if every and self.step_count % every == 0:
            self.tracker.log_rollouts(self.step_count, records)

    # ------------------------------------------------------------------------------------------ saving

    def save_checkpoint(self) -> Path:
        return ckpt.save_checkpoint(
            self.ckpt_dir,
            self.step_count,
            self.learner.model,
            self.learner.optimizer,
            self.learner.scheduler,
            data_position=self.sampler.state(),
            keep_last=self.cfg.checkpoint.keep_last,
        )

    def save_policy(self, folder: Path) -> Path:
        """The policy as a transformers folder (weights, config, tokenizer), for
        ``swebox eval --tasks TASKS --policy hf:FOLDER``."""
        self.learner.model.save_pretrained(folder)
        self.tokenizer.save_pretrained(folder)
        return folder

    def close(self) -> None:
        self.tracker.finish()
        if self._own_pool:
            self.pool.close()
