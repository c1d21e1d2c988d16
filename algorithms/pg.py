"""REINFORCE (science §Update rules), and Group PG, its grouped ablation.

    L = -mean over groups of sum_i sum_t sg(A_it) logp_it

advantage="task": one sample per context (k = 1) with the task's advantage A_t.
advantage="group": Group PG -- TPO's candidates and standardised scores, A_i = u_i / eta
on every token of candidate i, REINFORCE without a target.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from . import register
from ._common import check_positive, reinforce_sum, single_sample_advantage, standardise
from ..contract.batch import AlgorithmOptions, Batch, LossOut

ADVANTAGES = ("task", "group")


@register("pg")
@dataclass(frozen=True)
class PG(AlgorithmOptions):
    k: int = 1
    epochs: int = 4
    advantage: str = "task"
    eta: float = 1.0

    def __post_init__(self):
        # Checked for advantage="task" too: a sweep must not carry a nonsense value
        # that only bites once someone switches the advantage.
        check_positive("eta", self.eta, "Group PG's temperature divides the scores")
        if self.advantage not in ADVANTAGES:
            raise ValueError(f"algo.advantage={self.advantage!r} is not one of {', '.join(ADVANTAGES)}")

    @property
    def needs(self) -> str:
        return "action_group" if self.advantage == "group" else "sample"

    def loss(self, batch: Batch, logp: torch.Tensor) -> LossOut:
        if self.advantage == "group":
            A = (standardise(batch.scores) / self.eta).unsqueeze(-1).expand_as(logp)
        else:
            A = single_sample_advantage(batch)
        return LossOut(reinforce_sum(A, logp, batch), {})
