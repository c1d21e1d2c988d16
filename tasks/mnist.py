"""MNIST contextual bandit, optionally with stale actors.

Each update: B training images drawn uniformly with replacement, one action sampled per
image from the acting policy, reward 1{action = label}; only CE sees the label.
- "sample" (PG, DG): advantage r - b, label-free baseline b = sum_a pi(a)^2;
- "action_group" (TPO, Group PG): the group is all actions, s = A(a) onehot(a), the
  sampled action marked by `Batch.sampled`;
- "sample_group" (GRPO): the minibatch is the group, rewards standardised across it;
- "label" (CE): the one-hot label.

Stale actors (task.delay = D, our own design): actions come from the policy of D updates
ago, which supplies p_old, the baseline and the surprisal; the last D+1 parameter vectors
are one flat ring buffer (D = 1000: about 170 MB).
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
from torch.nn.utils import parameters_to_vector

from ..contract.batch import Batch, Request, Rollout, SeedAxis, TaskOptions, stack_seeds
from ._data import BASE_URL, load_mnist
from ..contract.rng import Streams
from ..contract.schema import IF_SET, NOT_IDENTITY
from . import register
from ._bandit import check_bandit_request, sampled_batch
from ._checks import positive
from ._nn import lecun_truncated_



class MLP(nn.Module):
    """784-50-50-10 ReLU policy, truncated LeCun kernels, zero biases (science §MNIST bandit)."""

    def __init__(self, sizes: tuple[int, ...], gen: torch.Generator):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        with torch.no_grad():
            for layer in self.layers:
                lecun_truncated_(layer.weight, layer.in_features, gen)
                layer.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits of images x [B, 784]: `forward_seeds` at S = 1, the one forward."""
        return forward_seeds([dict(self.named_parameters())], x[None])[0]


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
    def acting_params(self) -> dict[str, torch.Tensor]:
        """Record the current weights, return the parameters (named as the MLP names them)
        of the policy of `delay` updates ago (the initial one while fewer updates have
        happened)."""
        if not self.delay:
            return dict(self.mlp.named_parameters())
        size = self.delay + 1
        self.ring[int(self.pushed) % size] = parameters_to_vector(self.mlp.parameters())
        self.pushed += 1
        flat = self.ring[int(self.pushed) % size if int(self.pushed) >= size else 0]
        params, at = {}, 0
        for name, p in self.mlp.named_parameters():
            params[name] = flat[at:at + p.numel()].view_as(p)
            at += p.numel()
        return params

    def acting(self) -> Callable[[torch.Tensor], torch.Tensor]:
        """The acting policy as a function of the images (`acting_params`)."""
        params = self.acting_params()
        return lambda x: forward_seeds([params], x[None])[0]


class _SeedLinear(torch.autograd.Function):
    """F.linear over a leading seed axis: x [S, B, i], w [S, o, i], b [S, o] -> [S, B, o],
    one batched matmul. Its own backward because autograd's for a bmm takes the weight
    gradient as x^T g ([i, o], then transposed), where F.linear's takes g^T x ([o, i]):
    the same sums, which MKL rounds otherwise (measured: not bitwise at o = 10). This
    way each seed's slice of the output and of every gradient equals its own F.linear's
    bit for bit on the CPU at one thread (tests/test_batched.py)."""

    @staticmethod
    def forward(ctx, x, w, b):
        ctx.save_for_backward(x, w)
        return torch.baddbmm(b.unsqueeze(1), x, w.transpose(1, 2))

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        gx = torch.bmm(g, w) if ctx.needs_input_grad[0] else None
        return gx, torch.bmm(g.transpose(1, 2), x), g.sum(1)


def forward_seeds(params: list[dict[str, torch.Tensor]], x: torch.Tensor) -> torch.Tensor:
    """MLP.forward for S parameter sets (named as MLP.named_parameters names them) at once:
    images x [S, B, 784] -> logits [S, B, A], differentiable back to each set."""
    layers = len(params[0]) // 2
    for i in range(layers):
        w, b = (stack_seeds([p[f"layers.{i}.{k}"] for p in params]) for k in ("weight", "bias"))
        x = _SeedLinear.apply(x, w, b)
        if i < layers - 1:
            x = F.relu(x)
    return x


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
class MnistTask(SeedAxis, TaskOptions):
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
    steps_per_batch: ClassVar[int] = 1  # one Adam step per batch for every method (science §MNIST bandit)

    def __post_init__(self):
        positive(self, "batch_size", "eval_every")
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

    def _images(self, streams: Streams) -> tuple[torch.Tensor, torch.Tensor]:
        """An episode's B training images and their labels, drawn from the data stream."""
        device = streams.data.device
        d = self.data(device)
        idx = torch.randint(0, len(d.train_y) - self.holdout, (self.batch_size,),
                            generator=streams.data, device=device)
        return d.train_x[idx], d.train_y[idx]

    def _scored(self, x: torch.Tensor, y: torch.Tensor, logp: torch.Tensor, req: Request,
                streams: Streams) -> Rollout:
        """The episode's batch from its images x, labels y and the acting policy's
        log-probs logp [B, A]: one action per image drawn from the action stream."""
        a = torch.multinomial(logp.exp(), 1, generator=streams.action)[:, 0]
        r = (a == y).float()
        B, A = self.batch_size, self.num_actions
        adv = r - logp.exp().pow(2).sum(-1)  # label-free baseline, keep it (science §MNIST bandit)
        if req.needs in ("sample", "sample_group"):
            batch = sampled_batch(req, logp.gather(1, a[:, None])[:, 0], r, adv,
                                  MnistObs(x, a[:, None]))
        else:
            obs = MnistObs(x, torch.arange(A, device=x.device).expand(B, A))
            if req.needs == "action_group":
                onehot = F.one_hot(a, A).float()
                rewards = r[:, None] * onehot  # only the sampled action's is observed
                batch = Batch.action_set(logp, adv[:, None] * onehot, rewards > 0,
                                         rewards=rewards, sampled=a, obs=obs)
            else:  # label
                batch = Batch.labelled(logp, y, obs=obs)
        # Kept on the device (the runner reads them once the episode is done); the error
        # in float64, so that 1 - mean rounds as it did on a Python float.
        return Rollout(batch, error=1.0 - r.mean().double(), reward_mean=r.mean(), rollouts=B)

    # ------------------------------------------------------------ the forward, over a seed axis

    def rollout_seeds(self, policies: list[StalePolicy], req: Request,
                      streams: list[Streams]) -> list[Rollout]:
        """Each seed's rollout, the S acting policies' forwards one stacked computation
        (`forward_seeds`), each seed's images and actions drawn from its own streams."""
        xs, ys = zip(*(self._images(st) for st in streams))
        with torch.no_grad():
            logp = torch.log_softmax(forward_seeds([p.acting_params() for p in policies],
                                                   stack_seeds(list(xs))), -1)
        return [self._scored(x, y, lp, req, st) for x, y, lp, st in zip(xs, ys, logp.unbind(), streams)]

    def logprobs_seeds(self, policies: list[StalePolicy], batches: list[Batch]) -> list[torch.Tensor]:
        """Each seed's log-probs of its batch, the S learners' forwards one stacked computation."""
        obs: list[MnistObs] = [b.obs for b in batches]
        logits = forward_seeds([dict(p.mlp.named_parameters()) for p in policies],
                               stack_seeds([o.images for o in obs]))
        # unbind, not [s]: an index's backward writes a zero-filled gradient of all S seeds
        return [torch.log_softmax(z, -1).gather(1, o.actions).view(b.logp_old.shape)
                for z, o, b in zip(logits.unbind(), obs, batches)]

    @torch.no_grad()
    def evaluate(self, policy: StalePolicy) -> dict[str, float]:
        d = self.data(policy.ring.device)
        test = float((policy(d.test_x).argmax(-1) != d.test_y).float().mean())
        if not self.holdout:
            return {"error": test, "test_error": test}
        x, y = d.train_x[-self.holdout:], d.train_y[-self.holdout:]
        return {"error": float((policy(x).argmax(-1) != y).float().mean()), "test_error": test}
