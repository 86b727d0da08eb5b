"""The offline loop behind docs/training.md's demo settings: GRPO updates on a demo run's warm start, no sandboxes.

From a ``swebox demo`` run folder it takes the SFT policy (``RUN/sft/policy``), its last checkpoint (for
``--moments``) and, per training task, the context a resolved episode had before its apply turn and that turn's
tokens (``RUN/trajectories``). Each step samples ``rollout.group_size`` apply turns per task at temperature 1,
rewards one that is the expert's turn token for token, and makes one GRPO update with the trainer's
:class:`~swebox.trainers.rl.learner.Learner` and advantages; it prints the reward and each task's probability of
sampling the expert's turn (teacher-forced, before the update). Seconds per step, not the minutes of a demo:

    python -m swebox.scripts.demo_levers --run runs/demo --steps 10 --moments optim.lr=3e-2 \
        algorithm.negative_advantage_scale=0 rollout.group_size=8

The exact-match reward stands in for grading: in the demo a derailed apply turn is what fails.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
from pathlib import Path

import torch
from swebox.trainers.finetune.sft_data import trajectory_from_messages
from swebox.trainers.policy.models import build_model, build_tokenizer
from swebox.trainers.rl import grpo
from swebox.trainers.rl.learner import Learner, make_batch, token_logprobs
from swebox.trainers.rl.rollout import Trajectory
from swebox.trainers.run import checkpoint as ckpt
from swebox.trainers.run.config import load_config


def apply_turn_contexts(run: Path, tokenizer) -> dict[str, tuple[list[int], list[int]]]:
    """task id -> (ids before the last model turn, that turn's ids) of the first resolved episode on disk."""
    found: dict[str, tuple[list[int], list[int]]] = {}
    for path in sorted((run / "trajectories").glob("step_*.jsonl.gz")):
        with gzip.open(path, "rt") as f:
            for line in f:
                r = json.loads(line)
                if not r["resolved"] or r["task_id"] in found or not r["turns"]:
                    continue
                messages = list(r["prompt"])
                for turn in r["turns"][:-1]:
                    messages += [
                        {"role": "assistant", "content": turn["text"]},
                        {"role": "user", "content": turn["observation"]},
                    ]
                messages.append({"role": "assistant", "content": r["turns"][-1]["text"]})
                t = trajectory_from_messages(tokenizer, messages, r["task_id"])
                last = max(i for i, m in enumerate(t.loss_mask) if m == 0) + 1  # the last model turn starts here
                found[r["task_id"]] = (t.prompt_ids + t.response_ids[:last], t.response_ids[last:])
    if not found:
        raise SystemExit(
            f"demo_levers: expected resolved episodes in {run}/trajectories; found none; run "
            "`swebox demo --out RUN` first"
        )
    return found


def expert_prob(model, context: list[int], target: list[int], pad: int) -> float:
    t = Trajectory("x", "x", context, target, [1] * len(target), [0.0] * len(target))
    batch = make_batch([t], torch.zeros(1), torch.ones(1, dtype=torch.bool), pad)
    model.eval()
    with torch.no_grad():
        logp, _ = token_logprobs(model, batch, 1.0)
    model.train()
    return float(logp[batch.mask.bool()].sum().exp())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="demo_levers", description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, required=True, help="a swebox demo output folder")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--moments", action="store_true", help="start from the SFT checkpoint's Adam moments")
    parser.add_argument("overrides", nargs="*", help="KEY=VALUE over configs/demo.yaml")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    from swebox.scripts.demo import DEFAULT_CONFIG

    cfg = load_config(
        DEFAULT_CONFIG,
        [
            *args.overrides,
            f"total_steps={args.steps}",
            "model.init=pretrained",
            f"model.path={args.run / 'sft' / 'policy'}",
            "model.tokenizer=''",
        ],
    )
    if args.moments:
        cfg = dataclasses.replace(
            cfg,
            optim=dataclasses.replace(
                cfg.optim, moments_from=str(ckpt.latest_checkpoint(args.run / "sft" / "checkpoints"))
            ),
        )
    tokenizer = build_tokenizer(cfg.model)
    pad, eos = int(tokenizer.pad_token_id), int(tokenizer.eos_token_id)
    contexts = apply_turn_contexts(args.run, tokenizer)
    model = build_model(cfg.model, tokenizer)
    learner = Learner(cfg, model)
    size = cfg.rollout.group_size
    for step in range(1, args.steps + 1):
        trajs, rewards, groups, probs = [], [], [], []
        for g, (task_id, (context, target)) in enumerate(contexts.items()):
            probs.append(expert_prob(model, context, target, pad))
            model.eval()
            with torch.no_grad():
                out = model.generate(
                    torch.tensor([context]),
                    do_sample=True,
                    temperature=1.0,
                    top_k=0,
                    top_p=1.0,
                    max_new_tokens=cfg.generation.max_new_tokens,
                    num_return_sequences=size,
                    eos_token_id=eos,
                    pad_token_id=pad,
                )
            model.train()
            for row in out[:, len(context) :].tolist():
                row = row[: row.index(eos) + 1] if eos in row else row
                trajs.append(Trajectory(task_id, task_id, context, row, [1] * len(row), [0.0] * len(row)))
                rewards.append(float(row == target))
                groups.append(g)
        reward, gids = torch.tensor(rewards), torch.tensor(groups)
        valid = torch.ones(len(rewards), dtype=torch.bool)
        adv = grpo.group_advantages(reward, gids, valid, cfg.algorithm.norm_adv_by_std, cfg.algorithm.adv_eps)
        adv = grpo.scale_negative_advantages(adv, cfg.algorithm.negative_advantage_scale)
        batch = make_batch(trajs, adv, valid, pad)
        metrics = learner.recompute_old_logprobs(batch)
        metrics.update(learner.update(batch))
        print(
            json.dumps(
                {
                    "step": step,
                    "reward": round(float(reward.mean()), 3),
                    "expert_prob": [round(p, 3) for p in probs],
                    "entropy": round(metrics["policy/entropy"], 3),
                }
            ),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
