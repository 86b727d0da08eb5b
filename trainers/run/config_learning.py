"""The trainer configuration's learning sections: GRPO's maths (``algorithm``), the optimizer and its batching
(``optim``) and supervised fine-tuning (``sft``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from .config_checks import check, check_literals

# The algorithm's choices, named here so that loading a config never imports torch; grpo.py uses them too.
LossAggMode = Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
KLEstimator = Literal["k1", "k2", "k3"]


@dataclass
class AlgorithmConfig:
    norm_adv_by_std: bool = True
    """Divide advantages by the group's reward std: True is GRPO, False is Dr. GRPO."""
    adv_eps: float = 1e-6
    """Added to the std before dividing."""
    clip_low: float = 0.2
    """Lower clip of the ratio: 1 - clip_low."""
    clip_high: float = 0.28
    """Upper clip of the ratio: 1 + clip_high (DAPO's clip-higher when above clip_low)."""
    dual_clip_c: float | None = None
    """Dual clip bound c > 1 for negative advantages; null disables it."""
    loss_agg_mode: LossAggMode = "token-mean"
    """How token losses become one number (trainers/rl/grpo.py aggregate_loss)."""
    loss_norm_constant: int = 0
    """Denominator of 'seq-mean-token-sum-norm' (Dr. GRPO); 0: generation.max_context_tokens."""
    kl_beta: float = 0.0
    """Weight of the KL penalty to the reference model; 0 loads no reference model."""
    kl_estimator: KLEstimator = "k3"
    """KL estimator (trainers/rl/grpo.py kl_penalty)."""
    entropy_coef: float = 0.0
    """Weight of an entropy bonus (subtracted from the loss); 0: entropy is only logged."""
    dynamic_sampling: bool = False
    """DAPO: train only on groups whose rewards differ, rolling out more groups to refill the batch."""
    max_sampling_rounds: int = 3
    """Rollout rounds per step when refilling; afterwards equal-reward groups fill the batch."""
    overlong_buffer_len: int = 0
    """DAPO soft overlong penalty: tokens before max_context_tokens where it ramps to -penalty; 0: off."""
    overlong_penalty_factor: float = 1.0
    """Reward subtracted at or beyond max_context_tokens (DAPO's penalty factor)."""
    mask_errored: bool = True
    """Mask trajectories whose environment failed (sandbox error, crash) out of the loss."""
    negative_advantage_scale: float = 1.0
    """Multiplies negative advantages (trainers/rl/grpo.py scale_negative_advantages): 1 is plain GRPO; below 1
    failed episodes push their text down less than resolved ones pull theirs up (configs/demo.yaml: 0)."""

    def __post_init__(self) -> None:
        check_literals(self, "algorithm")
        check(
            0 <= self.negative_advantage_scale <= 1,
            "algorithm.negative_advantage_scale",
            "in [0, 1]",
            self.negative_advantage_scale,
            "use 1 (plain GRPO)",
        )
        check(0 <= self.clip_low < 1, "algorithm.clip_low", "a value in [0, 1)", self.clip_low, "use 0.2")
        check(self.clip_high >= 0, "algorithm.clip_high", ">= 0", self.clip_high, "use 0.2 or 0.28 (DAPO)")
        check(
            self.dual_clip_c is None or self.dual_clip_c > 1,
            "algorithm.dual_clip_c",
            "null or > 1",
            self.dual_clip_c,
            "use 3.0 or null",
        )
        check(self.kl_beta >= 0, "algorithm.kl_beta", ">= 0", self.kl_beta, "use 0 (no reference model)")
        check(self.max_sampling_rounds >= 1, "algorithm.max_sampling_rounds", ">= 1", self.max_sampling_rounds, "use 3")
        check(
            self.overlong_buffer_len >= 0,
            "algorithm.overlong_buffer_len",
            ">= 0",
            self.overlong_buffer_len,
            "use 0 to disable the penalty",
        )


@dataclass
class OptimConfig:
    lr: float = 1e-6
    """Peak learning rate of AdamW."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    """AdamW betas."""
    schedule: Literal["constant", "linear", "cosine"] = "constant"
    """Learning-rate shape after warm-up, over train.total_steps."""
    warmup_steps: int = 0
    """Steps of linear warm-up from 0 to lr."""
    grad_clip: float = 1.0
    """Clip the global gradient norm to this; 0 disables clipping (the norm is still logged)."""
    mini_batches: int = 1
    """Optimizer steps per rollout batch (the batch is split into this many mini-batches)."""
    micro_batch_size: int = 4
    """Trajectories per forward/backward; gradients accumulate over a mini-batch."""
    epochs: int = 1
    """Passes over each rollout batch (PPO epochs); > 1 makes the ratio and clipping matter."""
    moments_from: str = ""
    """A checkpoint folder (``.../checkpoints/step_N``) whose AdamW moments this run starts from, e.g. its SFT
    warm start's; empty: fresh moments. A fresh Adam's first update moves every weight by about ``lr`` (its
    moments are one gradient), which undoes a memorised warm start; the warm start's moments scale each weight's
    step by what its gradients have been (configs/demo.yaml, docs/training.md)."""

    def __post_init__(self) -> None:
        check_literals(self, "optim")
        check(self.lr > 0, "optim.lr", "> 0", self.lr, "use 1e-6 for a 7B model, 1e-4 for a tiny one")
        check(
            len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas),
            "optim.betas",
            "two values in [0, 1)",
            self.betas,
            "use [0.9, 0.999]",
        )
        check(self.grad_clip >= 0, "optim.grad_clip", ">= 0", self.grad_clip, "use 1.0")
        for key in ("mini_batches", "micro_batch_size", "epochs"):
            check(getattr(self, key) >= 1, f"optim.{key}", ">= 1", getattr(self, key), "use 1")


@dataclass
class SFTConfig:
    """``swebox sft``: supervised fine-tuning on trajectories (trainers/finetune/sft.py); the optimizer is
    ``optim``'s."""

    data: str = "gold"
    """'gold': expert episodes played from the tasks' gold patches in sandboxes (trainers/finetune/sft_data.py); or a
    JSON-lines file of episode records (``swebox eval --out``; ``.gz`` too), of which the resolved ones train
    (rejection sampling)."""
    epochs: int = 3
    """Passes over the kept trajectories."""
    batch_size: int = 4
    """Trajectories per optimizer step (accumulated in micro-batches of optim.micro_batch_size)."""
    lr: float = 0.0
    """Learning rate of fine-tuning; 0: optim.lr."""
    stop_at_sequence_prob: float = 0.0
    """Stop after the first epoch whose mean ``sft/sequence_prob`` (the chance that sampling at temperature 1
    reproduces a training trajectory's model tokens exactly) reaches this; 0: run all ``epochs``. A warm start
    for RL stops early on purpose: a policy that is *partly* right gives GRPO groups with both outcomes
    (configs/demo.yaml)."""
    minimal_patch: bool = False
    """``sft.data=gold``: the expert applies the gold patch without context lines (``git apply --unidiff-zero``),
    so its apply turn is about half as many tokens; a tiny policy learns that faster (configs/demo.yaml)."""

    def __post_init__(self) -> None:
        check(bool(self.data), "sft.data", "'gold' or a records file", self.data, "use sft.data=gold")
        check(self.epochs >= 1, "sft.epochs", ">= 1", self.epochs, "use 3")
        check(self.batch_size >= 1, "sft.batch_size", ">= 1", self.batch_size, "use 4")
        check(self.lr >= 0, "sft.lr", ">= 0", self.lr, "use 0 (optim.lr)")
        check(
            0 <= self.stop_at_sequence_prob <= 1,
            "sft.stop_at_sequence_prob",
            "in [0, 1]",
            self.stop_at_sequence_prob,
            "use 0 (run every epoch)",
        )
