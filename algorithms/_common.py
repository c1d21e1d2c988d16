"""Pieces several algorithms share, each tied to the formula it implements (docs/science.md)."""
from __future__ import annotations

import math

import torch

from ..contract.batch import Batch

STD_FLOOR = 1e-6  # science §Groups and scores: below this the centred scores are returned unscaled
LEVELS = ("sequence", "token")


def check_level(level: str) -> None:
    """Grouped methods group whole sequences, or (level="token", dense rewards only)
    K next-token candidates at every prefix state of one behaviour trajectory (science §Update rules)."""
    if level not in LEVELS:
        raise ValueError(f"algo.level={level!r} is not one of {', '.join(LEVELS)}")


def check_positive(key: str, value: float, why: str) -> None:
    """A step size, temperature or trust region: zero or below, NaN or inf gives a run that
    completes with meaningless numbers, so it is refused up front (`why` says what it does)."""
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"algo.{key}={value!r} must be a positive finite number ({why})")


def check_non_negative(key: str, value: float, why: str) -> None:
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"algo.{key}={value!r} must be a finite number >= 0 ({why})")


def standardise(s: torch.Tensor) -> torch.Tensor:
    """u_i = (s_i - mean) / std over the group (last axis), population std (science §Groups and scores).

    A (near-)constant group keeps its centred scores unscaled: exactly 0 when all
    equal, so TPO's target falls back to p_old there.
    """
    centred = s - s.mean(-1, keepdim=True)
    std = centred.pow(2).mean(-1, keepdim=True).sqrt()
    return torch.where(std > STD_FLOOR, centred / std.clamp_min(STD_FLOOR), centred)


# The bound on a log-ratio log pi_theta / pi_old before it is exponentiated (science §Update rules's
# GRPO; verl's clipped losses): exp(20) is large but finite, a ratio never overflows.
LOG_RATIO_CLAMP = 20.0


def clamp_log_ratio(d: torch.Tensor) -> torch.Tensor:
    """d clamped to [-20, 20] (the identity, bit for bit, on every value inside)."""
    return d.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)


def mean_where(x: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
    """Mean of x over the selected entries; NaN when none (a diagnostic, not a loss).
    Left on the device, without a data-dependent shape: no host read, and vmappable."""
    n = where.sum()
    return torch.where(n > 0, (x.detach() * where).sum() / n, math.nan)


def single_sample_advantage(batch: Batch) -> torch.Tensor:
    """The task's per-step advantage for single-sample methods (PG, PPO, DG).

    Tasks own baselines (science §Update rules batch mean on sequences, science §MNIST bandit label-free on MNIST,
    science §Tabular bandits constant 0.5 on tabular), so a batch without one is a task bug.
    """
    if batch.advantages is None:
        raise ValueError("this algorithm needs batch.advantages; the task supplied none")
    return batch.advantages


def reinforce_sum(weight: torch.Tensor, logp: torch.Tensor, batch: Batch) -> torch.Tensor:
    """-mean over groups of sum over the group's candidates and steps of
    sg(weight) * logp (science §Update rules, PG and DG form; with k = 1 a mean over samples), each
    candidate's term weighted by batch.candidate_weights() (the sampled indicator, or
    the population probability)."""
    per_candidate = (weight.detach() * logp).sum(-1) * batch.candidate_weights()
    return -per_candidate.sum(-1).mean()


def check_choice(key: str, value: str, choices) -> None:
    """A string knob with a fixed set of values (an advantage estimator, an aggregation)."""
    if value not in choices:
        raise ValueError(f"algo.{key}={value!r} is not one of {', '.join(choices)}")
