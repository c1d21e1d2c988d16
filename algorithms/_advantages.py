"""Sequence advantages of the group-RL zoo: pure functions of the candidates' scores
s [N, K] (N groups of K), each returning A [N, K], broadcast over candidate i's steps.

    group_std     A_i = (s_i - mean_g s) / (std_g s + 1e-8)        GRPO, DAPO, GSPO, CISPO
    group_mean    A_i = s_i - mean_g s                               Dr. GRPO, GPG (F_norm = 1)
    batch_std     A_i = (s_i - mean_g s) / (std_batch s + 1e-8)      TRL scale_rewards="batch"
    rloo          A_i = s_i - mean_{j != i} s_j = K/(K-1) (s_i - mean_g s)        RLOO
    maxrl         A_i = (s_i - mean_g s) / mean_g s, 0 where mean_g s = 0        MaxRL
    reinforce_pp_baseline   c_i = s_i - mean_g s, A_i = (c_i - mean_batch c) / sqrt(var_batch c + 1e-8)

Every std and var is the population one (TRL's and verl's Bessel corrections noted per
function). With exact population probabilities (batch.probs) every statistic is the
expectation under p, and rloo is group_mean. A constant factor on A (rloo's K/(K-1)) is
all but cancelled by the normalised optimisers; one number per batch acts only through
their moments; a factor that differs between groups (1/std_g, 1/mean_g) changes direction.
"""
from __future__ import annotations

import torch

from .grpo import grpo_advantages

GRPO_EPS = 1e-8   # GRPO's (science §Update rules): added to the std
WHITEN_EPS = 1e-8  # verl's masked_whiten: added to the variance


def _group_weights(scores: torch.Tensor, probs: torch.Tensor | None) -> torch.Tensor:
    """[N, K] weight of each candidate in its group's statistics, summing to 1 per group."""
    if probs is None:
        return torch.full_like(scores, 1.0 / scores.shape[-1])
    return probs / probs.sum(-1, keepdim=True)


def group_mean_centred(scores: torch.Tensor, probs: torch.Tensor | None = None) -> torch.Tensor:
    """s_i - mean_g s (Dr. GRPO's advantage; TRL scale_rewards="none"; verl grpo with
    norm_adv_by_std_in_grpo=False)."""
    w = _group_weights(scores, probs)
    return scores - (w * scores).sum(-1, keepdim=True)


def _batch_mean(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Mean over the whole batch, each group weighing 1/N, its candidates by w."""
    return (w * x).sum(-1).mean()


def group_std(scores: torch.Tensor, probs: torch.Tensor | None = None) -> torch.Tensor:
    """GRPO's (s_i - mean_g s) / (std_g s + 1e-8), population std (science §Update rules; the harness's
    GRPO itself). TRL divides by the Bessel-corrected std + 1e-4, verl by torch.std
    (Bessel) + 1e-6."""
    return grpo_advantages(scores, probs)


def batch_std(scores: torch.Tensor, probs: torch.Tensor | None = None) -> torch.Tensor:
    """(s_i - mean_g s) / (std_batch s + 1e-8): group baseline, the std of the raw scores
    over the whole batch (TRL scale_rewards="batch", there Bessel-corrected + 1e-4)."""
    w = _group_weights(scores, probs)
    mean = _batch_mean(scores, w)
    std = _batch_mean((scores - mean).pow(2), w).sqrt()
    return group_mean_centred(scores, probs) / (std + GRPO_EPS)


def rloo(scores: torch.Tensor, probs: torch.Tensor | None = None) -> torch.Tensor:
    """Leave-one-out baseline (Ahmadian et al. 2024): s_i - mean_{j != i} s_j, which is
    K/(K-1) (s_i - mean_g s) (verl compute_rloo_outcome_advantage; TRL RLOOTrainer).
    Under population probabilities: s_i - E_p s (the infinite-sample limit)."""
    centred = group_mean_centred(scores, probs)
    if probs is not None:
        return centred
    K = scores.shape[-1]
    return centred * K / (K - 1)


def maxrl(scores: torch.Tensor, probs: torch.Tensor | None = None) -> torch.Tensor:
    """MaxRL (Tajwar et al. 2026, Algorithm 1): A_j = (r_j - mean) / mean, 0 for a group
    whose mean reward is 0. Defined there for binary rewards (the estimator then averages
    the successes' score functions, minus the group mean one); applied as written to
    the harness's scores in [0, 1]. The authors' code divides by (mean + 1e-6) and scales
    every A by 1/K, a constant. Under population probabilities (tabular_multi) the
    expected update is CE's, e_y - pi: the maximum-likelihood gradient."""
    w = _group_weights(scores, probs)
    mean = (w * scores).sum(-1, keepdim=True)
    safe = torch.where(mean > 0, mean, torch.ones_like(mean))
    return torch.where(mean > 0, (scores - mean) / safe, torch.zeros_like(scores))


def reinforce_pp_baseline(scores: torch.Tensor, probs: torch.Tensor | None = None) -> torch.Tensor:
    """REINFORCE++-baseline (Hu et al. 2025): the group mean as baseline, then the
    centred scores whitened over the whole batch,
    c_i = s_i - mean_g s,  A_i = (c_i - mean_batch c) / sqrt(var_batch c + 1e-8).
    verl (compute_reinforce_plus_plus_baseline_outcome_advantage, masked_whiten) whitens
    over the B*K*T tokens with a Bessel-corrected variance: with equal lengths the mean
    is the same and the variance differs by (M-1)/M, M = B*K*T. With equal group sizes
    mean_batch c is 0. Unlike batch_std, the divisor is the spread of c (within groups),
    not of the raw scores (which adds the spread between groups)."""
    w = _group_weights(scores, probs)
    c = group_mean_centred(scores, probs)
    c = c - _batch_mean(c, w)
    var = _batch_mean(c.pow(2), w)
    return c * torch.rsqrt(var + WHITEN_EPS)


ADVANTAGES = {
    "group_std": group_std,
    "group_mean": group_mean_centred,
    "batch_std": batch_std,
    "rloo": rloo,
    "maxrl": maxrl,
    "reinforce_pp_baseline": reinforce_pp_baseline,
}


def advantages(name: str, scores: torch.Tensor, probs: torch.Tensor | None = None) -> torch.Tensor:
    return ADVANTAGES[name](scores, probs)
