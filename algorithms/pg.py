"""REINFORCE (SPEC 2): one sample per context, the task's advantage A_t,
    L = -mean over samples of sum_t sg(A_t) logp_t.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from algorithms import register
from algorithms._common import reinforce_sum, single_sample_advantage
from bench.batch import Batch, LossOut


@register("pg")
@dataclass(frozen=True)
class PG:
    k: int = 1
    epochs: int = 4
    level: str = "sequence"

    def loss(self, batch: Batch, logp: torch.Tensor) -> LossOut:
        return LossOut(reinforce_sum(single_sample_advantage(batch), logp, batch), {})
