"""Token-sequence tasks (SPEC 3.1): copy, flip, reverse_copy, reverse_flip of a random
prompt, scored per token by bag_of_tokens, sequential or terminal reward.

Prompt x: H tokens uniform over V, fresh every episode. The policy writes H tokens
after it; answer token t is predicted at position H-1+t (no BOS, no separator).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from contract.batch import Batch, Request, Rollout
from contract.rng import Streams
from tasks import register
from tasks.transformer import Transformer

TARGETS = ("copy", "flip", "reverse_copy", "reverse_flip")
REWARDS = ("bag_of_tokens", "sequential", "terminal")


def target_tokens(prompts: torch.Tensor, target: str, vocab_size: int) -> torch.Tensor:
    y = prompts.flip(-1) if target.startswith("reverse_") else prompts
    return vocab_size - 1 - y if target.endswith("flip") else y


def token_rewards(correct: torch.Tensor, reward: str) -> torch.Tensor:
    """Per-token reward [..., H] from per-token correctness (SPEC 3.1)."""
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
    """Token-level candidates (SPEC 2): one behaviour trajectory per prompt and the K
    next-token candidates drawn at each of its H prefix states."""

    prompts: torch.Tensor
    """[B, H] tokens"""
    behaviour: torch.Tensor
    """[B, H] the trajectory's answer tokens (candidate 0 at every state)"""
    candidates: torch.Tensor
    """[B, H, K] tokens; the batch's group b*H + t is candidates[b, t]"""


def _positive(obj, *keys: str) -> None:
    for key in keys:
        if getattr(obj, key) < 1:
            raise ValueError(f"task.{key} must be a positive integer, got {getattr(obj, key)}")


@register("seq")
@dataclass(frozen=True)
class SeqTask:
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
        _positive(self, "sequence_length", "batch_size", "episodes")
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

    def rollout(self, policy: Transformer, req: Request, streams: Streams) -> Rollout:
        """Sequence groups of req.k sampled answers per prompt (every need but "label":
        the answer set is too large to enumerate), or token-level groups."""
        B, H, V, k = self.batch_size, self.sequence_length, self.vocab_size, req.k
        prompts = torch.randint(0, V, (B, H), generator=streams.data, device=streams.data.device)
        if req.level == "token":
            return self._token_rollout(policy, prompts, k, streams.action)
        tokens, logp = generate(policy, prompts, k, streams.action)
        correct = tokens == target_tokens(prompts, self.target, V).unsqueeze(1)
        rewards = token_rewards(correct, self.reward)
        obs = SeqObs(prompts, tokens)
        if k == 1:
            # Single-sample methods: reward_t minus its batch mean at that position (SPEC 2).
            advantages = rewards - rewards.mean(0, keepdim=True)
            batch = Batch.single_samples(logp[:, 0], rewards[:, 0], advantages[:, 0],
                                         correct.all(-1)[:, 0], obs=obs)
        else:
            batch = Batch.sampled_group(logp, rewards, correct.all(-1), obs=obs)
        # Kept on the device: reading them here would sync a GPU every episode.
        reward_mean = rewards.mean()
        return Rollout(batch, error=1.0 - reward_mean, reward_mean=reward_mean, rollouts=B * k)

    def _token_rollout(self, policy: Transformer, prompts: torch.Tensor, k: int,
                       gen: torch.Generator) -> Rollout:
        """SPEC 2 token-level groups: one behaviour trajectory per prompt, K next-token
        candidates per prefix state (candidate 0 the behaviour token), B*H groups."""
        B, H = prompts.shape
        behaviour, cands, logp = generate(policy, prompts, 1, gen, candidates=k)
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
        # SPEC 3.1: the error of token-level methods is the behaviour rollouts'.
        reward_mean = rewards[..., 0].mean()
        return Rollout(batch, error=1.0 - reward_mean, reward_mean=reward_mean, rollouts=B)

    def logprobs(self, policy: Transformer, batch: Batch) -> torch.Tensor:
        obs = batch.obs
        if isinstance(obs, TokenObs):  # token-level: one forward of the behaviour trajectory
            B, H, K = obs.candidates.shape
            logits = policy(torch.cat([obs.prompts, obs.behaviour], 1)[:, :-1])[:, H - 1:]
            logp = torch.log_softmax(logits, -1).gather(-1, obs.candidates)
            return logp.reshape(B * H, K, 1)
        B, K, H = obs.answers.shape
        answers = obs.answers.reshape(B * K, H)
        # The K answers of a prompt share it: run the prompt once, not K times. The
        # last answer token predicts nothing, so it is not fed.
        first, rest = policy.forward_shared_prefix(obs.prompts, answers[:, :-1], K)
        logits = torch.cat([first.repeat_interleave(K, 0).unsqueeze(1), rest], 1)
        logp = torch.log_softmax(logits, -1).gather(-1, answers.unsqueeze(-1))
        return logp.view(B, K, H)

    def evaluate(self, policy: Transformer) -> None:
        return None  # SPEC 3.1: no greedy or held-out evaluation on these tasks


@torch.no_grad()
def generate(policy: Transformer, prompts: torch.Tensor, k: int, gen: torch.Generator,
             candidates: int = 0):
    """Sample k answers per prompt with a KV cache; returns tokens and their rollout-time
    log-probs, both [B, k, H] (the log-probs serve as p_old: no second forward).

    With candidates=K (k = 1), every step draws K i.i.d. tokens with replacement, the
    first of which continues the trajectory; returns (tokens [B, 1, H], candidates
    [B, H, K], candidate log-probs [B, H, K])."""
    B, H = prompts.shape
    caches: list[list] = [[] for _ in policy.blocks]
    logits = policy(prompts, caches)[:, -1]
    # The prompt is shared by the group: run it once, then fan the cache out.
    for c in caches:
        c[0] = tuple(x.repeat_interleave(k, 0) for x in c[0])
    logits = logits.repeat_interleave(k, 0)
    tokens, logps, cands = [], [], []
    for t in range(H):
        logp = torch.log_softmax(logits, -1)
        if candidates:
            cand = torch.multinomial(logp.exp(), candidates, replacement=True, generator=gen)
            cands.append(cand)
            logps.append(logp.gather(-1, cand))
            tok = cand[:, :1]
        else:
            tok = torch.multinomial(logp.exp(), 1, generator=gen)
            logps.append(logp.gather(-1, tok))
        tokens.append(tok)
        if t < H - 1:
            logits = policy(tok, caches, start=H + t)[:, -1]
    tokens = torch.cat(tokens, 1).view(B, k, H)
    if candidates:
        return tokens, torch.stack(cands, 1), torch.stack(logps, 1)
    return tokens, torch.cat(logps, 1).view(B, k, H)
