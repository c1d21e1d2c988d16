"""The one structure tasks hand to algorithms (SPEC 1).

A batch is N contexts, each with a group of K candidates, each candidate a sequence of
T scored steps (T = 1 for one-step bandits). Every family in SPEC fits this shape:

- sequence groups (TPO, GRPO): N = B prompts, K = algo.k rollouts, T = H tokens;
- single samples (PG, PPO, DG): K = 1, with a task-supplied per-token advantage;
- token-level groups (TPO_token, GRPO_token): N = B*H prefix states, K next-token
  candidates, T = 1, candidate 0 the behaviour token;
- all-actions groups (MNIST TPO, tabular): K = the action set, with `weights` holding
  the sampled action's indicator, or exact-population probabilities where the task
  computes expectations instead of sampling.

What a task builds depends on what the algorithm consumes (`Request.needs`):

- "sample": one sampled candidate per context scored by the task's advantage
  (PG, PPO, DG);
- "sample_group": a group of sampled candidates whose rewards are standardised over the
  group (GRPO; on bandits the minibatch is the group, SPEC 3.2-3.3);
- "action_group": a group standing for the action set, compared by standardised
  scores (TPO, Group PG; sequence tasks sample K candidates since the set of answers
  cannot be enumerated, bandits enumerate it);
- "label": the supervised oracle's one-hot label over the action set (CE).

Algorithms never see the task's private tensors (`obs`): they get the current policy's
log-probs of the same candidates from the runner, shaped like `logp_old`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Batch:
    logp_old: torch.Tensor
    """[N, K, T] per-step log-probs of each candidate under the behaviour policy."""
    token_rewards: torch.Tensor
    """[N, K, T] per-step rewards from the task's scorer."""
    scores: torch.Tensor
    """[N, K] raw candidate scores s_i (sequence tasks: mean over tokens of the reward)."""
    success: torch.Tensor
    """[N, K] bool: candidate fully correct; drives all-fail and weight diagnostics."""
    mask: torch.Tensor | None = None
    """[N, K, T] bool, valid steps; None means all valid."""
    advantages: torch.Tensor | None = None
    """[N, K, T] task-supplied advantage (the task owns its baseline), or None."""
    weights: torch.Tensor | None = None
    """[N, K] weight of each candidate in the group's sums and statistics: the sampled
    action's indicator, or exact-population probabilities; None means 1."""
    obs: Any = None
    """Task-private payload (prompts, tokens) used to re-score log-probs."""

    @property
    def num_groups(self) -> int:
        return self.logp_old.shape[0]

    @property
    def group_size(self) -> int:
        return self.logp_old.shape[1]

    def seq_logp_old(self) -> torch.Tensor:
        """[N, K] candidate log-probs: the sum of its step log-probs (SPEC 1)."""
        return masked_sum(self.logp_old, self.mask)


def masked_sum(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Sum over the last (step) axis, ignoring masked-out steps."""
    if mask is None:
        return x.sum(-1)
    return torch.where(mask, x, torch.zeros_like(x)).sum(-1)


NEEDS = ("sample", "sample_group", "action_group", "label")
GROUP_NEEDS = ("sample_group", "action_group")


@dataclass(frozen=True)
class Request:
    """What the runner asks a task for on behalf of an algorithm."""

    name: str
    """the algorithm's config name, for messages"""
    k: int
    """group size for sampled groups (1 for single samples)"""
    level: str = "sequence"
    """"sequence", or "token": K next-token candidates per prefix state (SPEC 2)"""
    needs: str = "sample"
    """one of NEEDS"""
    k_explicit: bool = False
    """algo.k was set on the command line (tasks whose group is the action set refuse it)"""


@dataclass
class LossOut:
    """What an algorithm returns: the loss to minimise and per-episode diagnostics."""

    loss: torch.Tensor
    metrics: dict[str, torch.Tensor | float]


@dataclass(frozen=True)
class Rollout:
    """A task's answer to one episode: the batch plus what the paper reports about it."""

    batch: Batch
    error: float | torch.Tensor
    """SPEC 3.1 training error of this episode's behaviour rollouts, before the update
    (a 0-d tensor is fine: the runner reads it once the episode is done)."""
    reward_mean: float | torch.Tensor
    rollouts: int
    """sampled sequences (or actions) this episode, for the cumulative budget column."""
