"""``swebox sft``: supervised and rejection-sampling fine-tuning of the policy on trajectories.

The data (trainers/finetune/sft_data.py) are trajectories in the token layout of RL rollouts: expert episodes
played from the tasks' gold patches (``sft.data=gold``) or the resolved episodes of a records file (rejection
sampling). The policy, tokenizer and chat template are the GRPO trainer's (trainers/policy/models.py); the loss is
the token-mean negative log-likelihood of the model's tokens only, on the same masks as RL (trainers/rl/learner.py
``Learner.sft_update``); metrics go to ``metrics.jsonl`` and wandb (trainers/run/tracking.py), checkpoints are
written like the trainer's (trainers/run/checkpoint.py), and the result is a transformers folder ``<run_dir>/policy``
that GRPO starts from with ``model.init=pretrained model.path=<run_dir>/policy``.

One optimizer step takes ``sft.batch_size`` trajectories; ``sft.epochs`` passes over them, each in a seeded
random order. The learning rate is ``sft.lr`` (else ``optim.lr``) with ``optim.schedule`` over all the steps.
With ``sft.stop_at_sequence_prob`` it stops after the first epoch in which the policy would, on average, sample
the training trajectories' tokens exactly with at least that probability (a warm start for RL, that leaves it
something to learn).
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from swebox.envs.tasks import progress
from swebox.envs.tasks.schema import Task
from swebox.trainers.finetune.sft_data import (
    DataReport,
    expert_trajectories,
    read_records,
    record_trajectories,
)
from swebox.trainers.policy.models import build_model, build_tokenizer
from swebox.trainers.rl.learner import Learner, make_batch
from swebox.trainers.rl.rollout import EpisodeFactory, Trajectory, swe_episode_factory
from swebox.trainers.rl.task_order import as_tasks, load_tasks
from swebox.trainers.rl.trainer import seed_everything
from swebox.trainers.run import checkpoint as ckpt
from swebox.trainers.run.config import ConfigError, TrainConfig, save_config, to_dict
from swebox.trainers.run.tracking import Tracker


@dataclass
class SFTResult:
    records: list[dict[str, Any]]
    """The logged records, one per optimizer step."""
    report: DataReport
    """What the data source gave (kept, and left out by reason)."""
    policy: Path
    """The fine-tuned policy as a transformers folder (weights, config, tokenizer)."""
    task_ids: list[str] = dataclasses.field(default_factory=list)
    """The tasks of the trajectories it was trained on, each once, in order."""
    checkpoint: Path | None = None
    """Its last checkpoint (model and optimizer moments: ``optim.moments_from`` of an RL run after it)."""
    long_turn_ids: list[str] = dataclasses.field(default_factory=list)
    """Tasks of ``task_ids`` with an expert turn longer than ``generation.max_new_tokens``: a policy sampling
    under that budget cannot reproduce them (expert turns are bound by the context only)."""


def build_data(
    cfg: TrainConfig,
    tokenizer: Any,
    tasks: list[Task | dict] | None = None,
    episode_factory: EpisodeFactory | None = None,
) -> tuple[list[Trajectory], DataReport]:
    """The trajectories of ``sft.data``: expert episodes of ``tasks`` (default env.tasks), or a records file."""
    if cfg.sft.data == "gold":
        tasks = as_tasks(tasks) if tasks is not None else load_tasks(cfg.env.tasks)
        return expert_trajectories(tasks, cfg, episode_factory or swe_episode_factory(cfg), tokenizer)
    return record_trajectories(read_records(cfg.sft.data), tokenizer, cfg, source=cfg.sft.data)


def run_sft(
    cfg: TrainConfig,
    *,
    tasks: list[Task | dict] | None = None,
    episode_factory: EpisodeFactory | None = None,
    trajectories: list[Trajectory] | None = None,
    echo=print,
) -> SFTResult:
    """Fine-tune ``cfg.model`` on ``trajectories`` (default: :func:`build_data`); see the module docstring."""
    seed_everything(cfg.seed)
    tokenizer = build_tokenizer(cfg.model)
    model = build_model(cfg.model, tokenizer)  # before the data, so that the weights do not depend on it
    if trajectories is None:
        trajectories, report = build_data(cfg, tokenizer, tasks, episode_factory)
    else:
        report = DataReport(kept=len(trajectories))
    echo(f"sft data ({cfg.sft.data}): {report}")
    if not trajectories:
        advice = report.advice() or (
            "give tasks (--tasks) or a records file with resolved episodes" if not report.dropped else ""
        )
        raise ConfigError(
            f"sft.data={cfg.sft.data}: expected trajectories to train on; found none ({report}); {advice}"
        )
    if report.longest_turn > cfg.generation.max_new_tokens:
        # expert turns are not bounded by the sampling budget (sft_data.expert_generation), the policy's are
        echo(
            f"sft data: the longest expert turn is {report.longest_turn} tokens, more than "
            f"generation.max_new_tokens={cfg.generation.max_new_tokens}: a policy sampling such turns is cut at "
            f"that budget; give GRPO from this policy generation.max_new_tokens>={report.longest_turn}"
        )
    s = cfg.sft
    per_epoch = math.ceil(len(trajectories) / s.batch_size)
    steps = s.epochs * per_epoch
    optim = dataclasses.replace(cfg.optim, lr=s.lr or cfg.optim.lr)
    learner_cfg = dataclasses.replace(cfg, total_steps=steps, optim=optim)  # the schedule spans the SFT steps
    device = "cuda" if torch.cuda.is_available() else "cpu"
    learner = Learner(learner_cfg, model, device)
    run_dir = Path(cfg.logging.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(cfg, run_dir / "config.yaml")
    ckpt_dir = Path(cfg.checkpoint.dir or run_dir / "checkpoints")
    tracker = Tracker.for_run(cfg.logging, run_dir, to_dict(cfg), "sft", echo=echo)
    pad = int(tokenizer.pad_token_id)
    records, step = [], 0
    shown = progress.bar(steps, "sft", "step", cfg.logging.progress)
    try:
        for epoch in range(s.epochs):
            order = list(range(len(trajectories)))
            random.Random(cfg.seed * 1_000_003 + epoch).shuffle(order)
            epoch_prob = 0.0
            for i in range(per_epoch):
                started = time.monotonic()
                chosen = [trajectories[j] for j in order[i * s.batch_size : (i + 1) * s.batch_size]]
                batch = make_batch(chosen, torch.zeros(len(chosen)), torch.ones(len(chosen), dtype=torch.bool), pad)
                metrics = learner.sft_update(batch)
                step += 1
                metrics.update(
                    {
                        "sft/epoch": float(epoch + 1),
                        "sft/examples": float(len(trajectories)),
                        "timing/step_s": time.monotonic() - started,
                    }
                )
                records.append(tracker.log(step, metrics))
                shown.update()
                epoch_prob += metrics["sft/sequence_prob"] * len(chosen) / len(trajectories)
                done = step == steps or (i + 1 == per_epoch and 0 < s.stop_at_sequence_prob <= epoch_prob)
                every = cfg.checkpoint.every_steps
                if (every and step % every == 0) or done:
                    ckpt.save_checkpoint(
                        ckpt_dir,
                        step,
                        learner.model,
                        learner.optimizer,
                        learner.scheduler,
                        data_position={"epoch": epoch, "index": i + 1},
                        keep_last=cfg.checkpoint.keep_last,
                    )
            if done and step < steps:
                echo(
                    f"sft: stopped after epoch {epoch + 1} of {s.epochs}: mean sft/sequence_prob {epoch_prob:.3f} "
                    f">= sft.stop_at_sequence_prob {s.stop_at_sequence_prob}"
                )
                break
        policy = run_dir / "policy"
        learner.model.save_pretrained(policy)
        tokenizer.save_pretrained(policy)
    finally:
        shown.close()
        tracker.finish()
    budget = cfg.generation.max_new_tokens
    long_turns = [t.task_id for t in trajectories if any(int(turn.get("tokens") or 0) > budget for turn in t.turns)]
    return SFTResult(
        records,
        report,
        policy,
        list(dict.fromkeys(t.task_id for t in trajectories)),
        ckpt.latest_checkpoint(ckpt_dir),
        list(dict.fromkeys(long_turns)),
    )
