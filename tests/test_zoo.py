"""The group-RL baseline zoo on hand-computed batches: the advantage
estimators, the aggregation modes (where they differ: a mask, a T_max above T; where
they coincide: this harness's equal lengths), the gradient each loss puts on the
candidates' log-probs, and each clip side."""
import math

import pytest
import torch

from tpo_bench.algorithms import ALGORITHMS
from tpo_bench.algorithms._advantages import (ADVANTAGES, batch_std, group_mean_centred, group_std, maxrl,
                                    reinforce_pp_baseline, rloo)
from tpo_bench.algorithms._aggregate import AGGREGATIONS, aggregate
from tpo_bench.algorithms.cispo import CISPO
from tpo_bench.algorithms.clipped import ClippedSurrogate
from tpo_bench.algorithms.gpg import GPG, gpg_alpha
from tpo_bench.bench.build import ConfigError, build
from tpo_bench.bench.optim import build_optimizer
from tpo_bench.bench.engine import train_episode
from conftest import compose
from tpo_bench.contract.batch import Batch
from tpo_bench.contract.rng import Streams

D = torch.float64
S = torch.tensor([[1.0, 0, 0, 0], [1.0, 1.0, 0, 0], [0.0, 0, 0, 0]], dtype=D)
NEW = ("dr_grpo", "dapo", "rloo", "gspo", "maxrl", "reinforce_pp_baseline", "cispo", "gpg")


def group_batch(logp_old, scores):
    """N groups of K candidates of T steps (logp_old [N, K, T]); rewards = the score on
    every step, success = score 1."""
    logp_old = torch.as_tensor(logp_old, dtype=D)
    scores = torch.as_tensor(scores, dtype=D)
    rewards = scores.unsqueeze(-1).expand_as(logp_old)
    return Batch.sampled_group(logp_old, rewards, scores >= 1, scores=scores)


def grad_on_logp(algo, batch, logp):
    z = torch.as_tensor(logp, dtype=D).clone().requires_grad_(True)
    out = algo.loss(batch, z)
    out.loss.backward()
    return out, z.grad


# ------------------------------------------------------------------ advantages

def test_group_mean_and_group_std_by_hand():
    centred = torch.tensor([[0.75, -0.25, -0.25, -0.25], [0.5, 0.5, -0.5, -0.5], [0.0] * 4], dtype=D)
    assert torch.allclose(group_mean_centred(S), centred)
    std = torch.tensor([[math.sqrt(3) / 4], [0.5], [0.0]], dtype=D)  # population std
    assert torch.allclose(group_std(S), centred / (std + 1e-8))
    assert torch.equal(group_std(S)[2], torch.zeros(4, dtype=D))


def test_rloo_is_the_leave_one_out_baseline():
    A = rloo(S)
    assert torch.allclose(A, torch.tensor([[1, -1 / 3, -1 / 3, -1 / 3], [2 / 3, 2 / 3, -2 / 3, -2 / 3],
                                           [0.0] * 4], dtype=D))
    for n in range(3):
        for i in range(4):
            others = torch.cat([S[n, :i], S[n, i + 1:]])
            assert A[n, i].item() == pytest.approx((S[n, i] - others.mean()).item())


def test_maxrl_divides_by_the_mean_reward_and_is_zero_without_success():
    assert torch.allclose(maxrl(S), torch.tensor([[3.0, -1, -1, -1], [1.0, 1, -1, -1], [0.0] * 4], dtype=D))
    dense = torch.tensor([[0.5, 0.25, 0.0, 0.25]], dtype=D)  # mean 0.25
    assert torch.allclose(maxrl(dense), torch.tensor([[1.0, 0.0, -1.0, 0.0]], dtype=D))


def test_batch_std_and_reinforce_pp_baseline_divide_by_different_spreads():
    centred = group_mean_centred(S)
    # TRL scale_rewards="batch": the std of the 12 raw scores (mean 1/4, var 3/16)
    assert torch.allclose(batch_std(S), centred / (math.sqrt(3 / 16) + 1e-8))
    # REINFORCE++-baseline: whiten the centred scores (mean 0, var 1.75 / 12)
    assert torch.allclose(reinforce_pp_baseline(S), centred / math.sqrt(1.75 / 12 + 1e-8))
    assert reinforce_pp_baseline(S).mean().item() == pytest.approx(0.0, abs=1e-15)
    assert reinforce_pp_baseline(S).pow(2).mean().item() == pytest.approx(1.0, abs=1e-6)


def test_advantages_under_population_probabilities():
    p = torch.tensor([[0.5, 0.3, 0.2]], dtype=D)
    s = torch.tensor([[1.0, 0.0, 0.0]], dtype=D)  # E_p s = 0.5
    assert torch.allclose(group_mean_centred(s, p), s - 0.5)
    assert torch.allclose(rloo(s, p), s - 0.5)  # the infinite-sample leave-one-out mean
    assert torch.allclose(maxrl(s, p), torch.tensor([[1.0, -1.0, -1.0]], dtype=D))
    assert torch.allclose(group_std(s, p), (s - 0.5) / (0.5 + 1e-8))


def test_maxrl_under_exact_probabilities_is_the_maximum_likelihood_direction():
    """MaxRL's claim: its expected update is grad log p(correct); on tabular_multi's exact
    batch the gradient on the logits is CE's, e_y - pi (here / N, the mean over contexts)."""
    theta = torch.randn(2, 3, dtype=D, generator=torch.Generator().manual_seed(0)).requires_grad_(True)
    logp = torch.log_softmax(theta, -1)
    onehot = torch.nn.functional.one_hot(torch.tensor([0, 2]), 3).to(D)
    b = Batch.action_set(logp.detach(), onehot, onehot > 0, probs=logp.detach().exp())
    ClippedSurrogate(advantage="maxrl").loss(b, logp.unsqueeze(-1)).loss.backward()
    pi = logp.detach().exp()
    assert torch.allclose(theta.grad, -(onehot - pi) / 2, atol=1e-12)


# ------------------------------------------------------------------ aggregation

X = torch.tensor([[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]], dtype=D)  # N = 1, K = 2, T = 3
MASK = torch.tensor([[[1, 1, 0], [1, 1, 1]]])


def test_aggregations_coincide_on_equal_lengths_but_for_the_token_sum():
    assert aggregate(X, "token-mean").item() == pytest.approx(21 / 6)
    assert aggregate(X, "seq-mean-token-mean").item() == pytest.approx((2 + 5) / 2)
    assert aggregate(X, "constant").item() == pytest.approx(21 / (2 * 3))
    assert aggregate(X, "seq-mean-token-sum").item() == pytest.approx((6 + 15) / 2)  # T times
    assert aggregate(X, "constant", max_len=5).item() == pytest.approx(21 / (2 * 5))
    with pytest.raises(ValueError, match="below the batch's 3 steps"):
        aggregate(X, "constant", max_len=2)
    with pytest.raises(ValueError, match="not one of"):
        aggregate(X, "sum")


def test_aggregations_differ_under_a_mask():
    """The LLM path's completion mask: answer 0 has 2 steps, answer 1 has 3."""
    assert aggregate(X, "token-mean", mask=MASK).item() == pytest.approx((1 + 2 + 4 + 5 + 6) / 5)
    assert aggregate(X, "seq-mean-token-mean", mask=MASK).item() == pytest.approx((1.5 + 5) / 2)
    assert aggregate(X, "seq-mean-token-sum", mask=MASK).item() == pytest.approx((3 + 15) / 2)
    assert aggregate(X, "constant", mask=MASK).item() == pytest.approx(18 / (2 * 3))
    values = {m: aggregate(X, m, mask=MASK).item() for m in AGGREGATIONS}
    assert len(set(values.values())) == 4
    # a sequence with no step does not count in a sequence mean
    empty = torch.tensor([[[1, 1, 0], [0, 0, 0]]])
    assert aggregate(X, "seq-mean-token-mean", mask=empty).item() == pytest.approx(1.5)


def test_aggregations_weigh_candidates():
    w = torch.tensor([[0.25, 0.75]], dtype=D)  # e.g. population probabilities
    assert aggregate(X, "token-mean", w).item() == pytest.approx((0.25 * 6 + 0.75 * 15) / 3)
    assert aggregate(X, "seq-mean-token-mean", w).item() == pytest.approx(0.25 * 2 + 0.75 * 5)
    assert aggregate(X, "seq-mean-token-sum", w).item() == pytest.approx(0.25 * 6 + 0.75 * 15)
    assert aggregate(X, "constant", w).item() == pytest.approx((0.25 * 6 + 0.75 * 15) / 3)
    sampled = torch.tensor([[0.0, 1.0]], dtype=D)  # a sampled indicator: only answer 1
    assert aggregate(X, "token-mean", sampled).item() == pytest.approx(5.0)


# ------------------------------------------------------------------ the clipped surrogate

def two_groups(T=3):
    scores = [[1.0, 0.0], [0.5, 0.0]]  # group_mean A = (.5, -.5), (.25, -.25)
    logp_old = torch.log(torch.full((2, 2, T), 0.5, dtype=D))
    return group_batch(logp_old, scores), torch.tensor([[0.5, -0.5], [0.25, -0.25]], dtype=D)


@pytest.mark.parametrize("aggregation,divisor", [
    ("token-mean", 2 * 2 * 3), ("seq-mean-token-mean", 2 * 2 * 3),
    ("seq-mean-token-sum", 2 * 2), ("constant", 2 * 2 * 3)])
def test_clipped_gradient_at_the_rollout_policy(aggregation, divisor):
    """rho = 1: the gradient on logp_it is -A_i / (the aggregation's normaliser)."""
    b, A = two_groups()
    out, g = grad_on_logp(ClippedSurrogate(advantage="group_mean", aggregation=aggregation),
                          b, b.logp_old)
    assert torch.allclose(g, (-A / divisor).unsqueeze(-1).expand_as(g), atol=1e-15)
    assert out.loss.item() == pytest.approx(0.0, abs=1e-15)  # centred advantages: mean 0
    assert out.metrics["clip_frac"] == 0.0 and out.metrics["kl"] == 0.0


def test_dr_grpo_constant_normaliser_is_k_times_t_max():
    b, A = two_groups()
    _, g = grad_on_logp(ClippedSurrogate(advantage="group_mean", aggregation="constant", max_len=5),
                        b, b.logp_old)
    assert torch.allclose(g, (-A / (2 * 2 * 5)).unsqueeze(-1).expand_as(g), atol=1e-15)


RHO_POS = [1.25, 1.3, 0.75, 1.0]   # candidate 0, A = +0.5
RHO_NEG = [0.75, 0.85, 1.25, 1.35]  # candidate 1, A = -0.5


def clip_case():
    logp_old = torch.log(torch.full((1, 2, 4), 0.25, dtype=D))
    rho = torch.tensor([[RHO_POS, RHO_NEG]], dtype=D)
    return group_batch(logp_old, [[1.0, 0.0]]), logp_old + rho.log(), rho


def test_dapo_clips_higher_on_both_sides_by_hand():
    """eps_low 0.2, eps_high 0.28: the range is [0.8, 1.28]. A > 0: rho 1.3 is clipped (no
    gradient), 1.25 is not (it would be at the symmetric 0.2), 0.75 is below but min()
    keeps rho A. A < 0: rho 0.75 is clipped, 1.35 above but min() keeps rho A."""
    b, logp, rho = clip_case()
    algo = ClippedSurrogate(advantage="group_mean", aggregation="token-mean", eps_low=0.2, eps_high=0.28)
    out, g = grad_on_logp(algo, b, logp)
    A = torch.tensor([0.5, -0.5], dtype=D).view(1, 2, 1)
    flows = torch.tensor([[[1, 0, 1, 1], [0, 1, 1, 1]]], dtype=D)
    assert torch.allclose(g, -flows * rho * A / 8, atol=1e-15)
    term = torch.minimum(rho * A, rho.clamp(0.8, 1.28) * A)
    assert out.loss.item() == pytest.approx(-term.sum().item() / 8)
    assert out.metrics["clip_frac"] == pytest.approx(4 / 8)  # 1.3, 0.75, 0.75, 1.35
    # the symmetric clip of GRPO takes rho 1.25 (A > 0) out as well
    _, g_sym = grad_on_logp(ClippedSurrogate(advantage="group_mean", aggregation="token-mean"), b, logp)
    assert g_sym[0, 0, 0] == 0 and g[0, 0, 0] != 0


def test_kl_to_the_rollout_snapshot_is_aggregated_like_the_surrogate():
    b, logp, rho = clip_case()
    d = rho.log()
    plain = ClippedSurrogate(advantage="group_mean", aggregation="seq-mean-token-sum")
    with_kl = ClippedSurrogate(advantage="group_mean", aggregation="seq-mean-token-sum", kl_coef=0.1)
    kl = torch.exp(-d) + d - 1
    out0, g0 = grad_on_logp(plain, b, logp)
    out1, g1 = grad_on_logp(with_kl, b, logp)
    assert out1.loss.item() == pytest.approx(out0.loss.item() + 0.1 * kl.sum().item() / 2)
    assert torch.allclose(g1 - g0, 0.1 * (1 - torch.exp(-d)) / 2, atol=1e-15)
    assert out1.metrics["kl"] == pytest.approx(kl.mean().item())


def test_gspo_clips_the_sequence_ratio_on_both_sides():
    """s_i = exp(mean_t d_it) in [1 - 3e-4, 1 + 4e-4]. Group 0: s = exp(3.5e-4) (A > 0) is
    inside, s = exp(-3.5e-4) (A < 0) below: clipped. Group 1: exp(5e-4) (A > 0) above:
    clipped; exp(-2e-4) (A < 0) inside. Inside, every step of a sequence gets the same
    gradient -A s / T / (N K), whatever its own token ratio."""
    d = torch.tensor([[[7e-4, 0.0], [-7e-4, 0.0]], [[1e-3, 0.0], [-1e-4, -3e-4]]], dtype=D)
    logp_old = torch.log(torch.full((2, 2, 2), 0.5, dtype=D))
    b = group_batch(logp_old, [[1.0, 0.0], [1.0, 0.0]])
    algo = ClippedSurrogate(advantage="group_mean", ratio="sequence", eps_low=3e-4, eps_high=4e-4)
    out, g = grad_on_logp(algo, b, logp_old + d)
    s = d.mean(-1).exp()
    A = torch.tensor([[0.5, -0.5], [0.5, -0.5]], dtype=D)
    inside = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=D)
    expected = (-A * s * inside / 2 / 4).unsqueeze(-1).expand(2, 2, 2)
    assert torch.allclose(g, expected, atol=1e-15)
    term = torch.minimum(s * A, s.clamp(1 - 3e-4, 1 + 4e-4) * A)
    assert out.loss.item() == pytest.approx(-term.mean().item(), rel=1e-12)
    assert out.metrics["clip_frac"] == pytest.approx(0.5)
    # the token ratio would give the two steps of a sequence different gradients
    _, g_tok = grad_on_logp(ClippedSurrogate(advantage="group_mean", eps_low=3e-4, eps_high=4e-4),
                            b, logp_old + d)
    assert g_tok[0, 0, 0] == 0 and g_tok[0, 0, 1] != 0


# ------------------------------------------------------------------ CISPO

def cispo_case():
    logp_old = torch.log(torch.full((1, 2, 3), 0.5, dtype=D))
    rho = torch.tensor([[[1.5, 1.0, 0.5], [1.5, 0.9, 0.3]]], dtype=D)
    return group_batch(logp_old, [[1.0, 0.0]]), logp_old + rho.log()


def test_cispo_clips_the_weight_and_keeps_every_gradient():
    """No lower bound (eps_low 1), cap 1 + 0.2: w = (1.2, 1, 0.5), (1.2, 0.9, 0.3); the
    gradient on logp is -w A / (N K T), never 0 (a clipped token keeps its gradient)."""
    b, logp = cispo_case()
    out, g = grad_on_logp(CISPO(advantage="group_mean"), b, logp)
    A = torch.tensor([0.5, -0.5], dtype=D).view(1, 2, 1)
    w = torch.tensor([[[1.2, 1.0, 0.5], [1.2, 0.9, 0.3]]], dtype=D)
    assert torch.allclose(g, -w * A / 6, atol=1e-15)
    assert out.loss.item() == pytest.approx(-(w * A * logp).sum().item() / 6)
    assert out.metrics["clip_frac"] == pytest.approx(2 / 6)


def test_cispo_lower_clip_when_set():
    b, logp = cispo_case()
    _, g = grad_on_logp(CISPO(advantage="group_mean", eps_low=0.2), b, logp)
    A = torch.tensor([0.5, -0.5], dtype=D).view(1, 2, 1)
    w = torch.tensor([[[1.2, 1.0, 0.8], [1.2, 0.9, 0.8]]], dtype=D)
    assert torch.allclose(g, -w * A / 6, atol=1e-15)


def test_cispo_default_advantage_is_grpos():
    b, logp = cispo_case()
    _, g = grad_on_logp(CISPO(), b, b.logp_old)  # rho = 1: REINFORCE with GRPO's A
    A = (torch.tensor([0.5, -0.5], dtype=D) / (0.5 + 1e-8)).view(1, 2, 1)
    assert torch.allclose(g, (-A / 6).expand_as(g), atol=1e-15)


# ------------------------------------------------------------------ GPG

def test_gpg_is_plain_policy_gradient_rescaled_by_the_informative_share():
    """Group 1 is flat: alpha = B / (B - M) = 4 / 2 = 2; the gradient is -alpha A / (N K T)
    wherever the policy is (no ratio, no clip)."""
    logp_old = torch.log(torch.full((2, 2, 2), 0.5, dtype=D))
    b = group_batch(logp_old, [[1.0, 0.0], [1.0, 1.0]])
    assert gpg_alpha(b.scores).item() == 2.0
    A = torch.tensor([[0.5, -0.5], [0.0, 0.0]], dtype=D).unsqueeze(-1)
    moved = logp_old + torch.tensor([0.3, -0.7], dtype=D)
    for logp in (logp_old, moved):
        out, g = grad_on_logp(GPG(), b, logp)
        assert torch.allclose(g, (-2 * A / 8).expand_as(g), atol=1e-15)
        assert out.loss.item() == pytest.approx(-2 * (A * logp).sum().item() / 8)
    _, g1 = grad_on_logp(GPG(rescale=False), b, logp_old)
    assert torch.allclose(g1, (-A / 8).expand_as(g1), atol=1e-15)
    # alpha * token-mean = the token mean over the informative groups alone
    only = group_batch(logp_old[:1], [[1.0, 0.0]])
    assert GPG().loss(b, moved).loss.item() == pytest.approx(GPG().loss(only, moved[:1]).loss.item())
    # a batch of flat groups: alpha stays finite, the loss is 0
    flat = group_batch(logp_old, [[1.0, 1.0], [0.0, 0.0]])
    assert gpg_alpha(flat.scores).item() == 2.0 and GPG().loss(flat, moved).loss.item() == 0.0


# ------------------------------------------------------------------ presets and checks

@pytest.mark.parametrize("name,impl,fields", [
    ("dr_grpo", "ClippedSurrogate", {"advantage": "group_mean", "aggregation": "constant",
                                     "kl_coef": 0.0, "eps_low": 0.2, "eps_high": 0.2}),
    ("dapo", "ClippedSurrogate", {"advantage": "group_std", "aggregation": "token-mean",
                                  "eps_low": 0.2, "eps_high": 0.28, "kl_coef": 0.0,
                                  "dynamic_sampling": 4}),
    ("rloo", "ClippedSurrogate", {"advantage": "rloo", "aggregation": "seq-mean-token-sum"}),
    ("gspo", "ClippedSurrogate", {"ratio": "sequence", "eps_low": 3e-4, "eps_high": 4e-4,
                                  "aggregation": "seq-mean-token-mean"}),
    ("maxrl", "ClippedSurrogate", {"advantage": "maxrl", "aggregation": "token-mean"}),
    ("reinforce_pp_baseline", "ClippedSurrogate", {"advantage": "reinforce_pp_baseline"}),
    ("cispo", "CISPO", {"eps_low": 1.0, "eps_high": 0.2, "aggregation": "token-mean"}),
    ("gpg", "GPG", {"advantage": "group_mean", "rescale": True, "aggregation": "token-mean"}),
])
def test_each_zoo_preset_is_parameters_of_a_module(name, impl, fields):
    spec = build(compose(f"algo={name}", "task=reversal_v2"))
    assert type(spec.algo).__name__ == impl and spec.algo_name == name
    assert spec.request.needs == "sample_group" and spec.algo.k == 8 and spec.algo.epochs == 4
    for key, value in fields.items():
        assert getattr(spec.algo, key) == value, key
    assert spec.run_dir.parts[-3] == name


def test_zoo_knobs_are_checked():
    for bad in (dict(advantage="std"), dict(aggregation="mean"), dict(ratio="seq"),
                dict(eps_high=0.0), dict(kl_coef=-1.0), dict(max_len=-1),
                dict(dynamic_sampling=-1), dict(dynamic_sampling=True)):
        with pytest.raises(ValueError):
            ClippedSurrogate(**bad)
    with pytest.raises(ConfigError, match="algo.advantage='std' is not one of"):
        build(compose("algo=dapo", "task=demo", "algo.advantage=std"))
    assert set(ADVANTAGES) == {"group_std", "group_mean", "batch_std", "rloo", "maxrl",
                               "reinforce_pp_baseline"}


@pytest.mark.slow  # long in process
@pytest.mark.parametrize("name", NEW)
def test_zoo_preset_trains_one_episode(name):
    spec = build(compose(f"algo={name}", "task=demo", "task.batch_size=4", "task.sequence_length=3"))
    streams = Streams.from_seed(0)
    policy = spec.task.make_policy(streams.init)
    opt = build_optimizer(spec.optim_name, list(policy.parameters()), **spec.optim_hparams)
    row = train_episode(spec.task, spec.algo, spec.request, policy, opt, streams)
    assert math.isfinite(row["loss"]) and row["grad_norm"] > 0 and row["param_change"] > 0
    assert math.isfinite(row["absA_fail"])


def test_zoo_runs_token_level():
    """algo.level=token (dense rewards): K next-token candidates per prefix state, T = 1."""
    for name in ("dapo", "cispo", "gpg"):
        # DAPO's dynamic sampling replaces whole prompt groups: not at token level
        off = ["algo.dynamic_sampling=0"] if name == "dapo" else []
        spec = build(compose(f"algo={name}", "task=demo", "algo.level=token", "task.batch_size=4",
                             "task.sequence_length=3", *off))
        assert spec.request.level == "token"
        streams = Streams.from_seed(0)
        policy = spec.task.make_policy(streams.init)
        opt = build_optimizer(spec.optim_name, list(policy.parameters()), **spec.optim_hparams)
        row = train_episode(spec.task, spec.algo, spec.request, policy, opt, streams)
        assert math.isfinite(row["loss"]) and row["grad_norm"] > 0, name


@pytest.mark.parametrize("task", ["tabular_single", "tabular_multi"])
def test_zoo_runs_on_the_bandits(task):
    for name in ("dapo", "rloo", "maxrl", "cispo", "gpg"):
        spec = build(compose(f"algo={name}", f"task={task}"))
        streams = Streams.from_seed(1)
        policy = spec.task.make_policy(streams.init)
        opt = build_optimizer(spec.optim_name, list(policy.parameters()), **spec.optim_hparams)
        row = train_episode(spec.task, spec.algo, spec.request, policy, opt, streams)
        assert spec.algo.epochs == 1 and math.isfinite(row["loss"]), name
        if task == "tabular_multi":  # exact expectations: never a flat batch
            assert row["grad_norm"] > 0, name


def test_every_zoo_algorithm_is_registered():
    assert {"clipped", "cispo", "gpg"} <= set(ALGORITHMS.names())
