"""Target Policy Optimization (SPEC 2).

Per group: standardise the scores into u, freeze the target
    q = softmax(log_softmax(logp_old) + u / eta)            (anchored)
    q = softmax(u / eta)                                     (anchor=False ablation)
and fit the policy's group distribution to it by cross-entropy
    L = -sum_i q_i log_softmax(logp_theta)_i,   averaged over groups,
whose gradient wrt the group logits is p_theta - q: it vanishes once the policy
matches the target, however many epochs run on the same batch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from algorithms import register
from algorithms._common import check_level, check_positive, mean_where, standardise
from contract.batch import Batch, LossOut


def tpo_target(logp_old: torch.Tensor, scores: torch.Tensor, eta: float = 1.0,
               anchor: bool = True) -> torch.Tensor:
    """q over each group (last axis), from candidate log-probs [N, K] and scores [N, K]."""
    u = standardise(scores)
    logits = u / eta
    if anchor:
        logits = logits + torch.log_softmax(logp_old, -1)
    return torch.softmax(logits, -1)


@register("tpo")
@dataclass(frozen=True)
class TPO:
    k: int = 8
    epochs: int = 4
    eta: float = 1.0
    anchor: bool = True
    level: str = "sequence"
    needs: ClassVar[str] = "action_group"

    def __post_init__(self):
        check_level(self.level)
        check_positive("eta", self.eta, "the target's temperature divides the scores")

    def loss(self, batch: Batch, logp: torch.Tensor) -> LossOut:
        # q depends only on rollout-time quantities, so it is the same frozen target
        # in every epoch on this batch.
        q = tpo_target(batch.seq_logp_old(), batch.scores, self.eta, self.anchor)
        logp_group = torch.log_softmax(logp.sum(-1), -1)
        loss = -(q * logp_group).sum(-1).mean()
        return LossOut(loss, {
            "q_success": mean_where(q, batch.success),
            "q_fail": mean_where(q, ~batch.success),
        })
