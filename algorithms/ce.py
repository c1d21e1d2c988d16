"""Supervised cross-entropy to the correct action (SPEC 2 "CE"): the oracle a bandit
learner is measured against, on tasks whose label the task may reveal.

    L = -mean over contexts of sum_a y_a log_softmax(logp)_a,   y = the label one-hot
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from algorithms import register
from contract.batch import Batch, LossOut, masked_sum


@register("ce")
@dataclass(frozen=True)
class CE:
    k: int = 1
    epochs: int = 1
    needs: ClassVar[str] = "label"

    def loss(self, batch: Batch, logp: torch.Tensor) -> LossOut:
        y = batch.scores / batch.scores.sum(-1, keepdim=True)
        return LossOut(-(y * torch.log_softmax(masked_sum(logp, batch.mask), -1)).sum(-1).mean(), {})
