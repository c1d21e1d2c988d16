"""What the one-step bandit tasks share: what they refuse (science §MNIST bandit, §Tabular bandits), and the batch
of one sampled action per context."""
from __future__ import annotations

from typing import Any

import torch

from ..contract.batch import GROUP_NEEDS, Batch, Request


def check_bandit_request(task, req: Request) -> None:
    if req.level != "sequence":
        raise ValueError(f"{req.name} (algo.level={req.level}) has no meaning on task "
                         f"{task.name!r}, a one-step bandit")
    if req.k_explicit and req.needs in GROUP_NEEDS:
        raise ValueError(f"algo.k: on task {task.name!r} the group of {req.name} is fixed by "
                         "the task (the action set, or the sampled batch); do not set algo.k")


def sampled_batch(req: Request, logp: torch.Tensor, reward: torch.Tensor,
                  advantage: torch.Tensor, obs: Any) -> Batch:
    """B sampled actions, their log-probs, rewards and the task's advantages (all [B]):
    single samples for "sample", one group of all B for "sample_group" (on a bandit the
    minibatch is GRPO's group, science §MNIST bandit, §Tabular bandits)."""
    if req.needs == "sample":
        return Batch.single_samples(logp, reward, advantage, reward > 0, obs=obs)
    return Batch.sampled_group(logp[None], reward[None], (reward > 0)[None], obs=obs)
