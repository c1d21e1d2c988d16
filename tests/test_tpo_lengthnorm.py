"""TPO's candidate log-prob, summed (the paper's, the default) or length-normalised
(algo.logp_norm=mean, the closed TRL PR's default): hand-computed where they differ
(T > 1), bit-identity of "sum" with the loss as it was, and a knob that leaves the
completed runs' hashes alone."""
import math

import pytest
import torch

from tpo_bench.algorithms.tpo import TPO, tpo_target
from tpo_bench.bench.build import ConfigError, build
from conftest import compose
from tpo_bench.contract.batch import Batch

D = torch.float64


def two_step_group():
    """K = 2 candidates of T = 2 tokens; candidate 0 (the success) at token probabilities
    (0.5, 0.5), candidate 1 at (0.25, 0.25)."""
    logp_old = torch.log(torch.tensor([[[0.5, 0.5], [0.25, 0.25]]], dtype=D))
    scores = torch.tensor([[1.0, 0.0]], dtype=D)
    return Batch.sampled_group(logp_old, scores.unsqueeze(-1).expand(1, 2, 2), scores > 0, scores=scores)


def test_sum_and_mean_by_hand():
    """u = (1, -1). sum: logp = (log 1/4, log 1/16), renormalised p_old = (0.8, 0.2),
    q = (0.8 e, 0.2 / e) / 2.2482014 = (0.9672734, 0.0327266).
    mean: logp = (log 1/2, log 1/4), p_old = (2/3, 1/3),
    q = (2/3 e, 1/3 / e) / 1.9348144 = (0.9366211, 0.0633789).
    On-policy the gradient on every token is (p_k - q_k), divided by T = 2 for mean."""
    b = two_step_group()
    q_sum = [0.9672734, 0.0327266]
    q_mean = [0.9366211, 0.0633789]
    for norm, p, q, per_token in (("sum", [0.8, 0.2], q_sum, 1.0), ("mean", [2 / 3, 1 / 3], q_mean, 0.5)):
        z = b.logp_old.clone().requires_grad_(True)
        out = TPO(k=2, logp_norm=norm).loss(b, z)
        out.loss.backward()
        assert out.metrics["q_success"] == pytest.approx(q[0], abs=1e-6)
        assert out.loss.item() == pytest.approx(-(q[0] * math.log(p[0]) + q[1] * math.log(p[1])), abs=1e-6)
        expected = torch.tensor([[[p[0] - q[0]] * 2, [p[1] - q[1]] * 2]], dtype=D) * per_token
        assert torch.allclose(z.grad, expected, atol=1e-6)


def test_mean_normalises_the_anchor_and_the_fit_alike():
    b = two_step_group()
    q = tpo_target(b.logp_old.mean(-1), b.scores)
    z = torch.tensor([[[-0.3, -1.2], [-2.0, -0.1]]], dtype=D, requires_grad=True)
    TPO(k=2, logp_norm="mean").loss(b, z).loss.backward()
    p = torch.softmax(z.mean(-1), -1)
    assert torch.allclose(z.grad, ((p - q) / 2).unsqueeze(-1).expand(1, 2, 2).detach(), atol=1e-12)


def _loss_as_it_was(batch, logp, eta=1.0, anchor=True):
    """TPO's loss with summed candidate log-probs, written without the knob."""
    q = tpo_target(batch.seq_logp_old(), batch.scores, eta, anchor)
    return -(q * torch.log_softmax(logp.sum(-1), -1)).sum(-1).mean()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("anchor", [True, False])
def test_sum_is_bit_identical_to_the_loss_as_it_was(dtype, anchor):
    g = torch.Generator().manual_seed(3)
    N, K, T = 5, 8, 6
    old = torch.log_softmax(torch.randn(N, K, T, 2, generator=g, dtype=dtype), -1)[..., 0]
    scores = torch.rand(N, K, generator=g, dtype=dtype)
    b = Batch.sampled_group(old, scores.unsqueeze(-1).expand(N, K, T), scores > 0.5, scores=scores)
    z1 = (old + 0.1 * torch.randn(N, K, T, generator=g, dtype=dtype)).requires_grad_(True)
    z2 = z1.detach().clone().requires_grad_(True)
    assert TPO() == TPO(logp_norm="sum")
    new = TPO(eta=0.5, anchor=anchor).loss(b, z1).loss
    old_loss = _loss_as_it_was(b, z2, eta=0.5, anchor=anchor)
    assert torch.equal(new, old_loss)
    new.backward()
    old_loss.backward()
    assert torch.equal(z1.grad, z2.grad)


def test_one_step_candidates_are_the_same_either_way():
    g = torch.Generator().manual_seed(4)
    old = torch.log_softmax(torch.randn(3, 10, generator=g), -1)
    s = torch.randn(3, 10, generator=g)
    b = Batch.action_set(old, s, s > 0)
    z = old.unsqueeze(-1) + 0.2
    assert torch.equal(TPO(logp_norm="mean").loss(b, z).loss, TPO().loss(b, z).loss)


def test_a_bad_choice_is_refused_naming_the_key_and_the_choices(tmp_path):
    with pytest.raises(ValueError, match=r"algo.logp_norm='token_mean' is not one of sum, mean"):
        TPO(logp_norm="token_mean")
    with pytest.raises(ConfigError, match=r"algo.logp_norm='max' is not one of sum, mean"):
        build(compose("task=demo", "algo=tpo", "algo.logp_norm=max", f"output_root={tmp_path}"))


def test_the_default_leaves_every_completed_runs_hash(tmp_path):
    """IF_SET: logp_norm is hashed only away from "sum"; tpo_lennorm is
    `algo=tpo algo.logp_norm=mean` under another name, one science, one hash."""
    def spec(*o):
        return build(compose(*o, f"output_root={tmp_path}"))
    plain = spec("task=reverse_h10", "algo=tpo")
    assert "logp_norm" not in plain.config["algo"]
    assert spec("task=reverse_h10", "algo=tpo", "algo.logp_norm=sum").config_hash == plain.config_hash
    mean = spec("task=reverse_h10", "algo=tpo", "algo.logp_norm=mean")
    assert mean.config_hash != plain.config_hash and mean.config["algo"]["logp_norm"] == "mean"
    assert spec("task=reverse_h10", "algo=tpo_lennorm").config_hash == mean.config_hash
