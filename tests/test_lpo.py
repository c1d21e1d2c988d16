"""LPO (arXiv 2605.06139) on hand-computed groups: the Gibbs target w* = softmax(R / tau)
(Eq. 8, s_t = 0), the gradient on the candidates' log-probs of both projections (Eqs. 10,
11), the token clip of App. D.3, weighted candidates, and where it meets TPO."""
import math

import pytest
import torch

from tpo_bench.algorithms.lpo import LPO, lpo_phi
from tpo_bench.algorithms.tpo import TPO, tpo_target
from tpo_bench.contract.batch import Batch

D = torch.float64


def batch(logp_old, scores, probs=None):
    """N groups of K candidates; logp_old [N, K] (one step) or [N, K, T]."""
    logp_old = torch.as_tensor(logp_old, dtype=D)
    scores = torch.as_tensor(scores, dtype=D)
    if probs is not None:
        return Batch.action_set(logp_old, scores, scores >= 1, probs=torch.as_tensor(probs, dtype=D))
    rewards = scores if logp_old.dim() == 2 else scores.unsqueeze(-1).expand_as(logp_old)
    return Batch.sampled_group(logp_old, rewards, scores >= 1, scores=scores)


def grad(algo, b, logp):
    """The loss, its gradient on the per-step log-probs, and the metrics."""
    z = torch.as_tensor(logp, dtype=D).reshape(b.logp_old.shape).clone().requires_grad_(True)
    out = algo.loss(b, z)
    out.loss.backward()
    return out.loss.item(), z.grad, out.metrics


# One group, K = 4, one success: mu_G = 0.25, sigma_G = sqrt(0.1875) = 0.4330127.
# tau = std: phi = (R - mu) / sigma = (1.7320508, -0.5773503 x 3)
#   w* = (5.6522337, 0.5613839 x 3) / 7.3363854 = (0.7704385, 0.0765205 x 3)
# tau = one: phi = (0.75, -0.25 x 3): w*_0 = 2.1170000 / (2.1170000 + 3 * 0.7788008) = 0.4753669
# tau = mean: phi = (3, -1 x 3): w*_0 = 20.085537 / (20.085537 + 3 * 0.3678794) = 0.9479150
R1 = [[1.0, 0.0, 0.0, 0.0]]
W_STD = [0.7704385, 0.0765205, 0.0765205, 0.0765205]
P_OLD = [[0.1, 0.2, 0.3, 0.4]]


@pytest.mark.parametrize("tau, w0", [("std", 0.7704385), ("one", 0.4753669), ("mean", 0.9479150)])
def test_target_is_the_gibbs_tilt_of_the_uniform_list(tau, w0):
    b = batch(torch.tensor(P_OLD).log(), R1)
    _, _, m = grad(LPO(k=4, tau=tau), b, b.logp_old)
    assert m["q_success"] == pytest.approx(w0, abs=1e-6)
    assert m["q_fail"] == pytest.approx((1 - w0) / 3, abs=1e-6)


def test_target_ignores_the_behaviour_probabilities_unlike_tpo():
    """s_t = 0: the samples already carry pi_b's mass, so w* does not weigh them by it."""
    phi = lpo_phi(torch.tensor(R1, dtype=D))
    assert torch.allclose(torch.softmax(phi, -1), torch.tensor([W_STD], dtype=D), atol=1e-7)
    for p_old in (P_OLD, [[0.25] * 4], [[0.7, 0.1, 0.1, 0.1]]):
        _, _, m = grad(LPO(k=4), batch(torch.tensor(p_old).log(), R1), torch.tensor(p_old).log())
        assert m["q_success"] == pytest.approx(W_STD[0], abs=1e-6)
    q = tpo_target(torch.tensor(P_OLD, dtype=D).log(), torch.tensor(R1, dtype=D))
    assert q[0, 0].item() == pytest.approx(0.1 * 5.6522337 / (0.1 * 5.6522337 + 0.9 * 0.5613839), abs=1e-6)


def test_forward_gradient_on_policy_is_uniform_minus_target():
    """Eq. 10 at pi_theta = pi_b: P_theta = 1/K, so dL/dlogp_k = 1/4 - w*_k, whatever p_old."""
    b = batch(torch.tensor(P_OLD).log(), R1)
    loss, g, _ = grad(LPO(k=4), b, b.logp_old)
    expected = torch.tensor([[0.25 - 0.7704385, 0.25 - 0.0765205, 0.25 - 0.0765205, 0.25 - 0.0765205]], dtype=D)
    assert torch.allclose(g[..., 0], expected, atol=1e-6)
    assert g.sum().item() == pytest.approx(0.0, abs=1e-12)  # zero-sum (Corollary 1)
    # the loss is KL(w* || uniform)
    assert loss == pytest.approx(sum(w * math.log(w / 0.25) for w in W_STD), abs=1e-6)


def test_forward_gradient_off_policy():
    """s_theta = (log 2, 0, 0, 0): P_theta = (0.4, 0.2, 0.2, 0.2), dL/dlogp = P_theta - w*."""
    b = batch(torch.tensor(P_OLD).log(), R1)
    logp = b.logp_old.clone()
    logp[0, 0] += math.log(2)
    loss, g, _ = grad(LPO(k=4), b, logp)
    P = [0.4, 0.2, 0.2, 0.2]
    assert torch.allclose(g[0, :, 0], torch.tensor([p - w for p, w in zip(P, W_STD)], dtype=D), atol=1e-6)
    assert loss == pytest.approx(sum(w * math.log(w / p) for w, p in zip(W_STD, P)), abs=1e-6)


def test_reverse_gradient_on_policy_is_the_policy_gradient():
    """Prop. 1: at pi_theta = pi_b the reverse coefficient is -A_k / K, A = (R - mu) / sigma."""
    b = batch(torch.tensor(P_OLD).log(), R1)
    loss, g, _ = grad(LPO(k=4, projection="reverse"), b, b.logp_old)
    A = [math.sqrt(3), -1 / math.sqrt(3), -1 / math.sqrt(3), -1 / math.sqrt(3)]
    assert torch.allclose(g[0, :, 0], torch.tensor([-a / 4 for a in A], dtype=D), atol=1e-7)
    assert loss == pytest.approx(sum(0.25 * math.log(0.25 / w) for w in W_STD), abs=1e-6)


def test_reverse_gradient_off_policy_is_the_logit_gap_form():
    """Eq. 11: c_k = P_k (d_k - dbar), d = s - phi, dbar = sum_j P_j d_j; with
    s = (log 2, 0, 0, 0), P = (0.4, 0.2 x 3), phi = (1.7320508, -0.5773503 x 3):
    d = (-1.0389037, 0.5773503 x 3), dbar = 0.4 d_0 + 0.6 d_1 = -0.0691513,
    c = (0.4 (-0.9697524), 0.2 (0.6465016) x 3) = (-0.3879010, 0.1293003 x 3)."""
    b = batch(torch.tensor(P_OLD).log(), R1)
    logp = b.logp_old.clone()
    logp[0, 0] += math.log(2)
    loss, g, _ = grad(LPO(k=4, projection="reverse"), b, logp)
    assert torch.allclose(g[0, :, 0], torch.tensor([-0.3879010, 0.1293003, 0.1293003, 0.1293003], dtype=D),
                          atol=1e-6)
    P = [0.4, 0.2, 0.2, 0.2]
    assert loss == pytest.approx(sum(p * math.log(p / w) for p, w in zip(P, W_STD)), abs=1e-6)


@pytest.mark.parametrize("projection", ["forward", "reverse"])
def test_sequence_logratio_is_the_sum_over_tokens_and_groups_average(projection):
    """Two groups of K = 2 candidates with T = 2 tokens: s_k = sum_t (logp - logp_old), the
    gradient on every token of candidate k is its coefficient c_k, over N = 2 groups."""
    old = torch.log(torch.tensor([[[0.5, 0.5], [0.25, 0.5]], [[0.5, 0.5], [0.5, 0.5]]], dtype=D))
    logp = old.clone()
    logp[0, 0] += torch.tensor([math.log(2), 0.0], dtype=D)  # s_0 = log 2 in group 0
    b = batch(old, [[1.0, 0.0], [1.0, 1.0]])
    _, g, _ = grad(LPO(k=2, projection=projection), b, logp)
    # group 0: u = (1, -1), w* = (e, 1/e) / (e + 1/e) = (0.8807971, 0.1192029); P = (2/3, 1/3)
    # group 1: all equal, w* = P = (1/2, 1/2): no gradient
    if projection == "forward":
        c0 = [2 / 3 - 0.8807971, 1 / 3 - 0.1192029]
    else:  # d = (log 2 - 1, 1), dbar = 2/3 d_0 + 1/3 d_1
        d = [math.log(2) - 1, 1.0]
        dbar = 2 / 3 * d[0] + 1 / 3 * d[1]
        c0 = [2 / 3 * (d[0] - dbar), 1 / 3 * (d[1] - dbar)]
    expected = torch.tensor([[[c0[0]] * 2, [c0[1]] * 2], [[0.0] * 2, [0.0] * 2]], dtype=D) / 2
    assert torch.allclose(g, expected, atol=1e-6)


@pytest.mark.parametrize("projection", ["forward", "reverse"])
def test_all_equal_group_is_no_update(projection):
    b = batch(torch.tensor(P_OLD).log(), [[0.5, 0.5, 0.5, 0.5]])
    for tau in ("std", "mean", "one"):
        _, g, m = grad(LPO(k=4, projection=projection, tau=tau), b, b.logp_old)
        assert g.abs().max().item() < 1e-12 and m["q_fail"] == pytest.approx(0.25)


def test_token_clip_stops_the_gradient_outside_the_log_band():
    """App. D.3 with eps = 0.2: a token log-ratio outside [log 0.8, log 1.2] =
    [-0.2231436, 0.1823216] passes no gradient; the coefficient still comes from the
    unclipped s, and the loss is still the divergence. Token (0, 0) at +0.2 is clipped,
    token (1, 0) at -0.2 is not: the band is not symmetric."""
    old = torch.log(torch.full((1, 4, 2), 0.5, dtype=D))
    delta = torch.tensor([[[0.2, 0.0], [-0.2, 0.0], [0.0, 0.0], [0.0, 0.0]]], dtype=D)
    b = batch(old, R1)
    loss_c, g_c, m = grad(LPO(k=4, clip_eps=0.2), b, old + delta)
    loss_u, g_u, m_u = grad(LPO(k=4), b, old + delta)
    assert loss_c == pytest.approx(loss_u, rel=1e-12)
    c = g_u[..., 1]  # unclipped: every token of candidate k carries c_k
    assert torch.allclose(g_u[..., 0], c)
    expected = torch.stack([c, c], -1)
    expected[0, 0, 0] = 0.0
    assert torch.allclose(g_c, expected, atol=1e-12)
    # s = (0.2, -0.2, 0, 0): P = softmax(s); c = P - w*
    P = torch.softmax(torch.tensor([0.2, -0.2, 0.0, 0.0], dtype=D), -1)
    assert torch.allclose(c[0], P - torch.tensor(W_STD, dtype=D), atol=1e-6)
    assert m["clip_frac"] == pytest.approx(1 / 8) and "clip_frac" not in m_u


def test_population_weights_are_the_large_group_limit():
    """batch.probs (exact bandit): P ~ p exp(s), w* ~ p exp(phi), mu and sigma under p.
    p = (0.5, 0.3, 0.2), R = (1, 0, 0): mu = 0.5, sigma = 0.5, phi = (1, -1, -1),
    w* = (0.5 e, 0.3 / e, 0.2 / e) / 1.5430806 = (0.8807971, 0.0715218, 0.0476812);
    on-policy P = p, so the forward gradient is p - w*."""
    p = [[0.5, 0.3, 0.2]]
    b = batch(torch.tensor(p).log(), [[1.0, 0.0, 0.0]], probs=p)
    loss, g, m = grad(LPO(k=3), b, b.logp_old)
    assert torch.allclose(g[0, :, 0], torch.tensor([0.5 - 0.8807971, 0.3 - 0.0715218, 0.2 - 0.0476812],
                                                   dtype=D), atol=1e-6)
    assert m["q_success"] == pytest.approx(0.8807971, abs=1e-6)
    # K = 4 samples whose frequencies are p' = (0.5, 0.25, 0.25) exactly: the sampled list
    # and the population form give one loss, on-policy and off it.
    pp = torch.tensor([[0.5, 0.25, 0.25]], dtype=D)
    pop = batch(pp.log(), [[1.0, 0.0, 0.0]], probs=pp)
    sam = batch(pp.log()[:, [0, 0, 1, 2]], [[1.0, 1.0, 0.0, 0.0]])
    for shift in (torch.zeros(3, dtype=D), torch.tensor([0.3, -0.1, 0.2], dtype=D)):
        for projection in ("forward", "reverse"):
            algo = LPO(projection=projection)
            lp = algo.loss(pop, (pp.log() + shift).unsqueeze(-1)).loss.item()
            ls = algo.loss(sam, (pp.log() + shift)[:, [0, 0, 1, 2]].unsqueeze(-1)).loss.item()
            assert lp == pytest.approx(ls, rel=1e-10)


def test_same_fixed_point_as_anchored_tpo_other_gradient():
    """With tau = sigma_G (TPO: eta = 1) the two targets are one policy on the list:
    P_theta = w* <=> pi_theta ~ pi_b exp(u) <=> p_theta = q, so both gradients vanish at
    logp = logp_old + u. On-policy they differ: LPO's coefficient is 1/K - w*_k, TPO's
    p_old,k - q_k."""
    old = torch.tensor(P_OLD, dtype=D).log()
    b = batch(old, R1)
    u = lpo_phi(b.scores)
    for algo in (LPO(k=4), LPO(k=4, projection="reverse"), TPO(k=4)):
        _, g, _ = grad(algo, b, old + u)
        assert g.abs().max().item() < 1e-12
    _, g_lpo, _ = grad(LPO(k=4), b, old)
    _, g_tpo, _ = grad(TPO(k=4), b, old)
    q = tpo_target(old, b.scores)
    assert torch.allclose(g_tpo[..., 0], torch.tensor(P_OLD, dtype=D) - q)
    assert not torch.allclose(g_lpo, g_tpo, atol=1e-3)


@pytest.mark.parametrize("key, value, match", [
    ("projection", "backward", "algo.projection='backward' is not one of forward, reverse"),
    ("tau", "var", "algo.tau='var' is not one of std, mean, one"),
    ("clip_eps", 1.0, "algo.clip_eps=1.0 must be in"),
    ("clip_eps", -0.1, "algo.clip_eps=-0.1 must be in"),
])
def test_bad_settings_are_refused_by_name(key, value, match):
    with pytest.raises(ValueError, match=match.replace("(", r"\(")):
        LPO(**{key: value})
