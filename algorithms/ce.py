"""Supervised cross-entropy to the correct action (science §Update rules "CE"): the oracle a bandit
learner is measured against, on tasks whose label the task may reveal.

    L = -mean over contexts of sum_a y_a log_softmax(logp)_a,   y = onehot(batch.label)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from . import register
from ..contract.batch import AlgorithmOptions, Batch, LossOut


@register("ce")
@dataclass(frozen=True)
class CE(AlgorithmOptions):
    k: int = 1
    epochs: int = 1
    needs: ClassVar[str] = "label"

    def loss(self, batch: Batch, logp: torch.Tensor) -> LossOut:
        if batch.label is None:
            raise ValueError("ce needs batch.label (a labelled batch); the task supplied none")
        y = F.one_hot(batch.label, batch.group_size).to(logp.dtype)
        return LossOut(-(y * torch.log_softmax(logp.sum(-1), -1)).sum(-1).mean(), {})
