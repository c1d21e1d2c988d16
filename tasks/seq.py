"""Token-sequence tasks (SPEC 3.1): copy, flip, reverse_copy, reverse_flip of a random
prompt, scored per token by bag_of_tokens, sequential or terminal reward.

Prompt x: H tokens uniform over V, fresh every episode. The policy writes H tokens
after it; answer token t is predicted at position H-1+t (no BOS, no separator).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from bench.batch import Batch, Rollout
from bench.rng import Streams
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

    def __post_init__(self):
        if self.target not in TARGETS:
            raise ValueError(f"task.target={self.target!r} is not one of {', '.join(TARGETS)}")
        if self.reward not in REWARDS:
            raise ValueError(f"task.reward={self.reward!r} is not one of {', '.join(REWARDS)}")
        _positive(self, "sequence_length", "batch_size", "episodes")
        if self.vocab_size < 2:
            raise ValueError(f"task.vocab_size must be at least 2, got {self.vocab_size}")

    def check_algorithm(self, name: str, k: int, level: str) -> None:
        if level != "sequence":
            raise ValueError(f"algo.level={level!r}: task {self.name!r} supports only "
                             "'sequence' for now")

    def make_policy(self, gen: torch.Generator) -> Transformer:
        return Transformer(self.vocab_size, 2 * self.sequence_length).init_(gen)

    def rollout(self, policy: Transformer, k: int, level: str, streams: Streams) -> Rollout:
        B, H, V = self.batch_size, self.sequence_length, self.vocab_size
        prompts = torch.randint(0, V, (B, H), generator=streams.data)
        tokens, logp = generate(policy, prompts, k, streams.action)
        correct = tokens == target_tokens(prompts, self.target, V).unsqueeze(1)
        rewards = token_rewards(correct, self.reward)
        # Single-sample methods: reward_t minus its batch mean at that position (SPEC 2).
        advantages = rewards - rewards.mean(0, keepdim=True) if k == 1 else None
        batch = Batch(logp_old=logp, token_rewards=rewards, scores=rewards.mean(-1),
                      success=correct.all(-1), advantages=advantages, obs=(prompts, tokens))
        reward_mean = float(rewards.mean())
        return Rollout(batch, error=1.0 - reward_mean, reward_mean=reward_mean, rollouts=B * k)

    def logprobs(self, policy: Transformer, batch: Batch) -> torch.Tensor:
        prompts, tokens = batch.obs
        B, K, H = tokens.shape
        seq = torch.cat([prompts.repeat_interleave(K, 0), tokens.reshape(B * K, H)], 1)
        logits = policy(seq[:, :-1])[:, H - 1:]  # the last answer token predicts nothing
        logp = torch.log_softmax(logits, -1).gather(-1, tokens.reshape(B * K, H, 1))
        return logp.view(B, K, H)

    def evaluate(self, policy: Transformer) -> None:
        return None  # SPEC 3.1: no greedy or held-out evaluation on these tasks


@torch.no_grad()
def generate(policy: Transformer, prompts: torch.Tensor, k: int,
             gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample k answers per prompt with a KV cache; returns tokens and their rollout-time
    log-probs, both [B, k, H] (the log-probs serve as p_old: no second forward)."""
    B, H = prompts.shape
    caches: list[list] = [[] for _ in policy.blocks]
    logits = policy(prompts, caches)[:, -1]
    # The prompt is shared by the group: run it once, then fan the cache out.
    for c in caches:
        c[0] = tuple(x.repeat_interleave(k, 0) for x in c[0])
    logits = logits.repeat_interleave(k, 0)
    tokens, logps = [], []
    for t in range(H):
        logp = torch.log_softmax(logits, -1)
        tok = torch.multinomial(logp.exp(), 1, generator=gen)
        tokens.append(tok)
        logps.append(logp.gather(-1, tok))
        if t < H - 1:
            logits = policy(tok, caches, start=H + t)[:, -1]
    return (torch.cat(tokens, 1).view(B, k, H), torch.cat(logps, 1).view(B, k, H))
