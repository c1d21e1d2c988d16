"""GRPO (science §Update rules): group-relative advantages, sequence-level clipped surrogate and a
reverse-KL penalty to the rollout snapshot.

    A_i = (s_i - mean(s)) / (std(s) + 1e-8)                  (population std, no floor)
    d_i = clamp(logp_theta_i - logp_old_i, -20, 20),  r_i = exp(d_i)
    term_i = min(r_i A_i, clip(r_i, 1-eps, 1+eps) A_i) - beta (exp(-d_i) + d_i - 1)
    L = -mean over groups of sum_i term_i

kl_coef = 0 is GRPO-no-KL; mask_zero_variance drops groups whose score std <= 1e-6
(surrogate and KL) and divides by the number of informative groups (at least 1).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from . import register
from ._common import (STD_FLOOR, check_level, check_non_negative, check_positive,
                                clamp_log_ratio, mean_where)
from ..contract.batch import AlgorithmOptions, Batch, LossOut


def group_stats(scores: torch.Tensor, probs: torch.Tensor | None = None):
    """Mean and population std over each group; with exact-population probabilities
    (batch.probs, tabular_multi) the group is the action set under them, which turns the
    advantage into science §Tabular bandits's sqrt(p / (1 - p)) weighting."""
    if probs is None:
        return scores.mean(-1, keepdim=True), scores.std(-1, correction=0, keepdim=True)
    w = probs / probs.sum(-1, keepdim=True)
    mean = (w * scores).sum(-1, keepdim=True)
    return mean, (w * (scores - mean).pow(2)).sum(-1, keepdim=True).sqrt()


def grpo_advantages(scores: torch.Tensor, probs: torch.Tensor | None = None) -> torch.Tensor:
    mean, std = group_stats(scores, probs)
    return (scores - mean) / (std + 1e-8)


@register("grpo")
@dataclass(frozen=True)
class GRPO(AlgorithmOptions):
    k: int = 8
    epochs: int = 4
    clip_eps: float = 0.2
    kl_coef: float = 0.04
    mask_zero_variance: bool = False
    level: str = "sequence"
    needs: ClassVar[str] = "sample_group"

    def __post_init__(self):
        check_level(self.level)
        check_positive("clip_eps", self.clip_eps, "the ratio is clipped to [1 - eps, 1 + eps]")
        check_non_negative("kl_coef", self.kl_coef, "a negative KL coefficient rewards "
                           "moving away from the rollout policy; 0 is GRPO without KL")

    def loss(self, batch: Batch, logp: torch.Tensor) -> LossOut:
        A = grpo_advantages(batch.scores, batch.probs)
        d = clamp_log_ratio(logp.sum(-1) - batch.seq_logp_old())
        r = d.exp()
        surrogate = torch.minimum(r * A, r.clamp(1 - self.clip_eps, 1 + self.clip_eps) * A)
        kl = torch.exp(-d) + d - 1
        per_group = ((surrogate - self.kl_coef * kl) * batch.candidate_weights()).sum(-1)
        if self.mask_zero_variance:
            informative = (group_stats(batch.scores, batch.probs)[1][..., 0] > STD_FLOOR).to(per_group.dtype)
            loss = -(per_group * informative).sum() / informative.sum().clamp_min(1)
        else:
            loss = -per_group.mean()
        absA = A.abs()
        return LossOut(loss, {
            "clip_frac": ((r - 1).abs() > self.clip_eps).float().mean().detach(),
            "kl": kl.mean().detach(),
            "absA_success": mean_where(absA, batch.success),
            "absA_fail": mean_where(absA, ~batch.success),
        })
