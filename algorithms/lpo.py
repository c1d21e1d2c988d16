"""Listwise Policy Optimization (Qu et al. 2026, arXiv 2605.06139): an explicit target on
the simplex of a prompt's K sampled responses, and an exact KL projection onto it.

    s_theta,k = log pi_theta(y_k|x) - log pi_b(y_k|x),   P_theta = softmax(s_theta)   (Eq. 3-4)
    w*_k = softmax(phi)_k,   phi_k = R_k / tau + s_t,k,   s_t = 0 (pi_t = pi_b)      (Eq. 8)
    forward (Eq. 10)  L = KL(w* || P_theta),   dL/ds_k = P_theta,k - w*_k
    reverse (Eq. 11)  L = KL(P_theta || w*),   dL/ds_k = P_theta,k (d_k - dbar),
                      d_k = s_theta,k - phi_k, dbar = sum_j P_theta,j d_j

averaged over prompts; log pi(y|x) sums the response's token log-probs. tau is sigma_G
("std"), mu_G ("mean") or 1 ("one"); R_k / tau is computed as (R_k - mu_G) / tau, and a
group with tau <= 1e-6 keeps R_k - mu_G unscaled. clip_eps > 0 (the paper's experiments):
a token whose log-ratio leaves [log(1 - eps), log(1 + eps)] passes no gradient. Weighted
candidates (batch.probs) enter both distributions as log weights, mu_G and sigma_G under p.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from . import register
from ._common import STD_FLOOR, check_level, mean_where
from ..contract.batch import AlgorithmOptions, Batch, LossOut

PROJECTIONS = ("forward", "reverse")
TAUS = ("std", "mean", "one")


def group_mean_std(scores: torch.Tensor, probs: torch.Tensor | None = None):
    """mu_G and the population sigma_G over each group (last axis), under probs if given."""
    if probs is None:
        mean = scores.mean(-1, keepdim=True)
        return mean, (scores - mean).pow(2).mean(-1, keepdim=True).sqrt()
    w = probs / probs.sum(-1, keepdim=True)
    mean = (w * scores).sum(-1, keepdim=True)
    return mean, (w * (scores - mean).pow(2)).sum(-1, keepdim=True).sqrt()


def lpo_phi(scores: torch.Tensor, tau: str = "std", probs: torch.Tensor | None = None):
    """phi = R / tau with s_t = 0, as (R - mu_G) / tau; tau <= 1e-6 keeps R - mu_G."""
    mean, std = group_mean_std(scores, probs)
    centred = scores - mean
    if tau == "one":
        return centred
    t = std if tau == "std" else mean
    return torch.where(t > STD_FLOOR, centred / t.clamp_min(STD_FLOOR), centred)


def log_base(batch: Batch) -> torch.Tensor | float:
    """log of each candidate's weight in the listwise distributions (0 when all weigh 1)."""
    w = batch.candidate_weights()
    return 0.0 if isinstance(w, float) else torch.log(w.clamp_min(torch.finfo(w.dtype).tiny))


@register("lpo")
@dataclass(frozen=True)
class LPO(AlgorithmOptions):
    k: int = 8
    epochs: int = 4
    projection: str = "forward"
    tau: str = "std"
    clip_eps: float = 0.0
    level: str = "sequence"
    needs: ClassVar[str] = "sample_group"

    def __post_init__(self):
        check_level(self.level)
        if self.projection not in PROJECTIONS:
            raise ValueError(f"algo.projection={self.projection!r} is not one of "
                             f"{', '.join(PROJECTIONS)} (KL(w* || P_theta) or KL(P_theta || w*))")
        if self.tau not in TAUS:
            raise ValueError(f"algo.tau={self.tau!r} is not one of {', '.join(TAUS)} "
                             "(the target's temperature: sigma_G, mu_G or 1)")
        if not (math.isfinite(self.clip_eps) and 0 <= self.clip_eps < 1):
            raise ValueError(f"algo.clip_eps={self.clip_eps!r} must be in [0, 1) (token "
                             "log-ratios outside [log(1 - eps), log(1 + eps)] pass no "
                             "gradient; 0 clips nothing)")

    def loss(self, batch: Batch, logp: torch.Tensor) -> LossOut:
        base = log_base(batch)
        # w* depends only on rollout-time quantities: the same frozen target every epoch.
        log_w = torch.log_softmax(lpo_phi(batch.scores, self.tau, batch.probs) + base, -1)
        w = log_w.exp()
        d = logp - batch.logp_old  # per-token log-ratios; their sum over steps is s_theta
        metrics = {"q_success": mean_where(w, batch.success), "q_fail": mean_where(w, ~batch.success)}
        if self.clip_eps > 0:
            inside = (d >= math.log(1 - self.clip_eps)) & (d <= math.log(1 + self.clip_eps))
            d = torch.where(inside, d, d.detach())
            metrics["clip_frac"] = 1.0 - batch.step_mean(inside.float()).detach()
        log_p = torch.log_softmax(d.sum(-1) + base, -1)
        if self.projection == "forward":
            per_group = (w * (log_w - log_p)).sum(-1)
        else:
            per_group = (log_p.exp() * (log_p - log_w)).sum(-1)
        return LossOut(per_group.mean(), metrics)
