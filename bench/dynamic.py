"""DAPO's dynamic sampling (arXiv 2503.14476, section 3.2): a group whose candidates all
score alike (all correct, all wrong) has zero advantage and no gradient, so the batch is
topped up with groups of fresh prompts until it holds B informative groups again.

    keep the informative groups of the episode's batch (score std > ZERO_VAR_STD)
    while fewer than B and fewer than `max_batches` batches drawn:
        draw a batch of B fresh prompts; keep its informative groups
    train on the first B kept, in the order drawn

Every drawn rollout counts in `rollouts` (the budget column says what it cost), and the
error and group diagnostics stay those of the episode's first batch, so the curve is
comparable with every other method's. If no group is informative after `max_batches`
batches, the first batch is trained on as it is (its advantages are 0: no gradient).
"""
from __future__ import annotations

import dataclasses

import torch

from ..contract.batch import Batch, Rollout
from ..contract.schema import ZERO_VAR_STD



def informative(batch: Batch) -> torch.Tensor:
    """[N] bool: groups whose scores vary."""
    return batch.scores.std(-1, correction=0) > ZERO_VAR_STD


def top_up(first: Rollout, draw, max_batches: int) -> tuple[Rollout, dict[str, float]]:
    """The episode's rollout with its batch refilled with informative groups; `draw()`
    returns a fresh rollout of the same task and request. Returns it and the episode's
    dynamic-sampling diagnostics."""
    target = first.batch.num_groups
    kept, n_kept, drawn, rollouts, ro = [], 0, 1, first.rollouts, first
    while True:
        keep = informative(ro.batch).nonzero().squeeze(-1)
        if len(keep):
            kept.append(ro.batch.take(keep))
            n_kept += len(keep)
        if n_kept >= target or drawn >= max_batches:
            break
        ro = draw()
        drawn += 1
        rollouts += ro.rollouts
    if n_kept:
        batch = Batch.concat(kept)
        batch = batch.take(torch.arange(min(target, n_kept), device=batch.scores.device))
    else:
        batch = first.batch
    return dataclasses.replace(first, batch=batch, rollouts=rollouts), {
        "dyn_batches": float(drawn), "dyn_groups": float(batch.num_groups if n_kept else 0)}
