"""Tabular bandits: the logits are the parameters, no network. Each step is
`logits += alpha g / ||g||` (optim=normalised_step), g minus the loss's gradient; the
correct action is 0.

Single context (K = 100 actions, B = 100 samples, baseline 0.5): "sample" (PG, DG) B
single samples with A = r - 0.5; "sample_group" (GRPO) the B samples standardised;
"action_group" (TPO) one group over the K actions scored by the mean of A(a) onehot(a),
so the step is along q - pi; "label" (CE). Error 1 - pi(correct) before the step;
misalignment 1 - cos(g, pi_y (e_y - pi)).

Multi context (N = 100, K = 10, logits N(0, 1), no sampling): exact population
directions, PG p (e_y - pi), DG p sigmoid(-log p / eta) (e_y - pi), GRPO
sqrt(p / (1-p)) (e_y - pi), TPO q - pi with u = standardise(onehot(y)), CE e_y - pi.
Error after the step, averaged over contexts; misalignment to CE over the whole table.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from ..contract.batch import Batch, Request, Rollout, SeedAxis, TaskOptions, seedwise
from ..contract.rng import Streams
from . import register
from ._bandit import check_bandit_request, sampled_batch
from ._checks import positive

CORRECT = 0


class Logits(nn.Module):
    def __init__(self, init: torch.Tensor):
        super().__init__()
        self.logits = nn.Parameter(init)


# Constants of a table's shape, built once (read only: tasks and algorithms never write a
# batch's tensors in place).

@functools.cache
def _action_set(k: int, device: torch.device) -> "TabularObs":
    """The one context's k actions, in order (tabular_single's action-set batches)."""
    return TabularObs(torch.zeros(k, dtype=torch.long, device=device), torch.arange(k, device=device))


@functools.cache
def _whole_table(rows: int, k: int, device: torch.device) -> "TabularObs":
    """Every (context, action) of a rows x k table, in order (tabular_multi's batches)."""
    return TabularObs(torch.arange(rows, device=device)[:, None].expand(rows, k),
                      torch.arange(k, device=device).expand(rows, k))


@functools.cache
def _correct(rows: int, k: int, device: torch.device) -> torch.Tensor:
    """e_y: the correct action's one-hot in each of `rows` rows (a constant, built once)."""
    return F.one_hot(torch.full((rows,), CORRECT, device=device), k).float()


def misalignment(g: torch.Tensor, oracle: torch.Tensor) -> float:
    """1 - cos(g, oracle) over the flattened tables."""
    g, oracle = g.reshape(-1), oracle.reshape(-1)
    cos = (g @ oracle) / (torch.sqrt(g @ g + 1e-12) * torch.sqrt(oracle @ oracle + 1e-12))
    return float(1 - cos)


@dataclass(frozen=True)
class TabularObs:
    """Where each candidate sits in the logit table, in the batch's (context, candidate)
    order: its row (context) and column (action), two long tensors of N * K entries."""

    context: torch.Tensor
    action: torch.Tensor


def _candidates(logp: torch.Tensor, batch: Batch) -> torch.Tensor:
    """The batch's candidates' log-probs, read from a log-probability table [N, K]."""
    obs: TabularObs = batch.obs
    return logp[obs.context, obs.action].view(batch.logp_old.shape)


# The forward, written once over a leading seed axis (contract.batch.SeedAxis: a single
# run is S = 1): the S tables stacked [S, N, K], their log-softmax one call (seedwise). A
# row's log-softmax reads that row only, so each seed's slice is its own table's bit for bit.

def _rollout_seeds(task, policies: list[Logits], req: Request, streams: list[Streams]) -> list[Rollout]:
    """Each seed's rollout, each seed's draws from its own streams."""
    logp = seedwise(_log_softmax, [p.logits.detach() for p in policies])
    return [task._scored(lp, req, st) for lp, st in zip(logp, streams)]


def _logprobs_seeds(policies: list[Logits], batches: list[Batch]) -> list[torch.Tensor]:
    """Each seed's log-probs of its batch's candidates."""
    logp = seedwise(_log_softmax, [p.logits for p in policies])
    return [_candidates(lp, b) for lp, b in zip(logp, batches)]


def _log_softmax(logits: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits, -1)


@register("tabular_single")
@dataclass(frozen=True)
class TabularSingle(SeedAxis, TaskOptions):
    name: str = "tabular_single"
    num_actions: int = 100
    batch_size: int = 100
    episodes: int = 150
    baseline: float = 0.5
    steps_per_batch: ClassVar[int] = 1

    def __post_init__(self):
        positive(self, "num_actions", "batch_size")

    def check_algorithm(self, req: Request) -> None:
        check_bandit_request(self, req)

    def make_policy(self, gen: torch.Generator) -> Logits:
        return Logits(torch.zeros(1, self.num_actions))

    def _scored(self, logp_set: torch.Tensor, req: Request, streams: Streams) -> Rollout:
        """The episode's batch from the policy's log-probs [1, K] (the one context)."""
        B, K, dev = self.batch_size, self.num_actions, logp_set.device
        logp = logp_set[0]
        a = torch.multinomial(logp.exp(), B, replacement=True, generator=streams.action)
        r = (a == CORRECT).float()
        adv = r - self.baseline
        if req.needs in ("sample", "sample_group"):
            obs = TabularObs(torch.zeros(B, dtype=torch.long, device=dev), a)
            batch = sampled_batch(req, logp[a], r, adv, obs)
        else:
            obs = _action_set(K, dev)
            every = obs.action
            if req.needs == "action_group":
                scores = (adv[:, None] * F.one_hot(a, K)).mean(0)
                batch = Batch.action_set(logp_set, scores[None], (every == CORRECT)[None], obs=obs)
            else:  # label
                batch = Batch.labelled(logp_set, torch.tensor([CORRECT], device=dev), obs=obs)
        # Kept on the device (the runner reads them once the episode is done); the error
        # in float64, so that 1 - p rounds as it did on a Python float.
        return Rollout(batch, error=1.0 - logp[CORRECT].exp().double(), reward_mean=r.mean(), rollouts=B)

    rollout_seeds = _rollout_seeds
    logprobs_seeds = staticmethod(_logprobs_seeds)

    def grad_metrics(self, policy: Logits) -> dict[str, float]:
        pi = torch.softmax(policy.logits.detach(), -1)
        e_y = _correct(1, self.num_actions, pi.device)
        return {"misalignment": misalignment(-policy.logits.grad, pi[:, CORRECT] * (e_y - pi))}

    def evaluate(self, policy: Logits) -> None:
        return None


@register("tabular_multi")
@dataclass(frozen=True)
class TabularMulti(SeedAxis, TaskOptions):
    name: str = "tabular_multi"
    num_contexts: int = 100
    num_actions: int = 10
    episodes: int = 1000
    eval_every: int = 1
    """science §Tabular bandits measures this error after every step"""
    steps_per_batch: ClassVar[int] = 1

    def __post_init__(self):
        positive(self, "num_contexts", "num_actions", "eval_every")

    def check_algorithm(self, req: Request) -> None:
        check_bandit_request(self, req)

    def make_policy(self, gen: torch.Generator) -> Logits:
        return Logits(torch.randn(self.num_contexts, self.num_actions, generator=gen))

    def _scored(self, logp: torch.Tensor, req: Request, streams: Streams) -> Rollout:
        """The episode's batch from the policy's log-probs [N, K] (no draws: exact)."""
        N, K, dev = self.num_contexts, self.num_actions, logp.device
        onehot = _correct(N, K, dev)
        obs = _whole_table(N, K, dev)
        if req.needs == "label":
            batch = Batch.labelled(logp, torch.full((N,), CORRECT, device=dev), obs=obs)
        else:
            # Expectations, not samples: every action weighted by its probability, except
            # for TPO (its target is defined on the action set).
            sampling = req.needs in ("sample", "sample_group")
            batch = Batch.action_set(logp, onehot, onehot > 0, obs=obs,
                                     probs=logp.exp() if sampling else None,
                                     advantages=onehot if req.needs == "sample" else None)
        p = logp[:, CORRECT].exp().mean()
        return Rollout(batch, error=1.0 - p.double(), reward_mean=p, rollouts=0)  # as TabularSingle's

    rollout_seeds = _rollout_seeds
    logprobs_seeds = staticmethod(_logprobs_seeds)

    def grad_metrics(self, policy: Logits) -> dict[str, float]:
        pi = torch.softmax(policy.logits.detach(), -1)
        e_y = _correct(self.num_contexts, self.num_actions, pi.device)
        return {"misalignment": misalignment(-policy.logits.grad, e_y - pi)}

    @torch.no_grad()
    def evaluate(self, policy: Logits) -> dict[str, float]:
        return {"error": 1.0 - float(torch.softmax(policy.logits, -1)[:, CORRECT].mean())}

    @staticmethod
    def analytic_weight(algo: str, p: float) -> float:
        """TaskOptions.analytic_weight: the module's `analytic_weight` at this task's K."""
        return analytic_weight(algo, p, TabularMulti.num_actions)


def analytic_weight(algo: str, p: float = 0.1, k: int = TabularMulti.num_actions,
                    eta: float = 1.0) -> float:
    """Per-context weight w of tabular_multi's exact update w (e_y - pi) for method `algo`
    at pi_y = p, the other k - 1 actions sharing 1 - p equally (science §Tabular bandits's formulas; the
    reproduction report checks the paper's weights at p = 0.1 against these)."""
    import math

    if algo == "pg":
        return p
    if algo == "dg":
        return p / (1 + math.exp(math.log(p) / eta))  # p * sigmoid(-log p / eta)
    if algo == "grpo":
        return math.sqrt(p / (1 - p))
    if algo == "tpo":  # u = standardise(onehot(y)); q = pi exp(u) / Z; q - pi = w (e_y - pi)
        sd = math.sqrt((1 / k) * (1 - 1 / k))
        up, un = (1 - 1 / k) / sd, -(1 / k) / sd
        q = p * math.exp(up) / (p * math.exp(up) + (1 - p) * math.exp(un))
        return (q - p) / (1 - p)
    raise ValueError(f"no weight formula for {algo!r}")
