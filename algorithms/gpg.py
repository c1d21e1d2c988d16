"""GPG, Group Policy Gradient (Chu et al., arXiv 2504.02546): the policy gradient itself,
no ratio, no clip, no KL, with the batch's dilution by zero-variance groups undone.

    A_i   = advantage(s)_i                 group_mean: s_i - mean_g s (the paper's F_norm = 1)
    alpha = B / (B - M)                    rescale=True: B candidates in the batch, M of them in
          = N / #{groups: std_g s > 1e-6}  zero-variance groups (A = 0 there); N if none
    l_it  = -A_i logp_theta_it
    L     = alpha * aggregate(l)           token-mean (the paper's 1 / sum_i |o_i|)

With token-mean, alpha * L is the token mean over the informative groups alone (the
authors' trainer divides by n_valid / n_samples, i.e. alpha). alpha is one number per
batch, so under the normalised optimisers it acts only through their moments. The
paper's beta_th resampling is not implemented; it trains on-policy (algo.epochs=1), the
preset keeps PG's 4 epochs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from . import register
from ._advantages import ADVANTAGES, advantages
from ._aggregate import AGGREGATIONS, aggregate
from ._common import STD_FLOOR, check_choice, check_level
from .clipped import advantage_diagnostics
from .grpo import group_stats
from ..contract.batch import AlgorithmOptions, Batch, LossOut


def gpg_alpha(scores: torch.Tensor, probs: torch.Tensor | None = None) -> torch.Tensor:
    """B / (B - M) with equal groups: groups over informative groups (at least 1)."""
    informative = (group_stats(scores, probs)[1][..., 0] > STD_FLOOR).sum()
    return scores.shape[0] / informative.clamp_min(1).to(scores.dtype)


@register("gpg")
@dataclass(frozen=True)
class GPG(AlgorithmOptions):
    k: int = 8
    epochs: int = 4
    advantage: str = "group_mean"
    aggregation: str = "token-mean"
    rescale: bool = True
    level: str = "sequence"
    needs: ClassVar[str] = "sample_group"

    def __post_init__(self):
        check_level(self.level)
        check_choice("advantage", self.advantage, tuple(ADVANTAGES))
        check_choice("aggregation", self.aggregation, AGGREGATIONS)

    def loss(self, batch: Batch, logp: torch.Tensor) -> LossOut:
        A = advantages(self.advantage, batch.scores, batch.probs)
        per_step = -A.unsqueeze(-1) * logp
        loss = aggregate(per_step, self.aggregation, batch.candidate_weights(), batch.mask)
        if self.rescale:
            loss = gpg_alpha(batch.scores, batch.probs) * loss
        return LossOut(loss, advantage_diagnostics(A, batch))
