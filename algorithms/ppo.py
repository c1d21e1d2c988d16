"""PPO (science §Update rules): PG's advantage with a per-token clipped ratio, no KL, no clamp:
    r_t = exp(logp_t - logp_old_t)
    L = -mean over samples of sum_t min(r_t A_t, clip(r_t, 1-eps, 1+eps) A_t)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from . import register
from ._common import check_positive, single_sample_advantage
from ..contract.batch import AlgorithmOptions, Batch, LossOut


@register("ppo")
@dataclass(frozen=True)
class PPO(AlgorithmOptions):
    k: int = 1
    epochs: int = 4
    clip_eps: float = 0.2
    needs: ClassVar[str] = "sample"

    def __post_init__(self):
        check_positive("clip_eps", self.clip_eps, "the ratio is clipped to [1 - eps, 1 + eps]")

    def loss(self, batch: Batch, logp: torch.Tensor) -> LossOut:
        A = single_sample_advantage(batch)
        r = (logp - batch.logp_old).exp()
        surrogate = torch.minimum(r * A, r.clamp(1 - self.clip_eps, 1 + self.clip_eps) * A)
        clipped = (r - 1).abs() > self.clip_eps
        return LossOut(-(surrogate.sum(-1) * batch.candidate_weights()).sum(-1).mean(),
                       {"clip_frac": batch.step_mean(clipped.float()).detach()})
