"""The GRPO maths: advantages, the clipped policy loss, KL to a reference, entropy, and batch selection.

Pure tensor functions in the style of verl's ``core_algos.py``; each docstring states its formula.
Shapes: ``B`` trajectories (rollouts), ``T`` response tokens. A trajectory's ``response_mask`` is 1 on the
tokens the policy generated (the loss is taken there) and 0 on prompt, observation and padding tokens.

A trajectory that failed for reasons outside the policy (an environment error, a crashed sandbox) is
*masked*, never dropped: :func:`mask_trajectories` zeroes its row of the mask, so the batch keeps the shape
the optimiser step was sized for while the trajectory contributes no gradient.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from swebox.trainers.run.config import KLEstimator, LossAggMode

# exp() of a log-ratio beyond this overflows float16 and makes the clipped loss meaningless; verl clamps too.
_LOG_RATIO_CLAMP = 20.0


def masked_sum(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """``sum(values * mask)``, with masked entries replaced by 0 *before* the product.

    ``torch.where`` rather than a product keeps NaN/inf in masked positions (padding logits, say) out of
    the result and out of the gradient.
    """
    kept = torch.where(mask.bool(), values, torch.zeros_like(values))
    return kept.sum() if dim is None else kept.sum(dim=dim)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """``sum(values * mask) / max(sum(mask), 1)``: the mean over unmasked entries, 0 when there are none."""
    count = mask.float().sum() if dim is None else mask.float().sum(dim=dim)
    return masked_sum(values, mask, dim) / count.clamp(min=1.0)


def _check_same_shape(**tensors: torch.Tensor) -> None:
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) > 1:
        raise ValueError(f"expected tensors of one shape; found {shapes}; pass [B, T] tensors aligned token by token")


# --------------------------------------------------------------------------------------------- advantages


@dataclass(frozen=True)
class GroupStats:
    """Per-group reward statistics of a batch (one group = the G rollouts of one task)."""

    mean: torch.Tensor
    """[num_groups] mean reward of the group's valid trajectories."""
    std: torch.Tensor
    """[num_groups] unbiased standard deviation (Bessel), 0 for groups with fewer than two valid members."""
    count: torch.Tensor
    """[num_groups] number of valid trajectories in the group."""


def group_stats(rewards: torch.Tensor, group_ids: torch.Tensor, valid: torch.Tensor | None = None) -> GroupStats:
    """Mean and unbiased std of the rewards of each group, over valid trajectories only.

    ``group_ids`` are non-negative integers, one per trajectory; the result has ``max(id) + 1`` entries
    (an id without members gets count 0). For group ``g`` with valid members
    ``S_g`` (``n = |S_g|``): ``mean_g = sum_{i in S_g} r_i / n`` and
    ``std_g = sqrt(sum_{i in S_g} (r_i - mean_g)^2 / (n - 1))`` (0 when ``n < 2``).
    """
    if rewards.dim() != 1 or rewards.shape != group_ids.shape:
        raise ValueError(
            f"expected 1-D rewards and group_ids of one length; found {tuple(rewards.shape)} and "
            f"{tuple(group_ids.shape)}; pass one scalar reward and one group id per trajectory"
        )
    valid_f = torch.ones_like(rewards) if valid is None else valid.to(rewards.dtype)
    num_groups = int(group_ids.max().item()) + 1 if group_ids.numel() else 0
    ids = group_ids.long()
    count = torch.zeros(num_groups, dtype=rewards.dtype).index_add_(0, ids, valid_f)
    total = torch.zeros(num_groups, dtype=rewards.dtype).index_add_(0, ids, rewards * valid_f)
    mean = total / count.clamp(min=1.0)
    sq_dev = (rewards - mean[ids]) ** 2 * valid_f
    var = torch.zeros(num_groups, dtype=rewards.dtype).index_add_(0, ids, sq_dev) / (count - 1).clamp(min=1.0)
    std = torch.where(count >= 2, var.sqrt(), torch.zeros_like(var))
    return GroupStats(mean=mean, std=std, count=count)


def group_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    valid: torch.Tensor | None = None,
    norm_by_std: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Outcome advantages normalised within each group: one scalar per trajectory, shape ``[B]``.

    GRPO (``norm_by_std=True``):  ``A_i = (r_i - mean_g) / (std_g + eps)``
    Dr. GRPO (``norm_by_std=False``): ``A_i = r_i - mean_g``
    where ``g`` is trajectory ``i``'s group and the statistics are over the group's valid trajectories
    (:func:`group_stats`). Invalid trajectories get ``A_i = 0`` and do not move their group's baseline.
    A group whose rewards are all equal gets ``A = 0`` for every member: it carries no learning signal.
    Broadcast to tokens with ``A[:, None] * response_mask``.
    """
    stats = group_stats(rewards, group_ids, valid)
    ids = group_ids.long()
    adv = rewards - stats.mean[ids]
    if norm_by_std:
        std = stats.std[ids]
        # equal rewards give std 0: their advantage is 0 by definition, also with eps = 0 (no 0 / 0)
        adv = torch.where(std > 0, adv / (std + eps), torch.zeros_like(adv))
    if valid is not None:
        adv = torch.where(valid.bool(), adv, torch.zeros_like(adv))
    return adv


def scale_negative_advantages(advantages: torch.Tensor, scale: float) -> torch.Tensor:
    """``A_i * scale`` where ``A_i < 0``, ``A_i`` elsewhere: how hard worse-than-the-group episodes push down.

    ``scale = 1`` is the symmetric objective; ``scale = 0`` learns only from better-than-the-group episodes (an
    advantage-weighted rejection-sampling fine-tune). A policy that has memorised a few expert episodes fails by
    derailing mid-turn, and its failed text is made of the expert's own tokens; pushing that text down also pushes
    down the expert's (docs/training.md measures it), which a small ``scale`` keeps from undoing what it learns.
    """
    return torch.where(advantages < 0, advantages * scale, advantages)


# ------------------------------------------------------------------------------------------- aggregation


def aggregate_loss(
    loss_mat: torch.Tensor,
    mask: torch.Tensor,
    mode: LossAggMode = "token-mean",
    denominator: float | None = None,
) -> torch.Tensor:
    """Reduce a per-token loss ``[B, T]`` to a scalar; ``m`` is the mask, ``l`` the loss.

    - ``token-mean``:          ``sum_{i,t} m*l / D``, ``D = sum_{i,t} m`` (every token weighs the same; DAPO)
    - ``seq-mean-token-sum``:  ``sum_i (sum_t m*l) / D``, ``D`` = number of sequences with a token in the mask
    - ``seq-mean-token-mean``: ``sum_i (sum_t m*l / sum_t m) / D``, ``D`` as above (original GRPO)
    - ``seq-mean-token-sum-norm``: ``sum_{i,t} m*l / D``, ``D`` = a constant (Dr. GRPO: the max response
      length); ``denominator`` is required.

    ``denominator`` overrides ``D``: with gradient accumulation, pass the whole mini-batch's token (or
    sequence) count so that micro-batches add up to the mini-batch loss. Fully masked sequences never count
    in ``D``: masked trajectories do not dilute the loss of the others.
    """
    _check_same_shape(loss_mat=loss_mat, mask=mask)
    if mode == "token-mean":
        total = masked_sum(loss_mat, mask)
        d = mask.float().sum() if denominator is None else torch.tensor(float(denominator))
        return total / d.clamp(min=1.0)
    if mode == "seq-mean-token-sum-norm":
        if denominator is None:
            raise ValueError(
                "expected a constant denominator for mode 'seq-mean-token-sum-norm'; found None; "
                "pass denominator=<max response length> (Dr. GRPO)"
            )
        return masked_sum(loss_mat, mask) / float(denominator)
    seq_tokens = mask.float().sum(dim=-1)
    if mode == "seq-mean-token-sum":
        seq_loss = masked_sum(loss_mat, mask, dim=-1)
    elif mode == "seq-mean-token-mean":
        seq_loss = masked_sum(loss_mat, mask, dim=-1) / seq_tokens.clamp(min=1.0)
    else:
        raise ValueError(
            f"expected a loss aggregation mode in {list(LossAggMode.__args__)}; found {mode!r}; "
            "set algorithm.loss_agg_mode to one of them"
        )
    has_tokens = seq_tokens > 0
    d = has_tokens.float().sum() if denominator is None else torch.tensor(float(denominator))
    return torch.where(has_tokens, seq_loss, torch.zeros_like(seq_loss)).sum() / d.clamp(min=1.0)


# ------------------------------------------------------------------------------------------- policy loss


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip_c: float | None = None,
    agg_mode: LossAggMode = "token-mean",
    denominator: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The clipped surrogate loss of PPO/GRPO, with DAPO's asymmetric clip and optional dual clip.

    Per token, with ratio ``rho = exp(logp - logp_old)`` and advantage ``A`` (``[B, T]``, or ``[B]``
    broadcast over tokens):
        ``L1 = -A * rho``,  ``L2 = -A * clip(rho, 1 - clip_low, 1 + clip_high)``,  ``L = max(L1, L2)``
    With dual clip (``c > 1``, Ye et al. 2020), for ``A < 0`` only: ``L = min(L, -A * c)``, which bounds the
    loss of a token whose ratio has grown far beyond ``1 + clip_high`` on a negative advantage.
    The token losses are reduced by :func:`aggregate_loss`.

    Returns ``(loss, metrics)``; the metrics are detached scalars over unmasked tokens:
    ``clip_frac`` (fraction where ``L2 > L1``, the clip was active), ``clip_frac_dual`` (fraction where the
    dual clip was active), ``approx_kl`` (k3 estimate of ``KL(pi_old || pi)`` from the sampled tokens:
    ``mean(rho - 1 - log rho)``, >= 0, see :func:`kl_penalty`), ``ratio_mean`` (mean of ``rho``).
    """
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(logprobs)
    _check_same_shape(logprobs=logprobs, old_logprobs=old_logprobs, advantages=advantages, mask=response_mask)
    if not (0 <= clip_low < 1 and clip_high >= 0):
        raise ValueError(
            f"expected 0 <= clip_low < 1 and clip_high >= 0; found clip_low={clip_low}, "
            f"clip_high={clip_high}; "
            "typical values are 0.2 and 0.2 (PPO) or 0.2 and 0.28 (DAPO clip-higher)"
        )
    if dual_clip_c is not None and dual_clip_c <= 1.0:
        raise ValueError(f"expected dual_clip_c > 1 (or None to disable); found {dual_clip_c}; a common value is 3")

    # Masked positions are set to ratio 1 before anything else, so that NaN or inf there (padding) can
    # reach neither the loss nor, through the backward pass, the gradient of the unmasked tokens.
    keep = response_mask.bool()
    log_ratio = torch.where(keep, logprobs - old_logprobs, torch.zeros_like(logprobs))
    log_ratio = log_ratio.clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    token_loss = torch.maximum(loss_unclipped, loss_clipped)
    clip_active = loss_clipped > loss_unclipped
    dual_active = torch.zeros_like(clip_active)
    if dual_clip_c is not None:
        dual_bound = -advantages * dual_clip_c
        dual_active = (advantages < 0) & (token_loss > dual_bound)
        token_loss = torch.where(dual_active, dual_bound, token_loss)

    loss = aggregate_loss(token_loss, response_mask, agg_mode, denominator)
    with torch.no_grad():
        metrics = {
            "clip_frac": masked_mean(clip_active.float(), response_mask),
            "clip_frac_dual": masked_mean(dual_active.float(), response_mask),
            "approx_kl": masked_mean(kl_penalty(old_logprobs, logprobs, "k3"), response_mask),
            "ratio_mean": masked_mean(ratio, response_mask),
        }
    return loss, metrics


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: KLEstimator = "k3") -> torch.Tensor:
    """Per-token estimate of ``KL(pi || pi_ref)`` from samples of ``pi`` (Schulman, "Approximating KL").

    With ``d = logp - logp_ref``:
    - ``k1 = d``                       unbiased, high variance, can be negative
    - ``k2 = d^2 / 2``                 biased, low variance
    - ``k3 = exp(-d) - 1 + d``         unbiased, low variance, always >= 0 (GRPO's choice)
    ``k3`` is clamped to ``[0, 10]`` as in verl's ``low_var_kl``: one runaway token must not dominate.
    """
    _check_same_shape(logprobs=logprobs, ref_logprobs=ref_logprobs)
    d = logprobs - ref_logprobs
    if estimator == "k1":
        return d
    if estimator == "k2":
        return 0.5 * d.square()
    if estimator == "k3":
        d = d.clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
        return (torch.exp(-d) - 1.0 + d).clamp(0.0, 10.0)
    raise ValueError(
        f"expected a KL estimator in {list(KLEstimator.__args__)}; found {estimator!r}; "
        "set algorithm.kl_estimator to one of them"
    )


# ------------------------------------------------------------------------------------ logits -> tokens


def logprobs_from_logits(logits: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """``log softmax(logits)[token]`` per position: ``[B, T, V]`` and ``[B, T]`` -> ``[B, T]``.

    The caller aligns them: the logits at position ``t`` predict the token at ``t + 1``.
    """
    logp = torch.log_softmax(logits.float(), dim=-1)
    return logp.gather(-1, token_ids.long().unsqueeze(-1)).squeeze(-1)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the softmax of ``logits`` per position: ``H = logsumexp(z) - sum_v softmax(z)_v z_v``.

    ``[..., V] -> [...]``; in nats. Equal to ``-sum_v p_v log p_v`` without forming ``log p``.
    """
    logits = logits.float()
    probs = torch.softmax(logits, dim=-1)
    # a -inf logit (a banned token) has p = 0 and contributes 0, not 0 * -inf = NaN
    weighted = torch.where(probs > 0, probs * logits, torch.zeros_like(logits))
    return torch.logsumexp(logits, dim=-1) - weighted.sum(dim=-1)


# --------------------------------------------------------------------------------- masking and selection


def mask_trajectories(response_mask: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """``response_mask * keep[:, None]``: zero the rows of trajectories that must not train the policy.

    Use it for errored trajectories (environment failures) and, with overlong filtering, for truncated
    ones. The batch keeps its shape; the zeroed rows get exactly zero gradient.
    """
    if keep.shape != response_mask.shape[:1]:
        raise ValueError(
            f"expected one keep flag per trajectory ({response_mask.shape[0]}); found shape {tuple(keep.shape)}"
        )
    return response_mask * keep.to(response_mask.dtype)[:, None]


def overlong_penalty(
    response_lengths: torch.Tensor, max_len: int, buffer_len: int, penalty_factor: float = 1.0
) -> torch.Tensor:
    """DAPO's soft overlong punishment, a reward term per trajectory (``<= 0``), shape ``[B]``.

    With ``L`` the response length, ``L_max = max_len`` and ``L_buf = buffer_len``:
        ``0``                                   if ``L <= L_max - L_buf``
        ``(L_max - L_buf - L) / L_buf * f``     if ``L_max - L_buf < L <= L_max``   (linear from 0 to -f)
        ``-f``                                  if ``L > L_max``
    """
    if not 0 < buffer_len <= max_len:
        raise ValueError(
            f"expected 0 < buffer_len <= max_len; found buffer_len={buffer_len}, max_len={max_len}; "
            "DAPO uses a buffer of about a fifth of the maximum length"
        )
    start = max_len - buffer_len
    lengths = response_lengths.float()
    ramp = (start - lengths) / buffer_len * penalty_factor
    return torch.where(lengths <= start, torch.zeros_like(lengths), ramp).clamp(min=-penalty_factor)


@dataclass(frozen=True)
class GroupSelection:
    """Which trajectories a dynamically sampled batch keeps."""

    indices: torch.Tensor
    """Trajectory indices into the pool, whole groups in pool order, informative groups first."""
    num_informative: int
    """Groups kept because their rewards differ (they carry a learning signal)."""
    num_filler: int
    """Groups of equal rewards kept only to fill the batch to the size asked for (their advantages are 0)."""


def select_informative_groups(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    num_groups: int,
    valid: torch.Tensor | None = None,
    tol: float = 1e-6,
) -> GroupSelection:
    """DAPO's dynamic sampling as index selection over a pool of finished groups.

    A group is informative when its valid rewards are not all equal (``std_g > tol``, :func:`group_stats`).
    Returns the first ``num_groups`` informative groups of the pool; when the pool has too few, the caller
    may sample more groups and call again (``num_informative < num_groups`` says so). Once it stops
    refilling, uninformative groups fill the rest, so the batch always has ``num_groups`` groups.
    """
    stats = group_stats(rewards, group_ids, valid)
    ids = group_ids.long()
    present = torch.bincount(ids, minlength=len(stats.std)) > 0  # ids need not be contiguous
    informative = (stats.std > tol).nonzero().flatten().tolist()
    others = ((stats.std <= tol) & present).nonzero().flatten().tolist()
    if int(present.sum()) < num_groups:
        raise ValueError(
            f"expected a pool of at least {num_groups} groups; found {int(present.sum())}; "
            "roll out more groups before selecting"
        )
    chosen_informative = informative[:num_groups]
    filler = others[: num_groups - len(chosen_informative)]
    indices = [(ids == g).nonzero().flatten() for g in chosen_informative + filler]
    return GroupSelection(
        indices=torch.cat(indices) if indices else torch.zeros(0, dtype=torch.long),
        num_informative=len(chosen_informative),
        num_filler=len(filler),
    )


def frac_zero_std_groups(rewards: torch.Tensor, group_ids: torch.Tensor, valid: torch.Tensor | None = None) -> float:
    """Fraction of groups whose valid rewards are all equal (``reward/frac_zero_std_groups``)."""
    std = group_stats(rewards, group_ids, valid).std
    present = torch.bincount(group_ids.long(), minlength=len(std)) > 0
    return float((std[present] <= 1e-6).float().mean().item()) if bool(present.any()) else 0.0
