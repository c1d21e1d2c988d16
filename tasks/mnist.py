"""MNIST contextual bandit (SPEC 3.2), optionally with stale actors.

Each update: B training images drawn uniformly with replacement, one action sampled per
image from the acting policy, reward 1{action = label}. The learner never sees the label
(except the CE oracle). How each method meets the bandit (SPEC 3.2):

- "sample" (PG, DG): one action per image, advantage r - b with the label-free
  baseline b = sum_a pi(a)^2 of the acting policy;
- "action_group" (TPO, Group PG): the group is all actions; score vector
  s = A(a) onehot(a), the sampled action marked by `Batch.sampled`;
- "sample_group" (GRPO): the minibatch is the group: rewards standardised across it;
- "label" (CE): the one-hot label over the actions.

Stale actors (task.delay = D, our own design): actions come from the policy of D updates
ago; that acting policy supplies p_old, the baseline and the surprisal. The last D+1
parameter vectors are kept as one flat ring buffer (D = 1000: 1001 x 42,310 floats,
about 170 MB).
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ClassVar

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call
from torch.nn.utils import parameters_to_vector

from contract.batch import Batch, Request, Rollout
from tasks._data import BASE_URL, load_mnist
from contract.rng import Streams
from contract.schema import IF_SET, NOT_IDENTITY
from tasks import register
from tasks._bandit import check_bandit_request, sampled_batch
from tasks._nn import lecun_truncated_



class MLP(nn.Module):
    """784-50-50-10 ReLU policy, truncated LeCun kernels, zero biases (SPEC 3.2)."""

    def __init__(self, sizes: tuple[int, ...], gen: torch.Generator):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        with torch.no_grad():
            for layer in self.layers:
                lecun_truncated_(layer.weight, layer.in_features, gen)
                layer.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers[:-1]:
            x = F.relu(layer(x))
        return self.layers[-1](x)


class StalePolicy(nn.Module):
    """The learner's MLP plus a ring of its last delay+1 parameter vectors (buffers, so
    they travel with state_dict into checkpoints)."""

    def __init__(self, mlp: MLP, delay: int):
        super().__init__()
        self.mlp = mlp
        self.delay = delay
        n = sum(p.numel() for p in mlp.parameters())
        self.register_buffer("ring", torch.zeros(delay + 1 if delay else 0, n))
        self.register_buffer("pushed", torch.zeros((), dtype=torch.long))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(x)

    @torch.no_grad()
    def acting(self) -> Callable[[torch.Tensor], torch.Tensor]:
        """Record the current weights, return the policy of `delay` updates ago (the
        initial one while fewer updates have happened)."""
        if not self.delay:
            return self.mlp
        size = self.delay + 1
        self.ring[int(self.pushed) % size] = parameters_to_vector(self.mlp.parameters())
        self.pushed += 1
        flat = self.ring[int(self.pushed) % size if int(self.pushed) >= size else 0]
        params, at = {}, 0
        for name, p in self.mlp.named_parameters():
            params[name] = flat[at:at + p.numel()].view_as(p)
            at += p.numel()
        return lambda x: functional_call(self.mlp, params, (x,))


@dataclass(frozen=True)
class MnistObs:
    """The images of a batch and, per image, the actions whose log-probs it holds:
    [B, 1] the sampled one, or [B, 10] every class (in the batch's candidate order)."""

    images: torch.Tensor
    actions: torch.Tensor


@functools.lru_cache(maxsize=2)
def _on_device(d, device: torch.device):
    """The data set copied to an accelerator once per process, not once per batch."""
    return dataclasses.replace(d, **{k: getattr(d, k).to(device)
                                     for k in ("train_x", "train_y", "test_x", "test_y")})


@register("mnist")
@dataclass(frozen=True)
class MnistTask:
    name: str = "mnist"
    batch_size: int = 100
    episodes: int = 10_000
    """updates"""
    eval_every: int = 200
    """test error after every this many updates (and before the first)"""
    num_actions: int = 10
    hidden: tuple[int, ...] = (50, 50)
    delay: int = 0
    """stale actors: act with the policy of this many updates ago"""
    holdout: int = field(default=0, metadata=IF_SET)
    """train on all but the last `holdout` training images and report `error` on those
    (a validation split: tune on it, not on the test set); test_error stays the test set"""
    data_dir: str = field(default="", metadata=NOT_IDENTITY)
    """folder of the four IDX files; empty: $TPO_BENCH_MNIST_DIR or the user cache"""
    download: bool = field(default=True, metadata=NOT_IDENTITY)
    base_url: str = field(default=BASE_URL, metadata=NOT_IDENTITY)
    steps_per_batch: ClassVar[int] = 1  # one Adam step per batch for every method (SPEC 3.2)

    def __post_init__(self):
        for key in ("batch_size", "episodes", "eval_every"):
            if getattr(self, key) < 1:
                raise ValueError(f"task.{key} must be a positive integer, got {getattr(self, key)}")
        if self.delay < 0:
            raise ValueError(f"task.delay must be 0 or more, got {self.delay}")
        if self.holdout < 0:
            raise ValueError(f"task.holdout must be 0 or more, got {self.holdout}")
        if self.num_actions != 10:
            raise ValueError(f"task.num_actions must be 10 for MNIST, got {self.num_actions}")

    def check_algorithm(self, req: Request) -> None:
        check_bandit_request(self, req)

    def data(self, device: torch.device | str = "cpu"):
        d = load_mnist(Path(self.data_dir) if self.data_dir else None,
                       download=self.download, base_url=self.base_url)
        if self.holdout >= len(d.train_y):
            raise ValueError(f"task.holdout={self.holdout} leaves no training images "
                             f"(the training set has {len(d.train_y)})")
        return d if torch.device(device).type == "cpu" else _on_device(d, torch.device(device))

    def make_policy(self, gen: torch.Generator) -> StalePolicy:
        self.data()  # fail on missing data before any training starts
        return StalePolicy(MLP((784, *self.hidden, self.num_actions), gen), self.delay)

    def rollout(self, policy: StalePolicy, req: Request, streams: Streams) -> Rollout:
        device = streams.data.device
        d = self.data(device)
        idx = torch.randint(0, len(d.train_y) - self.holdout, (self.batch_size,),
                            generator=streams.data, device=device)
        x, y = d.train_x[idx], d.train_y[idx]
        with torch.no_grad():
            logp = torch.log_softmax(policy.acting()(x), -1)
        a = torch.multinomial(logp.exp(), 1, generator=streams.action)[:, 0]
        r = (a == y).float()
        B, A = self.batch_size, self.num_actions
        adv = r - logp.exp().pow(2).sum(-1)  # label-free baseline, keep it (SPEC 3.2)
        if req.needs in ("sample", "sample_group"):
            batch = sampled_batch(req, logp.gather(1, a[:, None])[:, 0], r, adv,
                                  MnistObs(x, a[:, None]))
        else:
            obs = MnistObs(x, torch.arange(A, device=device).expand(B, A))
            if req.needs == "action_group":
                onehot = F.one_hot(a, A).float()
                rewards = r[:, None] * onehot  # only the sampled action's is observed
                batch = Batch.action_set(logp, adv[:, None] * onehot, rewards > 0,
                                         rewards=rewards, sampled=a, obs=obs)
            else:  # label
                batch = Batch.labelled(logp, y, obs=obs)
        return Rollout(batch, error=1.0 - float(r.mean()), reward_mean=float(r.mean()), rollouts=B)

    def logprobs(self, policy: StalePolicy, batch: Batch) -> torch.Tensor:
        obs: MnistObs = batch.obs
        logp = torch.log_softmax(policy(obs.images), -1).gather(1, obs.actions)
        return logp.view(batch.logp_old.shape)

    @torch.no_grad()
    def evaluate(self, policy: StalePolicy) -> dict[str, float]:
        d = self.data(policy.ring.device)
        test = float((policy(d.test_x).argmax(-1) != d.test_y).float().mean())
        if not self.holdout:
            return {"error": test, "test_error": test}
        x, y = d.train_x[-self.holdout:], d.train_y[-self.holdout:]
        return {"error": float((policy(x).argmax(-1) != y).float().mean()), "test_error": test}
