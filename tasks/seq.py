"""Token-sequence tasks (science §Token sequences): copy, flip, reverse_copy, reverse_flip of a random
prompt, scored per token by bag_of_tokens, sequential or terminal reward.

Prompt x: H tokens uniform over V, fresh every episode. The policy writes H tokens
after it; answer token t is predicted at position H-1+t (no BOS, no separator).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from ..contract.batch import Batch, Request, Rollout, SeedAxis, TaskOptions, mean_over_steps, stack_seeds
from ..contract.rng import Streams
from . import register, stacked
from ._checks import positive
from .transformer import Transformer

TARGETS = ("copy", "flip", "reverse_copy", "reverse_flip")
REWARDS = ("bag_of_tokens", "sequential", "terminal")


def target_tokens(prompts: torch.Tensor, target: str, vocab_size: int) -> torch.Tensor:
    y = prompts.flip(-1) if target.startswith("reverse_") else prompts
    return vocab_size - 1 - y if target.endswith("flip") else y


def token_rewards(correct: torch.Tensor, reward: str) -> torch.Tensor:
    """Per-token reward [..., H] from per-token correctness (science §Token sequences)."""
    c = correct.float()
    if reward == "bag_of_tokens":
        return c
    if reward == "sequential":
        return c.cumprod(-1)
    return c.prod(-1, keepdim=True).expand_as(c)  # terminal: all tokens or nothing


@dataclass(frozen=True)
class SeqObs:
    """Sequence-level candidates: each prompt and its K sampled answers."""

    prompts: torch.Tensor
    """[B, H] tokens"""
    answers: torch.Tensor
    """[B, K, H] tokens, answer k of prompt b at [b, k]"""


@dataclass(frozen=True)
class TokenObs:
    """Token-level candidates (science §Update rules): one behaviour trajectory per prompt and the K
    next-token candidates drawn at each of its H prefix states."""

    prompts: torch.Tensor
    """[B, H] tokens"""
    behaviour: torch.Tensor
    """[B, H] the trajectory's answer tokens (candidate 0 at every state)"""
    candidates: torch.Tensor
    """[B, H, K] tokens; the batch's group b*H + t is candidates[b, t]"""


@register("seq")
@dataclass(frozen=True)
class SeqTask(SeedAxis, TaskOptions):
    name: str = "seq"
    target: str = "reverse_copy"
    reward: str = "terminal"
    sequence_length: int = 10
    vocab_size: int = 2
    batch_size: int = 100
    episodes: int = 2000
    # A sequence-level batch is B independent prompt groups (Batch.take/concat split and
    # join them), so DAPO's dynamic sampling can replace one group by a fresh one.
    splits_groups: ClassVar[bool] = True

    def __post_init__(self):
        if self.target not in TARGETS:
            raise ValueError(f"task.target={self.target!r} is not one of {', '.join(TARGETS)}")
        if self.reward not in REWARDS:
            raise ValueError(f"task.reward={self.reward!r} is not one of {', '.join(REWARDS)}")
        positive(self, "sequence_length", "batch_size")
        if self.vocab_size < 2:
            raise ValueError(f"task.vocab_size must be at least 2, got {self.vocab_size}")

    def check_algorithm(self, req: Request) -> None:
        if req.needs == "label":
            raise ValueError(f"{req.name} is a supervised oracle and needs a labelled task "
                             f"(mnist, tabular_*); task {self.name!r} reveals no label")
        if req.level == "token" and self.reward == "terminal":
            raise ValueError(
                f"{req.name} groups next-token candidates (algo.level=token), which needs a "
                f"per-token reward; task.reward=terminal has none. Use the sequence-level "
                f"method or task.reward=bag_of_tokens|sequential")

    def make_policy(self, gen: torch.Generator) -> Transformer:
        return Transformer(self.vocab_size, 2 * self.sequence_length).init_(gen)

    def _sequence_groups(self, prompts: torch.Tensor, tokens: torch.Tensor,
                         logp: torch.Tensor) -> Rollout:
        """Sequence-level groups from B prompts' sampled answers and their log-probs."""
        B, k = tokens.shape[:2]
        correct = tokens == target_tokens(prompts, self.target, self.vocab_size).unsqueeze(1)
        rewards = token_rewards(correct, self.reward)
        obs = SeqObs(prompts, tokens)
        if k == 1:
            # Single-sample methods: reward_t minus its batch mean at that position (science §Update rules).
            advantages = rewards - rewards.mean(0, keepdim=True)
            batch = Batch.single_samples(logp[:, 0], rewards[:, 0], advantages[:, 0],
                                         correct.all(-1)[:, 0], obs=obs)
        else:
            batch = Batch.sampled_group(logp, rewards, correct.all(-1), obs=obs)
        # Kept on the device: reading them here would sync a GPU every episode.
        reward_mean = rewards.mean()
        return Rollout(batch, error=1.0 - reward_mean, reward_mean=reward_mean, rollouts=B * k)

    def _token_groups(self, prompts: torch.Tensor, behaviour: torch.Tensor, cands: torch.Tensor,
                      logp: torch.Tensor) -> Rollout:
        """Token-level groups from B behaviour trajectories and their [B, H, K] candidates."""
        B, H, k = cands.shape
        target = target_tokens(prompts, self.target, self.vocab_size)
        correct = cands == target.unsqueeze(-1)  # [B, H, K]
        if self.reward == "sequential":
            # A candidate scores only while the behaviour prefix before it is all correct.
            alive = torch.cat([torch.ones(B, 1, dtype=torch.bool, device=prompts.device),
                               correct[:, :-1, 0].cumprod(-1).bool()], 1)
            correct = correct & alive.unsqueeze(-1)
        rewards = correct.float()
        batch = Batch.sampled_group(logp.reshape(B * H, k), rewards.reshape(B * H, k),
                                    correct.reshape(B * H, k),
                                    obs=TokenObs(prompts, behaviour.view(B, H), cands))
        # science §Token sequences: the error of token-level methods is the behaviour rollouts'.
        reward_mean = rewards[..., 0].mean()
        return Rollout(batch, error=1.0 - reward_mean, reward_mean=reward_mean, rollouts=B)

    # ------------------------------------------------------------ the forward, over a seed axis

    def rollout_seeds(self, policies: list[Transformer], req: Request,
                      streams: list[Streams]) -> list[Rollout]:
        """Each seed's rollout: sequence groups of req.k sampled answers per prompt (every
        need but "label": the answer set is too large to enumerate), or token-level
        groups. The S policies' forwards are one stacked computation (tasks.stacked), each
        seed's prompts and samples drawn from its own streams, so each seed's rollout
        equals its run at S = 1."""
        B, H, V, k = self.batch_size, self.sequence_length, self.vocab_size, req.k
        prompts = stack_seeds([torch.randint(0, V, (B, H), generator=st.data, device=st.data.device)
                               for st in streams])
        gens = [st.action for st in streams]
        if req.level == "token":
            out = generate_seeds(policies, prompts, 1, gens, candidates=k)
            return [self._token_groups(prompts[s], *(x[s] for x in out)) for s in range(len(streams))]
        out = generate_seeds(policies, prompts, k, gens)
        if k == 1:  # single samples: their advantages are a batch mean, per seed
            return [self._sequence_groups(prompts[s], *(x[s] for x in out)) for s in range(len(streams))]
        return self._sequence_groups_seeds(prompts, *out)

    def _sequence_groups_seeds(self, prompts: torch.Tensor, tokens: torch.Tensor,
                               logp: torch.Tensor) -> list[Rollout]:
        """`_sequence_groups` (K > 1) of S seeds, prompts [S, B, H], tokens and logp
        [S, B, K, H]: every op once for all seeds, each seed's result a slice (elementwise
        and last-axis ops; a seed's mean over its own axes rounds as its tensor's)."""
        S, B, k = tokens.shape[:3]
        correct = tokens == target_tokens(prompts, self.target, self.vocab_size).unsqueeze(2)
        rewards = token_rewards(correct, self.reward)
        success, scores = correct.all(-1), mean_over_steps(rewards, None)
        reward_mean = rewards.mean((1, 2, 3))
        error = 1.0 - reward_mean
        return [Rollout(Batch.sampled_group(logp[s], rewards[s], success[s], scores=scores[s],
                                            obs=SeqObs(prompts[s], tokens[s])),
                        error=error[s], reward_mean=reward_mean[s], rollouts=B * k)
                for s in range(S)]

    def logprobs_seeds(self, policies: list[Transformer], batches: list[Batch]) -> list[torch.Tensor]:
        """Each seed's log-probs of its batch's candidates, as one stacked forward; seeds
        whose batches differ in shape (dynamic sampling keeps what it finds) are done one
        by one. Sequence level: the K answers of a prompt share it, so the prompt runs once
        (forward_shared_prefix), and the last answer token, which predicts nothing, is not
        fed; token level: one forward of each behaviour trajectory."""
        obs = [b.obs for b in batches]
        shapes = {(type(o), *(tuple(t.shape) for t in vars(o).values())) for o in obs}
        if len(shapes) > 1:
            return [self.logprobs(p, b) for p, b in zip(policies, batches)]
        net = stacked.Stacked(policies)
        if isinstance(obs[0], TokenObs):
            B, H, K = obs[0].candidates.shape
            tokens = stack_seeds([torch.cat([o.prompts, o.behaviour], 1)[:, :-1] for o in obs])
            logits = net.forward(tokens)[:, :, H - 1:]
            cands = stack_seeds([o.candidates for o in obs])
            return list(torch.log_softmax(logits, -1).gather(-1, cands).reshape(-1, B * H, K, 1).unbind())
        B, K, H = obs[0].answers.shape
        answers = stack_seeds([o.answers.reshape(B * K, H) for o in obs])
        first, rest = net.forward_shared_prefix(stack_seeds([o.prompts for o in obs]),
                                                answers[:, :, :-1], K)
        logits = torch.cat([first.repeat_interleave(K, 1).unsqueeze(2), rest], 2)
        logp = torch.log_softmax(logits, -1).gather(-1, answers.unsqueeze(-1))
        # unbind, not [s]: an index's backward writes a zero-filled gradient of all S seeds
        return list(logp.view(-1, B, K, H).unbind())

    def evaluate(self, policy: Transformer) -> None:
        return None  # science §Token sequences: no greedy or held-out evaluation on these tasks


@torch.no_grad()
def generate_seeds(policies: list[Transformer], prompts: torch.Tensor, k: int,
                   gens: list[torch.Generator], candidates: int = 0):
    """Sample k answers per prompt with a KV cache, for S seeds: prompts [S, B, H], one
    generator per seed; returns tokens and their rollout-time log-probs, both [S, B, k, H]
    (the log-probs serve as p_old: no second forward). The forwards and what follows them
    are one stacked computation; each seed's draws come from its own generator. A draw of
    one token is torch.multinomial's own arithmetic (`exp_noise`), stacked.

    With candidates=K (k = 1), every step draws K i.i.d. tokens with replacement, the
    first of which continues the trajectory; returns (tokens [S, B, 1, H], candidates
    [S, B, H, K], candidate log-probs [S, B, H, K])."""
    S, B, H = prompts.shape
    net = stacked.Stacked(policies)
    caches: list[list] = [[] for _ in range(net.layers)]
    logits = net.forward(prompts, caches)[:, :, -1]
    # The prompt is shared by the group: run it once, then fan the cache out. Cache rows
    # are seed-major (s*B + b): repeat_interleave keeps each seed's block.
    for c in caches:
        c[0] = tuple(x.repeat_interleave(k, 0) for x in c[0])
    logits = logits.repeat_interleave(k, 1)
    noise = None if candidates else exp_noise(gens, (B * k, logits.shape[-1]), H, logits)
    tokens, logps, cands = [], [], []
    for t in range(H):
        logp = torch.log_softmax(logits, -1)
        if candidates:  # with replacement: its own kernel, per seed
            tok = torch.stack([torch.multinomial(p, candidates, replacement=True, generator=g)
                               for p, g in zip(logp.exp().unbind(), gens)])
            cands.append(tok)
            logps.append(logp.gather(-1, tok))
            tok = tok[:, :, :1]
        else:
            tok = (logp.exp() / noise(t)).argmax(-1, keepdim=True)
            logps.append(logp.gather(-1, tok))
        tokens.append(tok)
        if t < H - 1:
            logits = net.forward(tok, caches, start=H + t)[:, :, -1]
    tokens = torch.cat(tokens, 2).view(S, B, k, H)
    if candidates:
        return tokens, torch.stack(cands, 2), torch.stack(logps, 2)
    return tokens, torch.cat(logps, 2).view(S, B, k, H)


def exp_noise(gens: list[torch.Generator], shape: tuple[int, ...], steps: int, like: torch.Tensor):
    """The Exp(1) noise of `steps` one-token draws per seed: noise(t) [S, *shape].
    torch.multinomial(p, 1, generator=g) is argmax(p / q), q = empty_like(p).exponential_(
    generator=g) (its sampling path for one sample), so argmax(p / noise(t)) draws what it
    draws from each seed's generator, in the same order. On the CPU one exponential_ of
    `steps` such tensors fills them as `steps` calls in a row would (and leaves the
    generator in the same state; tests/test_batched.py checks both), so each seed draws
    its episode's noise at once; elsewhere one draw per seed and step."""
    S = len(gens)
    if all(g.device.type == "cpu" for g in gens) and like.device.type == "cpu":
        noise = torch.empty(S, steps, *shape, dtype=like.dtype)
        for q, g in zip(noise.unbind(), gens):
            q.exponential_(1, generator=g)
        return lambda t: noise[:, t]

    def step(t: int) -> torch.Tensor:
        q = torch.empty(S, *shape, dtype=like.dtype, device=like.device)
        for qs, g in zip(q.unbind(), gens):
            qs.exponential_(1, generator=g)
        return q
    return step
