"""The learner's half of a GRPO step: trajectories -> padded tensors -> clipped policy-gradient updates.

A batch of B trajectories becomes right-padded ``[B, L]`` token ids (prompt + response). The model's logits
at position ``t`` predict token ``t + 1``, so every per-token tensor here lives on *target* positions
``[B, L - 1]``: ``mask[i, t] = 1`` when token ``t + 1`` of row ``i`` is a model token that trains the policy.
The batch is split into ``optim.mini_batches`` optimizer steps, each accumulated over micro-batches of
``optim.micro_batch_size`` rows with the loss denominator of the whole mini-batch, so that the accumulated
gradient equals the gradient of the mini-batch's loss (trainers/rl/grpo.py ``aggregate_loss``). Rows whose loss
is exactly zero (advantage 0, with no entropy bonus and no KL to a reference) are not run through the update:
their gradient is zero, and in a converging run (a group all resolved or all failed, or failures scaled to 0
by ``algorithm.negative_advantage_scale``) they are most of the batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from swebox.trainers.rl import grpo
from swebox.trainers.rl.rollout import Trajectory
from swebox.trainers.run.checkpoint import load_optimizer_moments
from swebox.trainers.run.config import TrainConfig


@dataclass
class Batch:
    """Padded tensors of a batch of trajectories (target positions, see the module docstring)."""

    input_ids: torch.Tensor
    """[B, L] prompt + response ids, right-padded."""
    attention_mask: torch.Tensor
    """[B, L] 1 on real tokens."""
    targets: torch.Tensor
    """[B, L-1] input_ids shifted left: the token each position predicts."""
    mask: torch.Tensor
    """[B, L-1] 1 where the target is a model token of a valid trajectory."""
    old_logprobs: torch.Tensor
    """[B, L-1] sampling logprobs of the targets (0 off the mask)."""
    advantages: torch.Tensor
    """[B] one advantage per trajectory."""


def make_batch(trajs: list[Trajectory], advantages: torch.Tensor, valid: torch.Tensor, pad_id: int) -> Batch:
    """Tensors for ``trajs``; an invalid trajectory keeps its row with an all-zero mask (masked, not dropped)."""
    rows = [t.prompt_ids + t.response_ids or [pad_id] for t in trajs]
    width = max(2, max(len(r) for r in rows))
    b = len(trajs)
    ids = torch.full((b, width), pad_id, dtype=torch.long)
    attn = torch.zeros((b, width), dtype=torch.long)
    mask = torch.zeros((b, width - 1), dtype=torch.float32)
    old = torch.zeros((b, width - 1), dtype=torch.float32)
    for i, (t, row) in enumerate(zip(trajs, rows, strict=True)):
        ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        attn[i, : len(row)] = 1
        p, r = len(t.prompt_ids), len(t.response_ids)
        if p and r:  # response token j sits at sequence index p + j, predicted at target position p + j - 1
            mask[i, p - 1 : p - 1 + r] = torch.tensor(t.loss_mask, dtype=torch.float32)
            old[i, p - 1 : p - 1 + r] = torch.tensor(t.old_logprobs, dtype=torch.float32)
    mask = grpo.mask_trajectories(mask, valid.bool())
    return Batch(ids, attn, ids[:, 1:].clone(), mask, old, advantages.float())


def _rows(batch: Batch, index: torch.Tensor, device: torch.device) -> Batch:
    width = int(batch.attention_mask[index].sum(dim=1).max().item())  # trim the padding of these rows
    width = max(width, 2)
    return Batch(
        batch.input_ids[index, :width].to(device),
        batch.attention_mask[index, :width].to(device),
        batch.targets[index, : width - 1].to(device),
        batch.mask[index, : width - 1].to(device),
        batch.old_logprobs[index, : width - 1].to(device),
        batch.advantages[index].to(device),
    )


def token_logprobs(
    model: torch.nn.Module, mb: Batch, temperature: float = 1.0, with_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log p(target) per target position, of the sampling distribution (logits / temperature)."""
    logits = model(input_ids=mb.input_ids, attention_mask=mb.attention_mask).logits[:, :-1]
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    logp = grpo.logprobs_from_logits(logits, mb.targets)
    entropy = grpo.entropy_from_logits(logits) if with_entropy else None
    return logp, entropy


def lr_factor(step: int, warmup_steps: int, total_steps: int, schedule: str) -> float:
    """Learning-rate multiplier after ``step`` optimizer-schedule steps: linear warm-up, then the shape."""
    if warmup_steps and step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    if schedule == "linear":
        return 1.0 - progress
    return 0.5 * (1.0 + math.cos(math.pi * progress))


class Learner:
    """The policy being trained, its optimizer and schedule, and (with kl_beta > 0) a frozen reference."""

    def __init__(self, cfg: TrainConfig, model: torch.nn.Module, device: torch.device | str = "cpu") -> None:
        self.cfg = cfg
        self.device = torch.device(device)
        self.model = model.to(self.device)
        self.model.train()
        o = cfg.optim
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=o.lr, betas=tuple(o.betas), weight_decay=o.weight_decay
        )
        if o.moments_from:
            load_optimizer_moments(o.moments_from, self.optimizer)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: lr_factor(s, o.warmup_steps, cfg.total_steps, o.schedule)
        )
        self.ref_model = None
        if cfg.algorithm.kl_beta > 0:
            import copy

            self.ref_model = copy.deepcopy(self.model).eval().requires_grad_(False)

    def _denominator(self, mask: torch.Tensor) -> float:
        mode = self.cfg.algorithm.loss_agg_mode
        if mode == "token-mean":
            return float(mask.sum())
        if mode == "seq-mean-token-sum-norm":
            return float(self.cfg.algorithm.loss_norm_constant or self.cfg.generation.max_context_tokens)
        return float((mask.sum(dim=1) > 0).sum())

    @torch.no_grad()
    def recompute_old_logprobs(self, batch: Batch) -> dict[str, float]:
        """Replace the sampling logprobs by the learner's own for the same weights (before any update); returns
        ``policy/entropy`` of the whole batch under these weights.

        The backend's numerics (batched, left-padded decoding; vLLM kernels) differ slightly from the
        learner's; the ratio must start at exactly 1 for the clipping to mean what it says.
        """
        self.model.eval()
        size = self.cfg.optim.micro_batch_size
        entropy_sum = tokens = 0.0
        for start in range(0, len(batch.advantages), size):
            index = torch.arange(start, min(start + size, len(batch.advantages)))
            mb = _rows(batch, index, self.device)
            logp, entropy = token_logprobs(self.model, mb, self.cfg.generation.temperature, with_entropy=True)
            w = mb.targets.shape[1]
            batch.old_logprobs[index, :w] = torch.where(mb.mask.bool(), logp, torch.zeros_like(logp)).cpu()
            entropy_sum += float((entropy * mb.mask).sum())
            tokens += float(mb.mask.sum())
        self.model.train()
        return {"policy/entropy": entropy_sum / tokens if tokens else 0.0}

    def _trained_rows(self, batch: Batch, rows: torch.Tensor) -> torch.Tensor:
        """The rows of ``rows`` whose loss can be non-zero: all of them, unless only the advantage weighs."""
        a = self.cfg.algorithm
        if a.entropy_coef != 0 or self.ref_model is not None:
            return rows
        keep = (batch.advantages[rows] != 0) & (batch.mask[rows].sum(dim=1) > 0)
        return rows[keep]

    def update(self, batch: Batch, generator: torch.Generator | None = None) -> dict[str, float]:
        """Epochs x mini-batches of clipped policy-gradient steps; returns the step's policy/* metrics."""
        cfg, a = self.cfg, self.cfg.algorithm
        n = len(batch.advantages)
        per_mini = n // cfg.optim.mini_batches
        sums: dict[str, float] = {}
        last_lr = float(self.optimizer.param_groups[0]["lr"])
        weights: dict[str, float] = {}

        def add(name: str, value: float, weight: float) -> None:
            sums[name] = sums.get(name, 0.0) + value * weight
            weights[name] = weights.get(name, 0.0) + weight

        for _ in range(cfg.optim.epochs):
            order = torch.randperm(n, generator=generator) if cfg.optim.mini_batches > 1 else torch.arange(n)
            for m in range(cfg.optim.mini_batches):
                mini = order[m * per_mini : (m + 1) * per_mini]
                denominator = self._denominator(batch.mask[mini])  # of every row: the loss is the same
                trained = self._trained_rows(batch, mini)
                self.optimizer.zero_grad(set_to_none=True)
                for start in range(0, len(trained), cfg.optim.micro_batch_size):
                    mb = _rows(batch, trained[start : start + cfg.optim.micro_batch_size], self.device)
                    tokens = float(mb.mask.sum())
                    logp, entropy = token_logprobs(
                        self.model, mb, cfg.generation.temperature, with_entropy=a.entropy_coef != 0
                    )
                    loss, stats = grpo.policy_loss(
                        logp,
                        mb.old_logprobs,
                        mb.advantages,
                        mb.mask,
                        a.clip_low,
                        a.clip_high,
                        a.dual_clip_c,
                        a.loss_agg_mode,
                        denominator,
                    )
                    if entropy is not None:
                        loss = loss - a.entropy_coef * grpo.aggregate_loss(
                            entropy, mb.mask, a.loss_agg_mode, denominator
                        )
                    if self.ref_model is not None:
                        with torch.no_grad():
                            ref_logp, _ = token_logprobs(self.ref_model, mb, cfg.generation.temperature)
                        kl = grpo.kl_penalty(logp, ref_logp, a.kl_estimator)
                        loss = loss + a.kl_beta * grpo.aggregate_loss(kl, mb.mask, a.loss_agg_mode, denominator)
                        add("policy/ref_kl", float(grpo.masked_mean(kl.detach(), mb.mask)), tokens)
                    loss.backward()
                    add("policy/loss", float(loss.detach()), 1.0)  # micro losses sum to the mini-batch loss
                    add("policy/kl", float(stats["approx_kl"]), tokens)
                    add("policy/clip_frac", float(stats["clip_frac"]), tokens)
                    if a.dual_clip_c is not None:
                        add("policy/clip_frac_dual", float(stats["clip_frac_dual"]), tokens)
                if not len(trained):  # a zero gradient, not none: AdamW skips parameters without one
                    for param in self.model.parameters():
                        param.grad = torch.zeros_like(param)
                clip = cfg.optim.grad_clip if cfg.optim.grad_clip > 0 else float("inf")
                grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
                add("policy/grad_norm", float(grad_norm), 1.0)
                last_lr = float(self.optimizer.param_groups[0]["lr"])
                self.optimizer.step()
        # the schedule counts training steps (optim.warmup_steps and the shape over total_steps are in steps);
        # stepping it per mini-batch would end a cosine or linear schedule (lr 0) after total_steps / mini_batches
        self.scheduler.step()
        metrics = {k: sums[k] / weights[k] if weights[k] else 0.0 for k in weights}
        for name in ("policy/kl", "policy/clip_frac"):  # no row trained: nothing moved, nothing clipped
            metrics.setdefault(name, 0.0)
        # policy/loss is the mean over optimizer steps of each mini-batch's (summed micro-batch) loss
        metrics["policy/loss"] = sums.get("policy/loss", 0.0) / max(1, cfg.optim.epochs * cfg.optim.mini_batches)
        metrics["policy/lr"] = last_lr
        return metrics

    def sft_update(self, batch: Batch) -> dict[str, float]:
        """One optimizer step of supervised fine-tuning on ``batch``: the token-mean negative log-likelihood.

        ``L = -sum_{i,t} m * log p(target) / sum_{i,t} m`` over the same mask as RL (the model's tokens of
        valid trajectories), micro-batched like :meth:`update` with the whole batch's token count as the
        denominator; the raw distribution is trained (no sampling temperature). Returns ``sft/loss``,
        ``sft/token_accuracy`` (argmax = target on the mask), ``sft/sequence_prob`` (the mean over the batch's
        trajectories of exp(sum of log p on the mask), before this step: the chance that sampling at
        temperature 1 reproduces a trajectory's model tokens exactly), ``sft/tokens``, ``policy/grad_norm``,
        ``policy/lr``.
        """
        o = self.cfg.optim
        n = len(batch.advantages)
        tokens = float(batch.mask.sum())
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum, correct, sequence_prob = 0.0, 0.0, 0.0
        for start in range(0, n, o.micro_batch_size):
            mb = _rows(batch, torch.arange(start, min(n, start + o.micro_batch_size)), self.device)
            logits = self.model(input_ids=mb.input_ids, attention_mask=mb.attention_mask).logits[:, :-1]
            logp = grpo.logprobs_from_logits(logits, mb.targets)
            loss = -grpo.masked_sum(logp, mb.mask) / max(tokens, 1.0)
            loss.backward()
            loss_sum += float(loss.detach())
            correct += float(grpo.masked_sum((logits.argmax(-1) == mb.targets).float(), mb.mask))
            sequence_prob += float(grpo.masked_sum(logp.detach(), mb.mask, dim=1).exp().sum())
        clip = o.grad_clip if o.grad_clip > 0 else float("inf")
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip))
        lr = float(self.optimizer.param_groups[0]["lr"])
        self.optimizer.step()
        self.scheduler.step()
        return {
            "sft/loss": loss_sum,
            "sft/token_accuracy": correct / max(tokens, 1.0),
            "sft/sequence_prob": sequence_prob / max(n, 1),
            "sft/tokens": tokens,
            "policy/grad_norm": grad_norm,
            "policy/lr": lr,
        }

    def state_dict(self) -> dict[str, Any]:
        """The policy's weights on the CPU (what rollout workers load)."""
        return {k: v.detach().to("cpu") for k, v in self.model.state_dict().items()}
