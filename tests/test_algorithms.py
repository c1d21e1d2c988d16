"""Losses on hand-computed groups (science §Groups and scores, §Update rules), and the Batch they read: its four named
constructors, what each field means, and the two Protocols."""
import dataclasses
import math

import pytest
import torch
import yaml

from tpo_bench.algorithms import ALGORITHMS
from conftest import REPO
from tpo_bench.algorithms._common import standardise
from tpo_bench.algorithms.ce import CE
from tpo_bench.algorithms.dg import DG, dg_gate
from tpo_bench.algorithms.grpo import GRPO, grpo_advantages
from tpo_bench.algorithms.pg import PG
from tpo_bench.algorithms.ppo import PPO
from tpo_bench.algorithms.tpo import TPO, tpo_target
from tpo_bench.contract.batch import Algorithm, Batch, Task
from tpo_bench.tasks import TASKS


def group_batch(logp_old, scores, success=None, T=1):
    """Batch of N groups whose candidates are one-step (T = 1) unless T is given."""
    logp_old = torch.as_tensor(logp_old, dtype=torch.float64)
    scores = torch.as_tensor(scores, dtype=torch.float64)
    if success is None:
        success = scores >= 1
    rewards = scores if logp_old.dim() == 2 else scores.unsqueeze(-1).expand_as(logp_old)
    return Batch.sampled_group(logp_old, rewards, torch.as_tensor(success), scores=scores)


# ------------------------------------------------------------------ standardisation

def test_standardise_population_std():
    s = torch.tensor([[1.0, 0.0, 0.0, 0.0]])
    u = standardise(s)
    std = math.sqrt(0.25 * 0.75)  # population std, not the K-1 one
    assert torch.allclose(u, (s - 0.25) / std)
    assert torch.allclose(u.pow(2).mean(), torch.tensor(1.0))


def test_standardise_small_std_returns_centred_unscaled():
    s = torch.tensor([[0.5, 0.5, 0.5], [1.0, 1.0 + 1e-7, 1.0]])
    u = standardise(s)
    assert torch.equal(u[0], torch.zeros(3))
    # std below 1e-6: centred but not divided by the tiny std (which would blow up)
    assert torch.allclose(u[1], s[1] - s[1].mean())
    assert u[1].abs().max() < 1e-6


# ------------------------------------------------------------------ TPO

def test_tpo_all_fail_group_gives_p_old_and_zero_gradient():
    p_old = torch.tensor([[0.1, 0.2, 0.3, 0.4]], dtype=torch.float64)
    q = tpo_target(p_old.log(), torch.zeros(1, 4, dtype=torch.float64))
    assert torch.allclose(q, p_old)
    z = p_old.log().clone().requires_grad_(True)
    out = TPO(k=4).loss(group_batch(p_old.log(), torch.zeros(1, 4)), z.unsqueeze(-1))
    out.loss.backward()
    assert z.grad.abs().max() < 1e-12


def test_tpo_lone_correct_answer_at_3_percent_gets_about_24_percent():
    p_old = torch.tensor([[0.03] + [0.97 / 3] * 3], dtype=torch.float64)
    q = tpo_target(p_old.log(), torch.tensor([[1.0, 0, 0, 0]], dtype=torch.float64))
    assert q[0, 0].item() == pytest.approx(0.2374, abs=5e-4)
    assert torch.allclose(q.sum(-1), torch.ones(1, dtype=torch.float64))


def test_tpo_gradient_wrt_group_logits_is_p_minus_q():
    torch.manual_seed(0)
    N, K = 3, 5
    logp_old = torch.log_softmax(torch.randn(N, K, dtype=torch.float64), -1)
    scores = torch.rand(N, K, dtype=torch.float64)
    z = torch.randn(N, K, dtype=torch.float64, requires_grad=True)
    TPO(k=K).loss(group_batch(logp_old, scores), z.unsqueeze(-1)).loss.backward()
    q = tpo_target(logp_old, scores)
    # the loss is a mean over groups, hence the 1/N
    assert torch.allclose(z.grad, (torch.softmax(z, -1) - q).detach() / N, atol=1e-12)


def test_tpo_eta_and_sequence_logp_sum():
    logp_old = torch.log(torch.tensor([[0.5, 0.25, 0.25]], dtype=torch.float64))
    scores = torch.tensor([[0.0, 1.0, 0.0]], dtype=torch.float64)
    u = standardise(scores)
    q = tpo_target(logp_old, scores, eta=0.5)
    assert torch.allclose(q, torch.softmax(logp_old + u / 0.5, -1))
    # A sequence candidate's log-prob is the sum of its token log-probs.
    tok = torch.log(torch.full((1, 3, 2), 0.5, dtype=torch.float64))
    b = Batch.sampled_group(tok, torch.zeros(1, 3, 2), scores > 0, scores=scores)
    assert torch.allclose(b.seq_logp_old(), torch.full((1, 3), 2 * math.log(0.5), dtype=torch.float64))


def test_tpo_diagnostics_split_target_mass_by_success():
    p_old = torch.tensor([[0.03] + [0.97 / 3] * 3], dtype=torch.float64)
    out = TPO(k=4).loss(group_batch(p_old.log(), [[1.0, 0, 0, 0]]), p_old.log().unsqueeze(-1))
    assert out.metrics["q_success"] == pytest.approx(0.2374, abs=5e-4)
    assert out.metrics["q_fail"] == pytest.approx((1 - 0.2374) / 3, abs=5e-4)


# ------------------------------------------------------------------ GRPO

def test_grpo_advantages_unthresholded():
    s = torch.tensor([[1.0, 0, 0, 0], [0.3, 0.3, 0.3, 0.3]], dtype=torch.float64)
    A = grpo_advantages(s)
    assert torch.allclose(A[0], (s[0] - 0.25) / (math.sqrt(0.1875) + 1e-8))
    assert torch.equal(A[1], torch.zeros(4, dtype=torch.float64))


def test_grpo_clip_and_kl_terms_by_hand():
    logp_old = torch.log(torch.tensor([[0.2, 0.2, 0.3, 0.3]], dtype=torch.float64))
    scores = torch.tensor([[1.0, 0.0, 1.0, 0.0]], dtype=torch.float64)
    A = grpo_advantages(scores)[0]  # +1, -1, +1, -1
    d = torch.tensor([0.5, 0.5, -0.05, -0.5], dtype=torch.float64)
    r = d.exp()
    clip = r.clamp(0.8, 1.2)
    surr = torch.minimum(r * A, clip * A)
    # positive A, r = 1.65 > 1.2: clipped at 1.2; negative A, r = 1.65: unclipped -1.65
    assert surr[0].item() == pytest.approx(1.2)
    assert surr[1].item() == pytest.approx(-math.exp(0.5))
    kl = torch.exp(-d) + d - 1
    expected = -(surr - 0.04 * kl).sum()
    out = GRPO(k=4).loss(group_batch(logp_old, scores), (logp_old[0] + d).view(1, 4, 1))
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-10)
    out0 = GRPO(k=4, kl_coef=0.0).loss(group_batch(logp_old, scores), (logp_old[0] + d).view(1, 4, 1))
    assert out0.loss.item() == pytest.approx(-surr.sum().item(), rel=1e-10)
    assert out.metrics["clip_frac"] == pytest.approx(0.75)  # |r-1| > 0.2 for 3 of 4
    assert out.metrics["kl"] == pytest.approx(kl.mean().item())


def test_grpo_log_ratio_clamped_at_20():
    logp_old = torch.zeros(1, 2, 1, dtype=torch.float64)
    logp = torch.tensor([[[-100.0], [0.0]]], dtype=torch.float64)
    out = GRPO(k=2).loss(group_batch(logp_old[..., 0], [[1.0, 0.0]]), logp)
    d = torch.tensor([-20.0, 0.0], dtype=torch.float64)
    # A = (+1, -1); candidate 1 sits at r = 1 with no KL and contributes -1
    expected = -((torch.minimum(d.exp(), d.exp().clamp(0.8, 1.2))[0]) - 0.04 * (math.exp(20) - 20 - 1) - 1)
    assert math.isfinite(out.loss.item())
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-9)


def test_grpo_sums_over_group_and_averages_over_groups():
    logp_old = torch.log(torch.full((2, 4), 0.25, dtype=torch.float64))
    scores = torch.tensor([[1.0, 0, 0, 0], [1.0, 1.0, 0, 0]], dtype=torch.float64)
    d = torch.full((2, 4), 0.1, dtype=torch.float64)
    out = GRPO(k=4, kl_coef=0.0).loss(group_batch(logp_old, scores), (logp_old + d).unsqueeze(-1))
    A = grpo_advantages(scores)
    r = d.exp()
    per_group = torch.minimum(r * A, r.clamp(0.8, 1.2) * A).sum(-1)
    assert out.loss.item() == pytest.approx(-per_group.mean().item(), rel=1e-10)


# ------------------------------------------------------------------ single-sample

def single_batch(logp_old, advantages):
    logp_old = torch.as_tensor(logp_old, dtype=torch.float64)
    adv = torch.as_tensor(advantages, dtype=torch.float64)
    return Batch.single_samples(logp_old, torch.zeros_like(logp_old), adv,
                                torch.zeros(len(logp_old), dtype=torch.bool))


def test_dg_gate_values():
    assert dg_gate(torch.tensor(0.0), torch.tensor(3.0)).item() == pytest.approx(0.5)
    assert dg_gate(torch.tensor(1.0), torch.tensor(2.0)).item() == pytest.approx(1 / (1 + math.exp(-2)))
    assert dg_gate(torch.tensor(-1.0), torch.tensor(2.0), eta=2.0).item() == pytest.approx(1 / (1 + math.e))


def test_dg_loss_gradient_is_gated_reinforce():
    logp_old = [[math.log(0.9), math.log(0.1)], [math.log(0.5), math.log(0.5)]]
    adv = [[0.5, -0.5], [1.0, 2.0]]
    b = single_batch(logp_old, adv)
    z = b.logp_old.clone().requires_grad_(True)
    DG().loss(b, z).loss.backward()
    A = b.advantages
    w = torch.sigmoid(A * -b.logp_old)
    assert torch.allclose(z.grad, -(w * A) / 2)  # mean over the 2 samples
    assert DG().epochs == 1


def test_pg_loss_sum_over_tokens_mean_over_batch():
    b = single_batch([[-1.0, -2.0], [-0.5, -0.5]], [[1.0, 2.0], [-1.0, 0.5]])
    out = PG().loss(b, b.logp_old)
    assert out.loss.item() == pytest.approx(-((1 * -1 + 2 * -2) + (-1 * -0.5 + 0.5 * -0.5)) / 2)


def test_ppo_per_token_clip_no_clamp():
    b = single_batch([[0.0, 0.0]], [[1.0, -1.0]])
    logp = torch.tensor([[[0.5, 0.5]]], dtype=torch.float64)
    out = PPO().loss(b, logp)
    r = math.exp(0.5)
    assert out.loss.item() == pytest.approx(-(1.2 * 1 + r * -1))
    assert out.metrics["clip_frac"] == pytest.approx(1.0)


def test_single_sample_methods_need_task_advantage():
    b = group_batch([[0.0]], [[1.0]])
    with pytest.raises(ValueError, match="advantages"):
        PG().loss(b, b.logp_old)


# ------------------------------------------------------------------ the Batch's families

def test_single_samples_put_one_candidate_per_context():
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -0.25], [-3.0, -1.0]])
    rewards = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
    adv = torch.tensor([[0.5, -0.5], [0.25, 0.75], [-1.0, -2.0]])
    b = Batch.single_samples(logp, rewards, adv, rewards.bool().all(-1))
    assert b.logp_old.shape == (3, 1, 2) and b.num_groups == 3 and b.group_size == 1
    assert torch.equal(b.logp_old[:, 0], logp) and torch.equal(b.token_rewards[:, 0], rewards)
    assert torch.equal(b.advantages[:, 0], adv)
    assert torch.equal(b.scores, torch.tensor([[0.5], [1.0], [0.0]]))  # mean reward over steps
    assert b.success.tolist() == [[False], [True], [False]]
    assert b.sampled is None and b.probs is None and b.label is None
    # a one-step task passes [N]: T = 1
    one = Batch.single_samples(logp[:, 0], rewards[:, 0], adv[:, 0], rewards[:, 0] > 0)
    assert one.logp_old.shape == (3, 1, 1) and torch.equal(one.scores[:, 0], rewards[:, 0])
    assert torch.equal(one.advantages[:, 0, 0], adv[:, 0])


def test_sampled_group_keeps_the_steps_or_adds_one():
    logp = torch.log(torch.tensor([[[0.5, 0.5], [0.25, 1.0]]]))
    rewards = torch.tensor([[[1.0, 0.0], [1.0, 1.0]]])
    b = Batch.sampled_group(logp, rewards, rewards.bool().all(-1))
    assert b.logp_old.shape == (1, 2, 2) and b.advantages is None
    assert torch.equal(b.scores, torch.tensor([[0.5, 1.0]]))
    assert torch.equal(b.seq_logp_old(), logp.sum(-1))
    one = Batch.sampled_group(logp[..., 0], rewards[..., 0], rewards[..., 0] > 0)
    assert one.logp_old.shape == (1, 2, 1) and torch.equal(one.scores, rewards[..., 0])
    assert one.candidate_weights() == 1.0


def test_action_set_with_the_sampled_actions_indicator():
    logp = torch.log_softmax(torch.randn(3, 4, generator=torch.Generator().manual_seed(0)), -1)
    a = torch.tensor([2, 0, 3])
    onehot = torch.nn.functional.one_hot(a, 4).float()
    scores = torch.tensor([[0.5], [-0.25], [1.0]]) * onehot
    b = Batch.action_set(logp, scores, scores > 0, sampled=a)
    assert b.logp_old.shape == (3, 4, 1) and torch.equal(b.logp_old[..., 0], logp)
    assert b.sampled.dtype == torch.bool and torch.equal(b.sampled, onehot.bool())
    assert b.probs is None
    assert torch.equal(b.candidate_weights(), onehot)
    assert torch.equal(b.token_rewards[..., 0], scores)  # rewards default to the scores
    r = torch.tensor([[1.0], [0.0], [1.0]]) * onehot
    assert torch.equal(Batch.action_set(logp, scores, r > 0, rewards=r).token_rewards[..., 0], r)


def test_action_set_with_population_probabilities():
    """probs weigh each action's term and set GRPO's statistics: on one context with
    p = (0.5, 0.3, 0.2) and scores (1, 0, 0) the advantage is (s - 0.5) / 0.5."""
    p = torch.tensor([[0.5, 0.3, 0.2]], dtype=torch.float64)
    s = torch.tensor([[1.0, 0.0, 0.0]], dtype=torch.float64)
    b = Batch.action_set(p.log(), s, s > 0, probs=p, advantages=s)
    assert b.sampled is None and torch.equal(b.candidate_weights(), p)
    assert torch.equal(b.advantages[..., 0], s)
    z = p.log().unsqueeze(-1).clone().requires_grad_(True)
    GRPO(kl_coef=0.0).loss(b, z).loss.backward()
    A = (s - 0.5) / (0.5 + 1e-8)
    assert torch.allclose(z.grad[..., 0], -(p * A), atol=1e-12)  # r = 1: d r / d z = 1
    z.grad = None
    PG().loss(b, z).loss.backward()  # the task's advantage, weighted by p
    assert torch.allclose(z.grad[..., 0], -(p * s), atol=1e-12)


def test_a_batch_weighs_by_the_indicator_or_the_probabilities_not_both():
    logp = torch.log(torch.full((1, 2), 0.5))
    with pytest.raises(ValueError, match="not both"):
        Batch.action_set(logp, torch.zeros(1, 2), torch.zeros(1, 2, dtype=torch.bool),
                         sampled=torch.tensor([0]), probs=logp.exp())


def test_labelled_batch_and_ce_read_the_label():
    logp = torch.log_softmax(torch.randn(2, 3, dtype=torch.float64,
                                         generator=torch.Generator().manual_seed(1)), -1)
    label = torch.tensor([2, 0])
    b = Batch.labelled(logp, label)
    onehot = torch.nn.functional.one_hot(label, 3).double()
    assert torch.equal(b.label, label) and torch.equal(b.scores, onehot)
    assert torch.equal(b.success, onehot > 0) and torch.equal(b.token_rewards[..., 0], onehot)
    z = torch.randn(2, 3, 1, dtype=torch.float64, requires_grad=True)
    CE().loss(b, z).loss.backward()
    assert torch.allclose(z.grad[..., 0], (torch.softmax(z[..., 0], -1) - onehot).detach() / 2)
    # the label, not the scores: other scores leave CE's loss as it was
    other = dataclasses.replace(b, scores=torch.rand(2, 3, dtype=torch.float64))
    assert CE().loss(other, z).loss.item() == CE().loss(b, z).loss.item()
    with pytest.raises(ValueError, match="batch.label"):
        CE().loss(dataclasses.replace(b, label=None), z)


def test_every_registered_algorithm_and_task_meets_its_protocol():
    for name in ALGORITHMS.names():
        assert isinstance(ALGORITHMS.get(name)(), Algorithm), name
    # The LLM task has no default model: it is given one (a directory, or architecture facts).
    micro = yaml.safe_load((REPO / "conf" / "task" / "arch" / "micro_qwen3.yaml").read_text())
    needs = {"llm": {"arch": micro, "train_size": 8, "test_size": 2}}
    for name in TASKS.names():
        assert isinstance(TASKS.get(name)(**needs.get(name, {})), Task), name
    assert not isinstance(object(), Algorithm) and not isinstance(CE(), Task)
