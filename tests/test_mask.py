"""The completion mask (contract.batch.Batch.mask, the LLM family's): padding after a
candidate's end changes no algorithm's loss, and candidates of different lengths are
averaged over their own real steps where a method takes a mean over steps."""
import dataclasses
from pathlib import Path

import pytest
import torch

from tpo_bench.algorithms import ALGORITHMS
from tpo_bench.algorithms.tpo import TPO
from tpo_bench.algorithms.clipped import ClippedSurrogate
from tpo_bench.bench.build import instantiate
from tpo_bench.analysis.configs import algo_defaults
from tpo_bench.bench.engine import micro_batches
from tpo_bench.contract.batch import reference_kl
from tpo_bench.contract.batch import Batch

D = torch.float64
REPO = Path(__file__).resolve().parent.parent
PRESETS = sorted(p.stem for p in (REPO / "conf" / "algo").glob("*.yaml"))


def algo(name: str):
    # The preset over its dataclass's defaults, read directly (a Hydra compose per preset
    # costs seconds).
    return instantiate(ALGORITHMS, dict(algo_defaults(name)), "algo")[1]


SEQUENCE_PRESETS = [n for n in PRESETS if getattr(algo(n), "level", "sequence") == "sequence"
                    and getattr(algo(n), "needs", "") != "label"]


def random_case(N=3, K=4, T=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    logp_old = -torch.rand(N, K, T, generator=g, dtype=D) * 2
    logp = logp_old + 0.3 * torch.randn(N, K, T, generator=g, dtype=D)
    scores = (torch.rand(N, K, generator=g, dtype=D) > 0.5).to(D)
    scores.view(-1)[:2] = torch.tensor([1.0, 0.0], dtype=D)  # scores that vary
    return logp_old, logp, scores


def batch_of(logp_old, scores, K, mask=None):
    m = torch.ones_like(logp_old) if mask is None else mask.to(D)
    rewards = scores.unsqueeze(-1) * m
    if K == 1:
        adv = (scores - scores.mean()).unsqueeze(-1) * m
        return Batch.single_samples(logp_old[:, 0], rewards[:, 0], adv[:, 0], scores[:, 0] >= 1,
                                    scores=scores[:, 0], mask=None if mask is None else mask[:, 0])
    return Batch.sampled_group(logp_old, rewards, scores >= 1, scores=scores, mask=mask)


def pad(x, extra):
    return torch.cat([x, torch.zeros(*x.shape[:-1], extra, dtype=x.dtype)], -1)


@pytest.mark.parametrize("name", SEQUENCE_PRESETS)
def test_padding_after_the_end_changes_no_loss(name):
    """The same candidates with two masked padding steps appended (0 in every per-step
    tensor, as the LLM task writes them): the same loss. A method that averages over all
    T steps instead of the real ones, or counts the padding, differs."""
    a = algo(name)
    if getattr(a, "max_len", 0) == 0 and getattr(a, "aggregation", "") == "constant":
        a = dataclasses.replace(a, max_len=6)  # Dr. GRPO's T_max is the budget, not the batch's T
    K = a.k
    logp_old, logp, scores = random_case(K=K)
    plain = a.loss(batch_of(logp_old, scores, K), logp).loss
    mask = torch.cat([torch.ones(*logp_old.shape, dtype=torch.bool),
                      torch.zeros(*logp_old.shape[:-1], 2, dtype=torch.bool)], -1)
    padded = a.loss(batch_of(pad(logp_old, 2), scores, K, mask), pad(logp, 2)).loss
    assert torch.allclose(plain, padded, rtol=1e-12, atol=1e-12), (name, plain, padded)


def test_length_normalised_tpo_divides_by_each_candidates_own_length():
    """tpo_lennorm with two candidates of lengths 1 and 3: each log-prob is its own mean."""
    logp_old = torch.tensor([[[-1.0, 0, 0], [-0.5, -0.5, -2.0]]], dtype=D)
    mask = torch.tensor([[[True, False, False], [True, True, True]]])
    scores = torch.tensor([[1.0, 0.0]], dtype=D)
    batch = batch_of(logp_old, scores, 2, mask)
    q = TPO(k=2, logp_norm="mean").loss(batch, logp_old)
    # By hand: candidate log-probs -1 and -1; u = (1, -1); q = softmax(log_softmax(-1, -1) + u).
    expect_q = torch.softmax(torch.tensor([1.0, -1.0], dtype=D), -1)
    assert q.metrics["q_success"] == pytest.approx(float(expect_q[0]))


def test_gspo_sequence_ratio_is_the_mean_over_real_tokens():
    from tpo_bench.algorithms.clipped import log_ratio
    d = torch.tensor([[[0.3, 0.0, 0.0], [0.1, 0.2, 0.3]]], dtype=D)
    mask = torch.tensor([[[True, False, False], [True, True, True]]])
    r = log_ratio(d, torch.zeros_like(d), "sequence", mask)
    assert torch.allclose(r[0, 0], torch.full((3,), 0.3, dtype=D))
    assert torch.allclose(r[0, 1], torch.full((3,), 0.2, dtype=D))


def test_token_mean_counts_real_tokens_only():
    """DAPO's token-mean over candidates of lengths 1 and 3 divides by 4 real tokens."""
    logp_old = torch.zeros(1, 2, 3, dtype=D)
    mask = torch.tensor([[[True, False, False], [True, True, True]]])
    scores = torch.tensor([[1.0, 0.0]], dtype=D)
    a = ClippedSurrogate(k=2, aggregation="token-mean", advantage="group_mean")
    z = logp_old.clone().requires_grad_(True)
    a.loss(batch_of(logp_old, scores, 2, mask), z).loss.backward()
    # d loss / d logp_it = -A_i / 4 at the rollout policy (ratio 1), A = (0.5, -0.5).
    expect = torch.tensor([[[-0.125, 0, 0], [0.125, 0.125, 0.125]]], dtype=D)
    assert torch.allclose(z.grad, expect)


def test_micro_batches_keep_groups_whole_and_weigh_by_share():
    logp_old, logp, scores = random_case(N=4, K=2)
    batch = batch_of(logp_old, scores, 2)
    parts = micro_batches(batch, 1)
    assert [p.num_groups for p, _ in parts] == [1, 1, 1, 1]
    assert [s for _, s in parts] == [0.25] * 4
    a = TPO(k=2)
    whole = a.loss(batch, logp).loss
    accumulated = sum(a.loss(p, logp[i:i + 1]).loss * s for i, (p, s) in enumerate(parts))
    assert torch.allclose(whole, accumulated)
    assert [p.num_groups for p, _ in micro_batches(batch, 3)] == [3, 1]
    assert len(micro_batches(batch, 0)) == 1


def test_reference_kl_is_zero_at_the_reference_and_positive_away_from_it():
    logp_old, logp, scores = random_case(K=2)
    mask = torch.ones(logp_old.shape, dtype=torch.bool)
    mask[:, :, -1] = False
    b = Batch.sampled_group(logp_old * mask, scores.unsqueeze(-1) * mask, scores >= 1, scores=scores,
                            mask=mask, logp_ref=logp_old * mask)
    assert float(reference_kl(b, logp_old * mask)) == 0.0
    kl = reference_kl(b, logp * mask)
    d = (logp_old - logp)[mask]
    assert float(kl) == pytest.approx(float((d.exp() - d - 1).mean()))
    assert float(kl) > 0
