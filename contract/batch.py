"""The one structure tasks hand to algorithms, and the two Protocols that meet at it.

A batch is N contexts, each with a group of K candidates, each a sequence of T scored steps
(T = 1 for one-step bandits). Each family has a named constructor, chosen by what the
algorithm consumes (`Request.needs`):
- "sample" -> `Batch.single_samples`: K = 1 per context with the task's per-step advantage
  (PG, PPO, DG);
- "sample_group" -> `Batch.sampled_group`: K sampled candidates compared with each other
  (GRPO; token level: N = B*H prefix states, K next tokens; on a bandit, the minibatch);
- "action_group" -> `Batch.action_set` (bandits: the whole action set, optionally with the
  sampled action's indicator or exact probabilities) or sampled candidates (TPO, Group PG);
- "label" -> `Batch.labelled`: the action set with the correct action (CE).
Algorithms never read the task's private `obs`: the runner gives them the current policy's
log-probs, shaped like `logp_old`. Candidates of different lengths
(LLM completions) carry a `mask`; padded steps hold 0, so only a mean needs `step_mask()`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

import torch
import torch.nn.functional as F

from .rng import Streams


# The per-step tensors whose padded steps hold 0 (checked where a batch has a mask).
PER_STEP = ("logp_old", "token_rewards", "advantages", "logp_ref")


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
    advantages: torch.Tensor | None = None
    """[N, K, T] task-supplied advantage (the task owns its baseline), or None."""
    sampled: torch.Tensor | None = None
    """[N, K] bool, action-set groups of a sampling bandit only: which action the context
    sampled (one True per row). A candidate's term in a group's sums counts only where
    it is True: the other actions of the set were not tried (MNIST Group PG, science §MNIST bandit).
    Group statistics (GRPO's mean and std) ignore it."""
    probs: torch.Tensor | None = None
    """[N, K], action-set groups of an exact bandit only: the population probability of
    each action under the behaviour policy (tabular_multi, science §Tabular bandits). A candidate's term
    in a group's sums is weighted by it and group statistics are taken under it, which
    turns a sampled method into its expectation. At most one of `sampled` and `probs`
    is set; neither means every candidate weighs 1."""
    label: torch.Tensor | None = None
    """[N] long, labelled batches only: the index of each context's correct candidate
    (CE's target). The scores of such a batch are the rewards the label implies."""
    mask: torch.Tensor | None = None
    """[N, K, T] bool, candidates of different lengths only (the LLM family): True on a
    candidate's real steps, False on the padding after it ends. Padded steps are 0 in
    logp_old, token_rewards, advantages and logp_ref, and in the task's `logprobs`."""
    logp_ref: torch.Tensor | None = None
    """[N, K, T] per-step log-probs under a frozen reference policy (the initial one), for
    a KL penalty to it; None where the task keeps no reference."""
    obs: Any = None
    """The task's own record of the candidates (a frozen dataclass per task), read only
    by that task's `logprobs`."""

    def __post_init__(self):
        if self.sampled is not None and self.probs is not None:
            raise ValueError("a batch weighs its candidates by the sampled indicator or by "
                             "population probabilities, not both")
        if self.mask is not None:  # a sum over steps relies on it (GRPO's, GSPO's mean)
            for name in PER_STEP:
                x = getattr(self, name)
                if x is not None and bool((x.masked_fill(self.mask, 0) != 0).any()):
                    raise ValueError(f"batch.{name} holds non-zero values at padded steps "
                                     "(mask False); a task must put 0 there")

    def check_logp(self, logp: torch.Tensor, source: str = "task.logprobs") -> None:
        """ValueError unless `logp` (the trained policy's per-step log-probs of this batch's
        candidates, from `source`) has logp_old's shape and, where the batch has a mask, 0
        at every padded step: the algorithms' sums over steps (GRPO's, GSPO's mean, TPO's
        candidate log-prob) count every step, so junk there would be trained on."""
        if tuple(logp.shape) != tuple(self.logp_old.shape):
            raise ValueError(f"{source} returned log-probs of shape {tuple(logp.shape)}; the "
                             f"batch's logp_old has {tuple(self.logp_old.shape)}")
        if self.mask is not None and bool((logp.detach().masked_fill(self.mask, 0) != 0).any()):
            raise ValueError(f"{source} returned non-zero log-probs at padded steps (mask "
                             "False); a task must put 0 there, as in logp_old")

    @property
    def num_groups(self) -> int:
        return self.logp_old.shape[0]

    @property
    def group_size(self) -> int:
        return self.logp_old.shape[1]

    def seq_logp_old(self) -> torch.Tensor:
        """[N, K] candidate log-probs: the sum of its step log-probs (science §Groups and scores)."""
        return self.logp_old.sum(-1)

    def step_mask(self) -> torch.Tensor:
        """[N, K, T] bool: the completion mask, or every step where there is none."""
        if self.mask is not None:
            return self.mask
        return torch.ones(self.logp_old.shape, dtype=torch.bool, device=self.logp_old.device)

    def step_mean(self, x: torch.Tensor) -> torch.Tensor:
        """Mean of a per-step tensor [N, K, T] over the real steps (a diagnostic's mean;
        a loss reduces through its own normaliser)."""
        if self.mask is None:
            return x.mean()
        m = self.mask.to(x.dtype)
        return (x * m).sum() / m.sum().clamp_min(1)

    def candidate_weights(self) -> torch.Tensor | float:
        """[N, K] weight of each candidate's term in a group's sums: the sampled indicator
        (in the log-probs' dtype), the population probability, or 1."""
        if self.sampled is not None:
            return self.sampled.to(self.logp_old.dtype)
        return 1.0 if self.probs is None else self.probs

    def take(self, index: torch.Tensor) -> "Batch":
        """The groups `index` ([M] long) picks, in that order, the task's obs with them:
        every tensor whose first axis is the groups' (N) is indexed, in obs as well (a
        frozen dataclass); an obs tensor on another axis cannot be split by group and is
        refused (ValueError) rather than left misaligned."""
        return dataclasses.replace(self, **{k: _by_group(v, index, self.num_groups, k)
                                            for k, v in _fields(self).items() if k != "obs"},
                                   obs=_obs_by_group(self.obs, index, self.num_groups))

    @classmethod
    def concat(cls, batches: list["Batch"]) -> "Batch":
        """One batch of every group of `batches`, in order (same K, T and obs type)."""
        first = batches[0]
        out = {k: None if v is None else torch.cat([getattr(b, k) for b in batches])
               for k, v in _fields(first).items() if k != "obs"}
        obs = first.obs
        if dataclasses.is_dataclass(obs):
            obs = dataclasses.replace(obs, **{
                f: torch.cat([getattr(b.obs, f) for b in batches])
                for f, v in _fields(obs).items() if isinstance(v, torch.Tensor)})
        return cls(**out, obs=obs)

    # ------------------------------------------------------------ the four families

    @classmethod
    def single_samples(cls, logp_old: torch.Tensor, token_rewards: torch.Tensor,
                       advantages: torch.Tensor, success: torch.Tensor, *,
                       scores: torch.Tensor | None = None, mask: torch.Tensor | None = None,
                       logp_ref: torch.Tensor | None = None, obs: Any = None) -> "Batch":
        """N single samples (K = 1) scored by the task's per-step advantage.

        logp_old, token_rewards, advantages, mask, logp_ref: [N, T], or [N] for one-step
        tasks; success: [N]; scores: [N], default the mean reward over the (real) steps."""
        def one(x: torch.Tensor | None) -> torch.Tensor | None:
            return None if x is None else x.reshape(x.shape[0], 1, -1)

        token_rewards = one(token_rewards)
        if scores is None:
            scores = mean_over_steps(token_rewards, one(mask))
        return cls(logp_old=one(logp_old), token_rewards=token_rewards,
                   scores=scores.reshape(-1, 1), success=success.reshape(-1, 1),
                   advantages=one(advantages), mask=one(mask), logp_ref=one(logp_ref), obs=obs)

    @classmethod
    def sampled_group(cls, logp_old: torch.Tensor, token_rewards: torch.Tensor,
                      success: torch.Tensor, *, scores: torch.Tensor | None = None,
                      advantages: torch.Tensor | None = None, mask: torch.Tensor | None = None,
                      logp_ref: torch.Tensor | None = None, obs: Any = None) -> "Batch":
        """N groups of K sampled candidates each.

        logp_old, token_rewards (and advantages, for a task that supplies them anyway),
        mask and logp_ref: [N, K, T], or [N, K] for one-step candidates; success: [N, K];
        scores: [N, K], default the mean reward over the (real) steps."""
        def steps(x: torch.Tensor) -> torch.Tensor:
            return x.unsqueeze(-1) if x.dim() == 2 else x

        token_rewards = steps(token_rewards)
        if scores is None:
            scores = mean_over_steps(token_rewards, None if mask is None else steps(mask))
        return cls(logp_old=steps(logp_old), token_rewards=token_rewards, scores=scores,
                   success=success, obs=obs,
                   advantages=None if advantages is None else steps(advantages),
                   mask=None if mask is None else steps(mask),
                   logp_ref=None if logp_ref is None else steps(logp_ref))

    @classmethod
    def action_set(cls, logp_old: torch.Tensor, scores: torch.Tensor, success: torch.Tensor, *,
                   rewards: torch.Tensor | None = None, sampled: torch.Tensor | None = None,
                   probs: torch.Tensor | None = None, advantages: torch.Tensor | None = None,
                   obs: Any = None) -> "Batch":
        """N one-step groups whose K candidates are the whole action set.

        logp_old, scores, success, rewards (default: the scores), advantages: [N, K];
        `sampled`: [N] long, the action each context sampled (a sampling bandit: the
        other actions' terms drop out of the group's sums); `probs`: [N, K] population
        probabilities (an exact bandit: sums and statistics are expectations). At most
        one of the two."""
        K = logp_old.shape[-1]
        rewards = scores if rewards is None else rewards
        return cls(logp_old=logp_old.unsqueeze(-1), token_rewards=rewards.unsqueeze(-1),
                   scores=scores, success=success, obs=obs, probs=probs,
                   sampled=None if sampled is None else F.one_hot(sampled, K).bool(),
                   advantages=None if advantages is None else advantages.unsqueeze(-1))

    @classmethod
    def labelled(cls, logp_old: torch.Tensor, label: torch.Tensor, *, obs: Any = None) -> "Batch":
        """N one-step groups over the action set with the correct action revealed (CE).

        logp_old: [N, K]; label: [N] long. Every action is scored by the reward the label
        says it earns (1 for the label, 0 otherwise), which is also its success."""
        onehot = F.one_hot(label, logp_old.shape[-1]).to(logp_old.dtype)
        return cls(logp_old=logp_old.unsqueeze(-1), token_rewards=onehot.unsqueeze(-1),
                   scores=onehot, success=onehot > 0, label=label, obs=obs)


def reference_kl(batch: Batch, logp: torch.Tensor) -> torch.Tensor:
    """KL(pi || pi_ref) per real token, k3 estimator exp(r - l) - (r - l) - 1 with l the
    log-probs `logp` of pi and r = batch.logp_ref, averaged over the batch's real tokens:
    the penalty a task with a frozen reference asks for (`kl_ref`, the LLM family), added
    to whatever loss the algorithm returns, as the paper does for TPO and GRPO (science §Language models);
    with logp = logp_old, the acting policy's distance from its reference."""
    d = batch.logp_ref - logp
    return batch.step_mean(torch.exp(d) - d - 1)


def mean_over_steps(x: torch.Tensor, mask: torch.Tensor | None, keepdim: bool = False) -> torch.Tensor:
    """Each candidate's mean of a per-step tensor [..., T] over its real steps (padded
    steps hold 0, so the sum needs no mask; the count does); every step without a mask."""
    if mask is None:
        return x.mean(-1, keepdim=keepdim)
    return x.sum(-1, keepdim=keepdim) / mask.sum(-1, keepdim=keepdim).clamp_min(1).to(x.dtype)


def _fields(obj) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


def _by_group(x: Any, index: torch.Tensor, n: int, name: str) -> Any:
    if not isinstance(x, torch.Tensor):
        return x
    if x.dim() == 0 or x.shape[0] != n:
        raise ValueError(f"{name} has shape {tuple(x.shape)}, not the batch's {n} groups first: "
                         "this batch cannot be split by group")
    return x[index]


def _obs_by_group(obs: Any, index: torch.Tensor, n: int) -> Any:
    if obs is None:
        return None
    if not dataclasses.is_dataclass(obs):
        raise ValueError(f"obs of type {type(obs).__name__} is not a dataclass: this batch "
                         "cannot be split by group")
    return dataclasses.replace(obs, **{k: _by_group(v, index, n, f"obs.{k}")
                                       for k, v in _fields(obs).items()})


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
    """"sequence", or "token": K next-token candidates per prefix state (science §Update rules)"""
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
    """science §Token sequences training error of this episode's behaviour rollouts, before the update
    (a 0-d tensor is fine: the runner reads it once the episode is done)."""
    reward_mean: float | torch.Tensor
    rollouts: int
    """sampled sequences (or actions) this episode, for the cumulative budget column."""
    tokens: int | None = None
    """generated tokens this episode (the LLM family), for the cumulative `tokens` column;
    None where a task does not count them."""
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)
    """per-episode diagnostics of the rollouts themselves (response length, entropy, KL to
    the reference): metric columns of contract.schema."""


# ---------------------------------------------------------------- the two seams

@runtime_checkable
class Algorithm(Protocol):
    """An algorithm: a frozen dataclass registered in `algorithms` (its fields are its
    config, `conf/algo/<name>.yaml`). It never imports a task.

    Optional members (the runner reads each with a default): `AlgorithmOptions`.
    """

    k: int
    """group size (1 for single-sample methods)"""
    epochs: int
    """gradient epochs per rollout batch (science §Update rules)"""

    def loss(self, batch: Batch, logp: torch.Tensor) -> LossOut:
        """The loss on `batch` given the current policy's log-probs of its candidates,
        `logp` shaped like batch.logp_old. Terms weigh by batch.candidate_weights()."""
        ...


@runtime_checkable
class Task(Protocol):
    """A task: a frozen dataclass registered in `tasks` (its fields are its config,
    `conf/task/<preset>.yaml`). It owns the policy and never imports an algorithm.

    Optional members (the runner reads each with a default): `TaskOptions`.
    """

    name: str
    episodes: int
    """run length (updates)"""

    def check_algorithm(self, request: Request) -> None:
        """Refuse (ValueError) what has no meaning on this task."""
        ...

    def make_policy(self, gen: torch.Generator) -> torch.nn.Module:
        """the science page's model and initialisation, drawn from `gen`."""
        ...

    def rollout(self, policy: torch.nn.Module, request: Request, streams: Streams) -> Rollout:
        """Sample and score one episode, as the Batch family `request.needs` asks for."""
        ...

    def logprobs(self, policy: torch.nn.Module, batch: Batch) -> torch.Tensor:
        """The current policy's log-probs of batch's candidates, like batch.logp_old."""
        ...

    def evaluate(self, policy: torch.nn.Module) -> dict[str, float] | None:
        """Held-out metrics, or None where the task has none."""
        ...


# ---------------------------------------------------------------- optional members
# Not part of the two Protocols (isinstance would then demand them): every member the
# runner or the analysis reads from a task or an algorithm beyond them is declared here
# once, with its default, and each reads it directly (tests/test_layers.py holds bench/ to no getattr
# or hasattr on a task or an algorithm). The tasks and algorithms here subclass these; a
# registered plug-in that does not is given the defaults it lacks (contract.registry).
# A default is a class attribute, not a dataclass field: it joins no config and no config
# hash; a dataclass field of the same name (an algorithm's `level`) overrides it.

class AlgorithmOptions:
    """What an algorithm may declare beyond `Algorithm`, with the defaults that hold where
    it does not."""

    needs: ClassVar[str | None] = None
    """what it consumes, one of NEEDS; None: sample when its default k is 1, else
    sample_group (bench.build.needs)"""
    level: ClassVar[str] = "sequence"
    """sequence or token: the level its ratios and groups live at"""
    dynamic_sampling: ClassVar[int] = 0
    """DAPO's dynamic sampling: at most this many extra rollout batches to fill the batch
    with groups of unequal scores (0: off; needs a task with splits_groups)"""


class TaskOptions:
    """What a task may declare beyond `Task`, with the defaults that hold where it does not."""

    steps_per_batch: ClassVar[int | None] = None
    """fixed optimizer steps per batch (the bandits: 1), algo.epochs then refused; None:
    the algorithm's epochs"""
    batch_size: ClassVar[int | None] = None
    """prompts per episode: interaction matching scales it, and the effective batch is
    recorded (None: the task has no such size; neither happens)"""
    splits_groups: ClassVar[bool] = False
    """whether its batches split into groups that can be dropped and topped up (dynamic
    sampling's requirement)"""
    micro_batch: ClassVar[int] = 0
    """candidates per backward pass (gradient accumulation), whole groups only (0: the
    whole batch at once)"""
    kl_ref: ClassVar[float] = 0.0
    """coefficient of a KL penalty to the initial policy, added to every method's loss,
    where the rollout carries reference log-probs"""
    eval_every: ClassVar[int] = 0
    """episodes between held-out evaluations; only those episodes' rows are recorded, each
    with its evaluation (0: every episode's row, its error from the rollouts)"""
    rollout_seeds: ClassVar[Any] = None
    """a method, `rollout` for S seeds' policies at once: (policies, request, streams) ->
    [Rollout]; a task whose forward is written over a seed axis (`SeedAxis`) has it.
    None: the runner calls `rollout` seed by seed, and batch_seeds=true is refused"""
    logprobs_seeds: ClassVar[Any] = None
    """a method, `logprobs` for S seeds' policies at once: (policies, batches) -> [logp]
    (with rollout_seeds)"""
    analytic_weight: ClassVar[Any] = None
    """a function (algo, p) -> w, for an exact bandit whose update for method `algo` is
    w (e_y - pi) per context: w at pi_y = p, the other actions sharing 1 - p equally (the
    reproduction report's formula rows); None: the task has no closed form"""

    def grad_metrics(self, policy: torch.nn.Module) -> dict[str, float]:
        """Metrics read after the first epoch's backward (e.g. misalignment to an oracle
        direction); none by default."""
        return {}


class SeedAxis:
    """A task whose forward is written once, over a leading seed axis: its `rollout_seeds`
    and `logprobs_seeds` are the implementation, and the Task protocol's `rollout` and
    `logprobs` are them at S = 1 (a single run is a seed batch of one)."""

    def rollout(self, policy: torch.nn.Module, request: Request, streams: Streams) -> Rollout:
        [ro] = self.rollout_seeds([policy], request, [streams])
        return ro

    def logprobs(self, policy: torch.nn.Module, batch: Batch) -> torch.Tensor:
        [logp] = self.logprobs_seeds([policy], [batch])
        return logp


def stack_seeds(tensors: list[torch.Tensor]) -> torch.Tensor:
    """S seeds' tensors stacked on a leading seed axis (differentiable); for one seed a
    view of its tensor: the same values, no copy, and a single run pays nothing for it."""
    return tensors[0].unsqueeze(0) if len(tensors) == 1 else torch.stack(tensors)


def seedwise(f, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """f of each seed's tensor, for an f that treats leading axes as batch axes (a row-wise
    op: log_softmax over the last axis): one call over the S tensors stacked, each seed's
    slice of it; at S = 1, f of the tensor itself, so that a single run's autograd graph
    holds no seed axis (the same values: a row's result reads that row only)."""
    return [f(tensors[0])] if len(tensors) == 1 else list(f(torch.stack(tensors)).unbind())


def by_seed_axis(task, single: str, seeds: str) -> bool:
    """Whether the runner calls the task's method `seeds` (S seeds at once) for `single`:
    only where it has one that is not older than its `single`. A subclass or wrapper that
    overrides `rollout` or `logprobs` alone is run seed by seed through its override, never
    around it (SeedAxis's own `rollout`/`logprobs` are the seed methods at S = 1)."""
    if getattr(task, seeds, None) is None:
        return False
    mro = type(task).__mro__  # read each call: a class patched at run time is seen as it is
    at = {name: next((i for i, c in enumerate(mro) if name in c.__dict__), len(mro))
          for name in (single, seeds)}
    return at[seeds] <= at[single] or (at[single] < len(mro) and mro[at[single]] is SeedAxis)


def rollouts(task, policies: list, request: Request, streams: list[Streams]) -> list[Rollout]:
    """Each seed's rollout: the task's `rollout_seeds`, or where it has none (a task
    written for one seed: the LLM task, a plug-in) or overrides `rollout` below it, its
    `rollout`, seed by seed."""
    if not by_seed_axis(task, "rollout", "rollout_seeds"):
        return [task.rollout(p, request, st) for p, st in zip(policies, streams)]
    return task.rollout_seeds(policies, request, streams)


def logprobs(task, policies: list, batches: list[Batch]) -> list[torch.Tensor]:
    """Each seed's log-probs of its batch: `logprobs_seeds`, or `logprobs` seed by seed
    (as `rollouts` decides)."""
    if not by_seed_axis(task, "logprobs", "logprobs_seeds"):
        return [task.logprobs(p, b) for p, b in zip(policies, batches)]
    return task.logprobs_seeds(policies, batches)
