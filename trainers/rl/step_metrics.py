"""A step's rollout metrics (docs/metrics.md): reward/*, tokens/*, the per-episode env/*, audit/*, harness/* and
gateway/* means, and the wall-clock timing/* of generation, env work and grading over the step's trajectories.
"""

from __future__ import annotations

import numpy as np
import torch
from swebox.trainers.rl.rollout import Trajectory


def union_seconds(spans: list[tuple[float, float]]) -> float:
    """Length of the union of ``(start, end)`` spans: wall-clock time during which any of them ran."""
    total, current_start, current_end = 0.0, None, None
    for start, end in sorted(spans):
        if current_end is None or start > current_end:
            if current_end is not None:
                total += current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    if current_end is not None:
        total += current_end - current_start
    return total


def rollout_metrics(trajs: list[Trajectory]) -> dict[str, float]:
    """reward/*, tokens/*, env/*, audit/*, and for harness episodes harness/* and gateway/* (means over the step's
    episodes) and the wall-clock timing/* of the parts."""
    rewards = torch.tensor([t.reward for t in trajs], dtype=torch.float64)
    out = {
        "reward/mean": float(rewards.mean()),
        "reward/std": float(rewards.std(unbiased=False)) if len(trajs) > 1 else 0.0,
        "reward/resolved_rate": float(np.mean([t.metrics.get("env/resolved", 0.0) for t in trajs])),
        "tokens/response_len_mean": float(np.mean([t.num_model_tokens for t in trajs])),
        "tokens/response_len_max": float(max(t.num_model_tokens for t in trajs)),
        "tokens/truncated_frac": float(np.mean([t.truncated for t in trajs])),
    }
    per_episode = ("env/", "audit/", "harness/", "gateway/")
    env_names = sorted({k for t in trajs for k in t.metrics if k.startswith(per_episode)})
    for name in env_names:
        out[name] = float(np.mean([t.metrics.get(name, 0.0) for t in trajs]))
    for kind in ("generate", "env", "grade"):
        out[f"timing/{kind}_s"] = union_seconds([(s, e) for t in trajs for k, s, e in t.intervals if k == kind])
    out["timing/grade_wait_s"] = float(sum(t.metrics.get("env/grade_wait_s", 0.0) for t in trajs))
    return out
