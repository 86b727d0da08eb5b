"""The GRPO maths on small tensors whose expected values are worked out by hand in the comments."""

from __future__ import annotations

import math

import pytest
import torch
from swebox.trainers.rl import grpo


def t(*values, dtype=torch.float32):
    return torch.tensor(values, dtype=dtype)


def close(actual: torch.Tensor, expected, tol: float = 1e-5) -> None:
    expected = torch.as_tensor(expected, dtype=actual.dtype)
    assert torch.allclose(actual, expected, atol=tol, rtol=0), f"{actual.tolist()} != {expected.tolist()}"


# ------------------------------------------------------------------------------------------- advantages


def test_group_stats_mean_and_unbiased_std():
    # group 0: [1, 0, 0, 1] -> mean 0.5, var = 4 * 0.25 / 3 = 1/3; group 1: [2, 2] -> mean 2, std 0
    stats = grpo.group_stats(t(1, 0, 0, 1, 2, 2), t(0, 0, 0, 0, 1, 1, dtype=torch.long))
    close(stats.mean, [0.5, 2.0])
    close(stats.std, [math.sqrt(1 / 3), 0.0])
    close(stats.count, [4, 2])


def test_grpo_advantages_divide_by_group_std():
    adv = grpo.group_advantages(t(1, 0, 0, 1, 2, 2), t(0, 0, 0, 0, 1, 1, dtype=torch.long), eps=0.0)
    a = 0.5 / math.sqrt(1 / 3)  # 0.866025
    close(adv, [a, -a, -a, a, 0.0, 0.0])


def test_dr_grpo_advantages_only_subtract_the_mean():
    adv = grpo.group_advantages(t(1, 0, 0, 1, 2, 2), t(0, 0, 0, 0, 1, 1, dtype=torch.long), norm_by_std=False)
    close(adv, [0.5, -0.5, -0.5, 0.5, 0.0, 0.0])


def test_invalid_trajectories_neither_move_the_baseline_nor_get_advantage():
    # valid rewards [1, 0]: mean 0.5, std sqrt(0.5 / 1); the errored trajectory's reward 5 is ignored
    adv = grpo.group_advantages(t(1, 0, 5), t(0, 0, 0, dtype=torch.long), valid=t(1, 1, 0, dtype=torch.bool), eps=0.0)
    close(adv, [0.5 / math.sqrt(0.5), -0.5 / math.sqrt(0.5), 0.0])


def test_negative_advantages_scale_and_positive_ones_stay():
    adv = t(1.5, -0.5, -0.5, -0.5, 0.0)
    close(grpo.scale_negative_advantages(adv, 0.1), [1.5, -0.05, -0.05, -0.05, 0.0])
    close(grpo.scale_negative_advantages(adv, 0.0), [1.5, 0.0, 0.0, 0.0, 0.0])  # only the resolved one pulls
    close(grpo.scale_negative_advantages(adv, 1.0), adv)  # plain GRPO


def test_singleton_group_has_zero_advantage():
    close(grpo.group_advantages(t(3.0), t(0, dtype=torch.long)), [0.0])


def test_group_stats_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="one scalar reward and one group id"):
        grpo.group_stats(t(1, 2), t(0, dtype=torch.long))


# ------------------------------------------------------------------------------------------ aggregation

LOSS = t(1, 2, 3, 4, 5, 6).reshape(2, 3)
MASK = t(1, 1, 0, 1, 0, 0).reshape(2, 3)


def test_token_mean():
    close(grpo.aggregate_loss(LOSS, MASK, "token-mean"), 7 / 3)  # (1 + 2 + 4) / 3 tokens


def test_seq_mean_token_sum():
    close(grpo.aggregate_loss(LOSS, MASK, "seq-mean-token-sum"), 3.5)  # (3 + 4) / 2 sequences


def test_seq_mean_token_mean():
    close(grpo.aggregate_loss(LOSS, MASK, "seq-mean-token-mean"), 2.75)  # (1.5 + 4) / 2


def test_seq_mean_token_sum_norm_divides_by_the_constant():
    close(grpo.aggregate_loss(LOSS, MASK, "seq-mean-token-sum-norm", denominator=4), 7 / 4)
    with pytest.raises(ValueError, match="denominator"):
        grpo.aggregate_loss(LOSS, MASK, "seq-mean-token-sum-norm")


def test_explicit_denominator_for_gradient_accumulation():
    close(grpo.aggregate_loss(LOSS, MASK, "token-mean", denominator=10), 0.7)
    close(grpo.aggregate_loss(LOSS, MASK, "seq-mean-token-sum", denominator=7), 1.0)


def test_fully_masked_sequence_does_not_dilute_the_mean():
    loss = t(1, 2, 3, 4, 5, 6, 7, 8, 9).reshape(3, 3)
    mask = t(1, 1, 0, 0, 0, 0, 1, 1, 1).reshape(3, 3)
    close(grpo.aggregate_loss(loss, mask, "seq-mean-token-mean"), 4.75)  # (1.5 + 8) / 2, not / 3
    close(grpo.aggregate_loss(loss, mask, "token-mean"), 27 / 5)


def test_nan_in_masked_position_stays_out():
    close(grpo.aggregate_loss(t(1.0, float("nan")).reshape(1, 2), t(1, 0).reshape(1, 2)), 1.0)


def test_unknown_aggregation_mode_is_rejected_with_the_valid_ones():
    with pytest.raises(ValueError, match="seq-mean-token-mean"):
        grpo.aggregate_loss(LOSS, MASK, "mean")


# ------------------------------------------------------------------------------------------ policy loss


def ratios_to_logprobs(*ratios: float) -> tuple[torch.Tensor, torch.Tensor]:
    logp = torch.tensor([[math.log(r) for r in ratios]], requires_grad=True)
    return logp, torch.zeros(1, len(ratios))


def test_clipped_loss_with_clip_higher():
    # clip range [0.8, 1.28]; per token (rho, A) -> L = max(-A rho, -A clip(rho)):
    # (1.5, +1) -> max(-1.5, -1.28) = -1.28 clipped | (0.5, +1) -> max(-0.5, -0.8) = -0.5
    # (1.1, -1) -> max(1.1, 1.1) = 1.1              | (0.7, -1) -> max(0.7, 0.8) = 0.8 clipped
    logp, old = ratios_to_logprobs(1.5, 0.5, 1.1, 0.7)
    adv = t(1, 1, -1, -1).reshape(1, 4)
    loss, metrics = grpo.policy_loss(logp, old, adv, torch.ones(1, 4), clip_low=0.2, clip_high=0.28)
    close(loss, (-1.28 - 0.5 + 1.1 + 0.8) / 4)
    close(metrics["clip_frac"], 0.5)
    close(metrics["clip_frac_dual"], 0.0)
    close(metrics["ratio_mean"], (1.5 + 0.5 + 1.1 + 0.7) / 4)
    # approx_kl is k3 of KL(old || new) = mean(rho - 1 - log rho)
    close(metrics["approx_kl"], sum(r - 1 - math.log(r) for r in (1.5, 0.5, 1.1, 0.7)) / 4)
    loss.backward()
    # clipped tokens give no gradient; otherwise dL/dlogp = -A rho / 4 tokens
    close(logp.grad, [[0.0, -0.5 / 4, 1.1 / 4, 0.0]])


def test_dual_clip_bounds_negative_advantage_tokens_only():
    # rho = 4 for both: (A=-1) max(4, 1.28) = 4 -> min(4, c=3) = 3 ; (A=+1) max(-4, -1.28) = -1.28
    logp, old = ratios_to_logprobs(4.0, 4.0)
    adv = t(-1, 1).reshape(1, 2)
    loss, metrics = grpo.policy_loss(logp, old, adv, torch.ones(1, 2), 0.2, 0.28, dual_clip_c=3.0)
    close(loss, (3.0 - 1.28) / 2)
    close(metrics["clip_frac"], 0.5)
    close(metrics["clip_frac_dual"], 0.5)
    loss.backward()
    close(logp.grad, [[0.0, 0.0]])  # both tokens are on a constant (clipped) branch


def test_sequence_advantages_broadcast_over_tokens():
    logp, old = ratios_to_logprobs(1.0, 1.0)
    loss, _ = grpo.policy_loss(logp, old, t(2.0), torch.ones(1, 2))
    close(loss, -2.0)  # ratio 1 everywhere: L = -A


def test_masked_tokens_get_exactly_zero_gradient_even_with_garbage():
    logp = torch.tensor([[math.log(0.5), float("nan"), -1e4]], requires_grad=True)
    old = torch.tensor([[0.0, float("inf"), 0.0]])
    mask = t(1, 0, 0).reshape(1, 3)
    loss, metrics = grpo.policy_loss(logp, old, t(1.0), mask)
    close(loss, -0.5)  # only token 0 counts: rho 0.5, A 1 -> max(-0.5, -0.8) = -0.5
    loss.backward()
    assert torch.isfinite(logp.grad).all()
    close(logp.grad, [[-0.5, 0.0, 0.0]])
    assert all(torch.isfinite(v) for v in metrics.values())


def test_masked_trajectory_gives_zero_gradient_to_its_logits():
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 5, requires_grad=True)
    tokens = torch.randint(0, 5, (2, 3))
    logp = grpo.logprobs_from_logits(logits, tokens)
    mask = grpo.mask_trajectories(torch.ones(2, 3), keep=t(1, 0, dtype=torch.bool))
    loss, _ = grpo.policy_loss(logp, logp.detach(), t(1.0, -1.0), mask)
    loss.backward()
    assert logits.grad[1].abs().sum() == 0.0
    assert logits.grad[0].abs().sum() > 0.0


def test_policy_loss_rejects_bad_clip_settings():
    logp, old = ratios_to_logprobs(1.0)
    with pytest.raises(ValueError, match="dual_clip_c > 1"):
        grpo.policy_loss(logp, old, t(1.0), torch.ones(1, 1), dual_clip_c=1.0)
    with pytest.raises(ValueError, match="clip_low < 1"):
        grpo.policy_loss(logp, old, t(1.0), torch.ones(1, 1), clip_low=1.5)
    with pytest.raises(ValueError, match="one shape"):
        grpo.policy_loss(logp, old, t(1.0), torch.ones(1, 2))


# ---------------------------------------------------------------------------------- KL, logits, entropy


def test_kl_estimators():
    # d = log 0.5 - log 0.25 = ln 2
    logp, ref = t(math.log(0.5)), t(math.log(0.25))
    close(grpo.kl_penalty(logp, ref, "k1"), math.log(2))
    close(grpo.kl_penalty(logp, ref, "k2"), 0.5 * math.log(2) ** 2)
    close(grpo.kl_penalty(logp, ref, "k3"), 0.5 - 1 + math.log(2))  # exp(-ln 2) - 1 + ln 2
    close(grpo.kl_penalty(t(0.0), t(0.0), "k3"), 0.0)
    with pytest.raises(ValueError, match="k3"):
        grpo.kl_penalty(logp, ref, "kl")


def test_k3_is_clamped():
    close(grpo.kl_penalty(t(-30.0), t(0.0), "k3"), 10.0)


def test_logprobs_from_logits():
    logits = torch.tensor([[[0.0, math.log(3.0)]]])  # softmax = [0.25, 0.75]
    close(grpo.logprobs_from_logits(logits, torch.tensor([[1]])), [[math.log(0.75)]])
    close(grpo.logprobs_from_logits(logits, torch.tensor([[0]])), [[math.log(0.25)]])


def test_entropy_from_logits():
    close(grpo.entropy_from_logits(t(0.0, 0.0)), math.log(2))
    close(grpo.entropy_from_logits(t(5.0, 5.0, 5.0, 5.0)), math.log(4))
    close(grpo.entropy_from_logits(t(math.log(3.0), 0.0)), -(0.75 * math.log(0.75) + 0.25 * math.log(0.25)))
    close(grpo.entropy_from_logits(t(0.0, float("-inf"))), 0.0)


# ------------------------------------------------------------------------------ masking and selection


def test_mask_trajectories_zeroes_rows():
    close(grpo.mask_trajectories(torch.ones(2, 2), t(0, 1, dtype=torch.bool)), [[0, 0], [1, 1]])
    with pytest.raises(ValueError, match="one keep flag per trajectory"):
        grpo.mask_trajectories(torch.ones(2, 2), t(1, dtype=torch.bool))


def test_overlong_penalty_ramp():
    # max 10, buffer 4 -> ramp starts after 6: 8 -> (6 - 8) / 4 = -0.5; 10 -> -1; 12 -> -1 (capped)
    lengths = t(5, 6, 8, 10, 12, dtype=torch.long)
    close(grpo.overlong_penalty(lengths, 10, 4), [0, 0, -0.5, -1, -1])
    close(grpo.overlong_penalty(lengths, 10, 4, penalty_factor=0.5), [0, 0, -0.25, -0.5, -0.5])
    with pytest.raises(ValueError, match="buffer_len"):
        grpo.overlong_penalty(lengths, 10, 0)


# four groups of two: g0 [1, 1] equal, g1 [0, 1], g2 [0, 0] equal, g3 [1, 0]
POOL_REWARDS = t(1, 1, 0, 1, 0, 0, 1, 0)
POOL_GROUPS = t(0, 0, 1, 1, 2, 2, 3, 3, dtype=torch.long)


def test_dynamic_sampling_keeps_informative_groups_first():
    sel = grpo.select_informative_groups(POOL_REWARDS, POOL_GROUPS, num_groups=2)
    assert sel.indices.tolist() == [2, 3, 6, 7]
    assert (sel.num_informative, sel.num_filler) == (2, 0)


def test_dynamic_sampling_fills_with_uninformative_groups_when_short():
    sel = grpo.select_informative_groups(POOL_REWARDS, POOL_GROUPS, num_groups=3)
    assert sel.indices.tolist() == [2, 3, 6, 7, 0, 1]
    assert (sel.num_informative, sel.num_filler) == (2, 1)


def test_dynamic_sampling_ignores_invalid_members():
    valid = t(1, 1, 1, 0, 1, 1, 1, 1, dtype=torch.bool)  # g1 loses its 1: one valid member left
    sel = grpo.select_informative_groups(POOL_REWARDS, POOL_GROUPS, num_groups=2, valid=valid)
    assert sel.indices.tolist() == [6, 7, 0, 1]
    assert (sel.num_informative, sel.num_filler) == (1, 1)


def test_dynamic_sampling_needs_a_large_enough_pool():
    with pytest.raises(ValueError, match="at least 5 groups"):
        grpo.select_informative_groups(POOL_REWARDS, POOL_GROUPS, num_groups=5)


def test_dynamic_sampling_with_non_contiguous_group_ids():
    # ids 0 and 2 only: the absent group 1 is neither selected nor counted in the pool
    sel = grpo.select_informative_groups(t(1, 1, 0, 1), t(0, 0, 2, 2, dtype=torch.long), num_groups=2)
    assert sel.indices.tolist() == [2, 3, 0, 1]
    with pytest.raises(ValueError, match="found 2"):
        grpo.select_informative_groups(t(1, 1, 0, 1), t(0, 0, 2, 2, dtype=torch.long), num_groups=3)


def test_frac_zero_std_groups():
    assert grpo.frac_zero_std_groups(POOL_REWARDS, POOL_GROUPS) == 0.5
    assert grpo.frac_zero_std_groups(t(1, 1, 0, 1), t(0, 0, 2, 2, dtype=torch.long)) == 0.5  # of 2 groups
