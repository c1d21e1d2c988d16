"""Delightful Policy Gradient (science §Update rules; Osband 2026): each REINFORCE term is gated by
how surprising a good (or bad) outcome was,
    w_t = sigmoid(A_t * surprisal_t / eta),   surprisal_t = -logp_t of the sampled token
    L = -mean over samples of sum_t sg(w_t A_t) logp_t.
One gradient epoch per batch by default: with more it degrades (paper appendix E).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import ClassVar

import torch

from . import register
from ._common import check_positive, reinforce_sum, single_sample_advantage
from ..contract.batch import AlgorithmOptions, Batch, LossOut

SURPRISALS = ("behaviour", "current")


def dg_gate(advantage: torch.Tensor, surprisal: torch.Tensor, eta: float = 1.0) -> torch.Tensor:
    return torch.sigmoid(advantage * surprisal / eta)


@register("dg")
@dataclass(frozen=True)
class DG(AlgorithmOptions):
    k: int = 1
    epochs: int = 1
    eta: float = 1.0
    surprisal: str = "behaviour"
    """Whose -logp gates: the acting policy's ("behaviour", what a stale actor supplies)
    or the policy being trained ("current", recomputed each epoch as the reference does
    in its multi-epoch ablation). In the default single on-policy epoch they agree."""
    needs: ClassVar[str] = "sample"

    def __post_init__(self):
        check_positive("eta", self.eta, "the gate's temperature divides advantage x surprisal")
        if self.surprisal not in SURPRISALS:
            raise ValueError(f"algo.surprisal={self.surprisal!r} is not one of {', '.join(SURPRISALS)}")
        if self.epochs > 1:
            warnings.warn(f"dg with algo.epochs={self.epochs}: DG has no trust region and "
                          "degrades with more than one epoch (paper appendix E)", stacklevel=1)

    def loss(self, batch: Batch, logp: torch.Tensor) -> LossOut:
        A = single_sample_advantage(batch)
        surprisal = -(batch.logp_old if self.surprisal == "behaviour" else logp.detach())
        w = dg_gate(A, surprisal, self.eta)
        return LossOut(reinforce_sum(w * A, logp, batch), {"gate_mean": batch.step_mean(w).detach()})
