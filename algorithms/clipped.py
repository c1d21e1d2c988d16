"""The clipped surrogate of the LLM-style group methods (issue 21): one module whose
variants are parameters; conf/algo/ holds the papers' settings (dr_grpo, dapo, rloo,
gspo, maxrl, reinforce_pp_baseline).

    A_i    = advantage(s)_i                       algorithms/_advantages.py, broadcast over t
    d_it   = logp_theta_it - logp_old_it
    rho_it = exp(d_it)                            ratio="token"
    rho_it = s_i = exp(mean_t d_it)               ratio="sequence" (GSPO), the same for every t
    l_it   = -min(rho_it A_i, clip(rho_it, 1 - eps_low, 1 + eps_high) A_i)
             + beta (exp(-d_it) + d_it - 1)       beta = kl_coef: reverse KL to the rollout snapshot
    L      = aggregate(l)                         algorithms/_aggregate.py (`aggregation`)

No clamp on the log-ratio (PPO's and TRL's form). GSPO's s_i is the geometric mean of
the token ratios; with seq-mean-token-mean every step of a sequence carries the same
term, so L = -1/(NK) sum_i min(s_i A_i, clip(s_i) A_i), and grad s_i = s_i mean_t
grad logp_it: verl's GSPO-token form, sg(s_i) pi_it / sg(pi_it), when A is constant
over t, as here.

Relation to the harness's GRPO (SPEC 2, algorithms/grpo.py): ratio="token",
aggregation="seq-mean-token-mean", advantage="group_std", kl_coef=0.04 is GRPO as TRL
implements it, not the paper's: the paper's GRPO takes the ratio of the *summed*
log-probs exp(sum_t d_it) (clamped at +-20), *sums* over the K candidates (K times this
loss, a constant) and puts its KL on the sequence. All six presets keep GRPO's 4 epochs
and group size 8 (SPEC 2); their papers train on-policy or nearly (algo.epochs=1 is the
on-policy setting, where every ratio is 1 and the clip never binds).

DAPO's dynamic sampling (drop the groups whose rewards are all equal, all-0 or all-1,
and top the batch up with groups of new prompts, counting every rollout sampled) is a
rollout-side rule, so this loss only carries its knob: dynamic_sampling = N > 0 has the
runner draw up to N batches per episode to fill it with informative groups
(bench/dynamic.py). Without it a zero-variance group has A = 0 for every estimator and
only dilutes the mean; GPG's rescaling (algorithms/gpg.py) undoes that dilution instead.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from algorithms import register
from algorithms._advantages import ADVANTAGES, advantages
from algorithms._aggregate import AGGREGATIONS, aggregate
from algorithms._common import (check_choice, check_level, check_non_negative, check_positive,
                                mean_where)
from contract.batch import Batch, LossOut, mean_over_steps

RATIOS = ("token", "sequence")


def log_ratio(logp: torch.Tensor, logp_old: torch.Tensor, ratio: str,
              mask: torch.Tensor | None = None) -> torch.Tensor:
    """[N, K, T] log of rho_it: the token's own, or the sequence's mean (GSPO) on every t
    (over the mask's real steps, where there is one: padded steps have d = 0)."""
    d = logp - logp_old
    if ratio == "sequence":
        return mean_over_steps(d, mask, keepdim=True).expand_as(d)
    return d


def clipped_objective(rho: torch.Tensor, A: torch.Tensor, eps_low: float,
                      eps_high: float) -> torch.Tensor:
    """PPO's pessimistic term min(rho A, clip(rho, 1 - eps_low, 1 + eps_high) A)."""
    return torch.minimum(rho * A, rho.clamp(1 - eps_low, 1 + eps_high) * A)


def reverse_kl(d: torch.Tensor) -> torch.Tensor:
    """The k3 estimator exp(-d) + d - 1 of KL(pi_theta || pi_old) per step (SPEC 2's)."""
    return torch.exp(-d) + d - 1


def advantage_diagnostics(A: torch.Tensor, batch: Batch) -> dict[str, float]:
    """SPEC 6's GRPO weight proxies: mean |A| on successful and on failed candidates."""
    absA = A.abs()
    return {"absA_success": mean_where(absA, batch.success),
            "absA_fail": mean_where(absA, ~batch.success)}


@register("clipped")
@dataclass(frozen=True)
class ClippedSurrogate:
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
        kl = reverse_kl(logp - batch.logp_old)
        if self.kl_coef:
            loss = loss + self.kl_coef * aggregate(kl, self.aggregation, weights, mask, max_len)
        clipped = (rho < 1 - self.eps_low) | (rho > 1 + self.eps_high)
        return LossOut(loss, {"clip_frac": batch.step_mean(clipped.float()).detach(),
                              "kl": batch.step_mean(kl).detach(), **advantage_diagnostics(A, batch)})
