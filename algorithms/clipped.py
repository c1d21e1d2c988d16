"""The clipped surrogate of the LLM-style group methods, variants as parameters; conf/algo/
holds the papers' settings (dr_grpo, dapo, rloo, gspo, maxrl, reinforce_pp_baseline).

    A_i    = advantage(s)_i                       algorithms/_advantages.py, broadcast over t
    d_it   = clamp(logp_theta_it - logp_old_it, -20, 20)
    rho_it = exp(d_it)                            ratio="token"
    rho_it = s_i = exp(clamp(mean_t d_it, -20, 20))   ratio="sequence" (GSPO), the same for every t
    l_it   = -min(rho_it A_i, clip(rho_it, 1 - eps_low, 1 + eps_high) A_i)
             + beta (exp(-d_it) + d_it - 1)       beta = kl_coef: reverse KL to the rollout snapshot
    L      = aggregate(l)                         algorithms/_aggregate.py (`aggregation`)

The log-ratio is clamped to [-20, 20] before exp, as the published clipped losses do (inside
that range the clamp changes nothing). With ratio="token", seq-mean-token-mean, group_std
and kl_coef=0.04 this is TRL's GRPO, not the paper's (algorithms/grpo.py). DAPO's dynamic
sampling is rollout-side (bench/dynamic.py); this loss only carries its knob.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from . import register
from ._advantages import ADVANTAGES, advantages
from ._aggregate import AGGREGATIONS, aggregate
from ._common import (check_choice, check_level, check_non_negative, check_positive,
                                clamp_log_ratio, mean_where)
from ..contract.batch import AlgorithmOptions, Batch, LossOut, mean_over_steps

RATIOS = ("token", "sequence")


def log_ratio(logp: torch.Tensor, logp_old: torch.Tensor, ratio: str,
              mask: torch.Tensor | None = None) -> torch.Tensor:
    """[N, K, T] log of rho_it, clamped: the token's own, or the sequence's mean (GSPO) on
    every t (over the mask's real steps, where there is one: padded steps have d = 0)."""
    d = logp - logp_old
    if ratio == "sequence":
        return clamp_log_ratio(mean_over_steps(d, mask, keepdim=True)).expand_as(d)
    return clamp_log_ratio(d)


def clipped_objective(rho: torch.Tensor, A: torch.Tensor, eps_low: float,
                      eps_high: float) -> torch.Tensor:
    """PPO's pessimistic term min(rho A, clip(rho, 1 - eps_low, 1 + eps_high) A)."""
    return torch.minimum(rho * A, rho.clamp(1 - eps_low, 1 + eps_high) * A)


def reverse_kl(d: torch.Tensor) -> torch.Tensor:
    """The k3 estimator exp(-d) + d - 1 of KL(pi_theta || pi_old) per step (science §Update rules's)."""
    return torch.exp(-d) + d - 1


def advantage_diagnostics(A: torch.Tensor, batch: Batch) -> dict[str, float]:
    """science §Measurement's GRPO weight proxies: mean |A| on successful and on failed candidates."""
    absA = A.abs()
    return {"absA_success": mean_where(absA, batch.success),
            "absA_fail": mean_where(absA, ~batch.success)}


@register("clipped")
@dataclass(frozen=True)
class ClippedSurrogate(AlgorithmOptions):
    k: int = 8
    epochs: int = 4
    advantage: str = "group_std"
    aggregation: str = "seq-mean-token-mean"
    ratio: str = "token"
    eps_low: float = 0.2
    eps_high: float = 0.2
    kl_coef: float = 0.0
    max_len: int = 0
    """`constant` aggregation's T_max; 0: the batch's T"""
    dynamic_sampling: int = 0
    """DAPO's dynamic sampling: at most this many batches drawn per episode to fill it
    with groups whose scores vary (0: off)"""
    level: str = "sequence"
    needs: ClassVar[str] = "sample_group"

    def __post_init__(self):
        check_level(self.level)
        check_choice("advantage", self.advantage, tuple(ADVANTAGES))
        check_choice("aggregation", self.aggregation, AGGREGATIONS)
        check_choice("ratio", self.ratio, RATIOS)
        check_positive("eps_low", self.eps_low, "the ratio is clipped below at 1 - eps_low")
        check_positive("eps_high", self.eps_high, "the ratio is clipped above at 1 + eps_high")
        check_non_negative("kl_coef", self.kl_coef, "a negative KL coefficient rewards moving "
                           "away from the rollout policy")
        if isinstance(self.dynamic_sampling, bool) or not isinstance(self.dynamic_sampling, int) \
                or self.dynamic_sampling < 0:
            raise ValueError(f"algo.dynamic_sampling={self.dynamic_sampling!r} must be an integer "
                             ">= 0 (the most batches drawn per episode; 0: off)")
        if isinstance(self.max_len, bool) or not isinstance(self.max_len, int) or self.max_len < 0:
            raise ValueError(f"algo.max_len={self.max_len!r} must be an integer >= 0 "
                             "(0: the batch's sequence length)")

    def loss(self, batch: Batch, logp: torch.Tensor) -> LossOut:
        A = advantages(self.advantage, batch.scores, batch.probs)
        d = log_ratio(logp, batch.logp_old, self.ratio, batch.mask)
        rho = d.exp()
        surrogate = clipped_objective(rho, A.unsqueeze(-1), self.eps_low, self.eps_high)
        weights, max_len, mask = batch.candidate_weights(), self.max_len or None, batch.mask
        loss = -aggregate(surrogate, self.aggregation, weights, mask, max_len)
        kl = reverse_kl(clamp_log_ratio(logp - batch.logp_old))
        if self.kl_coef:
            loss = loss + self.kl_coef * aggregate(kl, self.aggregation, weights, mask, max_len)
        clipped = (rho < 1 - self.eps_low) | (rho > 1 + self.eps_high)
        return LossOut(loss, {"clip_frac": batch.step_mean(clipped.float()).detach(),
                              "kl": batch.step_mean(kl).detach(), **advantage_diagnostics(A, batch)})
