"""CISPO (MiniMax-M1, arXiv 2506.13585): clip the importance weight, not the update; every
token keeps its gradient, the weight is a stop-gradient factor.

    A_i    = advantage(s)_i                         group_std (the paper's group-relative A)
    d_it   = clamp(logp_theta_it - logp_old_it, -20, 20),  rho_it = exp(d_it)
    w_it   = sg(clip(rho_it, 1 - eps_low, 1 + eps_high))
    l_it   = -w_it A_i logp_theta_it + beta (exp(-d_it) + d_it - 1)
    L      = aggregate(l)                           token-mean (the paper's 1 / sum_i |o_i|)

The paper sets no lower bound: eps_low = 1 (the bound is 0); eps_high = 0.2 as verl's
CISPO example (TRL caps the weight at 5.0: eps_high = 4.0 here). Where rho = 1 (the first
epoch) the gradient is REINFORCE's, -A grad logp; the loss value is -mean(w A logp).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from . import register
from ._advantages import ADVANTAGES, advantages
from ._aggregate import AGGREGATIONS, aggregate
from ._common import (check_choice, check_level, check_non_negative, check_positive,
                                clamp_log_ratio)
from .clipped import advantage_diagnostics, reverse_kl
from ..contract.batch import AlgorithmOptions, Batch, LossOut


@register("cispo")
@dataclass(frozen=True)
class CISPO(AlgorithmOptions):
    k: int = 8
    epochs: int = 4
    advantage: str = "group_std"
    aggregation: str = "token-mean"
    eps_low: float = 1.0
    eps_high: float = 0.2
    kl_coef: float = 0.0
    level: str = "sequence"
    needs: ClassVar[str] = "sample_group"

    def __post_init__(self):
        check_level(self.level)
        check_choice("advantage", self.advantage, tuple(ADVANTAGES))
        check_choice("aggregation", self.aggregation, AGGREGATIONS)
        check_positive("eps_low", self.eps_low, "the weight is clipped below at 1 - eps_low "
                       "(1 or more: no lower clip)")
        check_positive("eps_high", self.eps_high, "the weight is clipped above at 1 + eps_high")
        check_non_negative("kl_coef", self.kl_coef, "a negative KL coefficient rewards moving "
                           "away from the rollout policy")

    def loss(self, batch: Batch, logp: torch.Tensor) -> LossOut:
        A = advantages(self.advantage, batch.scores, batch.probs)
        d = clamp_log_ratio(logp - batch.logp_old)
        rho = d.detach().exp()
        w = rho.clamp(1 - self.eps_low, 1 + self.eps_high)
        per_step = -w * A.unsqueeze(-1) * logp
        weights = batch.candidate_weights()
        loss = aggregate(per_step, self.aggregation, weights, batch.mask)
        kl = reverse_kl(d)
        if self.kl_coef:
            loss = loss + self.kl_coef * aggregate(kl, self.aggregation, weights, batch.mask)
        return LossOut(loss, {"clip_frac": batch.step_mean((w != rho).float()).detach(),
                              "kl": batch.step_mean(kl).detach(), **advantage_diagnostics(A, batch)})
