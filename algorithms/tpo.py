"""Target Policy Optimization.

Per group: standardise the scores into u, freeze the target
    q = softmax(log_softmax(logp_old) + u / eta)            (anchored)
    q = softmax(u / eta)                                     (anchor=False ablation)
and fit the policy's group distribution to it by cross-entropy
    L = -sum_i q_i log_softmax(logp_theta)_i,   averaged over groups,
whose gradient wrt the group logits is p_theta - q: it vanishes once the policy
matches the target, however many epochs run on the same batch.

A candidate's log-prob, in logp_old and logp_theta alike, is
    logp_i = sum_t logp_it        (logp_norm="sum": the paper's)
    logp_i = mean_t logp_it       (logp_norm="mean": length-normalised, a different method)
one and the same for one-step candidates; with a completion mask (the LLM family) both run
over the candidate's real tokens.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch

from . import register
from ._common import check_level, check_positive, mean_where, standardise
from ..contract.batch import AlgorithmOptions, Batch, LossOut, mean_over_steps
from ..contract.schema import IF_SET

LOGP_NORMS = ("sum", "mean")


def candidate_logp(logp: torch.Tensor, norm: str = "sum",
                   mask: torch.Tensor | None = None) -> torch.Tensor:
    """[N, K] candidate log-probs from per-step ones [N, K, T]: summed or length-normalised
    (over the mask's real steps, where there is one; padded steps hold 0)."""
    return logp.sum(-1) if norm == "sum" else mean_over_steps(logp, mask)


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
class TPO(AlgorithmOptions):
    k: int = 8
    epochs: int = 4
    eta: float = 1.0
    anchor: bool = True
    level: str = "sequence"
    logp_norm: str = field(default="sum", metadata=IF_SET)  # hashed only when set: runs without it keep their hash
    needs: ClassVar[str] = "action_group"

    def __post_init__(self):
        check_level(self.level)
        check_positive("eta", self.eta, "the target's temperature divides the scores")
        if self.logp_norm not in LOGP_NORMS:
            raise ValueError(f"algo.logp_norm={self.logp_norm!r} is not one of "
                             f"{', '.join(LOGP_NORMS)} (a candidate's log-prob: the sum of its "
                             "step log-probs, or their mean)")

    def loss(self, batch: Batch, logp: torch.Tensor) -> LossOut:
        # q depends only on rollout-time quantities, so it is the same frozen target
        # in every epoch on this batch.
        q = tpo_target(candidate_logp(batch.logp_old, self.logp_norm, batch.mask), batch.scores,
                       self.eta, self.anchor)
        logp_group = torch.log_softmax(candidate_logp(logp, self.logp_norm, batch.mask), -1)
        loss = -(q * logp_group).sum(-1).mean()
        return LossOut(loss, {
            "q_success": mean_where(q, batch.success),
            "q_fail": mean_where(q, ~batch.success),
        })
