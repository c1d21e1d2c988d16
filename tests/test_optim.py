"""bench.optim against an independent float64 numpy reference written from science §Token sequences."""

import numpy as np
import pytest
import torch

from tpo_bench.bench.optim import MuonNAdam, build_optimizer, fans, muon_scale, newton_schulz, partition

LR = 1e-3

# Shapes in the JAX reference layout (science §Token sequences), covering both branches.
SHAPES = {
    "ffn_wide": (64, 256),  # (in, out), out > in: Muon, scale 2
    "ffn_narrow": (256, 64),  # in > out: Muon, scale 1, transposed inside NS
    "tok_embed": (16, 64),  # (V, d): Muon, fan_in 16, scale 2
    "q_bias": (2, 32),  # (heads, head_dim): Muon, fan_in 2, scale 4
    "bias": (64,),  # NAdam
    "q_kernel": (64, 2, 32),  # 3-D: NAdam
}
MUON = {"ffn_wide", "ffn_narrow", "tok_embed", "q_bias"}


# ---- numpy reference, straight from science §Token sequences ------------------------------------


def np_orthogonalise(m):
    a, b, c = 3.4445, -4.7750, 2.0315
    x = m / (np.sqrt((m * m).sum()) + 1e-8)
    transposed = x.shape[0] > x.shape[1]
    if transposed:
        x = x.T
    for _ in range(5):
        A = x @ x.T
        x = a * x + (b * A + c * A @ A) @ x
    return x.T if transposed else x


class NpMuon:
    def __init__(self, theta):
        self.theta, self.m, self.t = theta.copy(), np.zeros_like(theta), 0

    def step(self, g):
        self.t += 1
        t = self.t
        self.m = 0.95 * self.m + 0.05 * g
        m_hat = 0.95 * self.m / (1 - 0.95 ** (t + 1)) + 0.05 * g / (1 - 0.95**t)
        fan_in, fan_out = self.theta.shape
        scale = np.sqrt(max(1.0, fan_out / fan_in))
        self.theta = self.theta - LR * scale * np_orthogonalise(m_hat)


class NpNAdam:
    def __init__(self, theta):
        self.theta, self.m, self.v, self.t = theta.copy(), np.zeros_like(theta), np.zeros_like(theta), 0

    def step(self, g):
        self.t += 1
        t = self.t
        self.m = 0.9 * self.m + 0.1 * g
        self.v = 0.999 * self.v + 0.001 * g * g
        m_hat = 0.9 * self.m / (1 - 0.9 ** (t + 1)) + 0.1 * g / (1 - 0.9**t)
        v_hat = self.v / (1 - 0.999**t)
        self.theta = self.theta - LR * m_hat / (np.sqrt(v_hat) + 1e-8)


# ---- helpers --------------------------------------------------------------------


def make_params(seed=0):
    rng = np.random.default_rng(seed)
    init = {n: rng.normal(size=s) / np.sqrt(s[0]) for n, s in SHAPES.items()}
    params = {n: torch.tensor(v, dtype=torch.float64, requires_grad=True) for n, v in init.items()}
    return init, params


def grads(step, seed=123):
    # A fresh random gradient every step, so consecutive gradients are not parallel.
    rng = np.random.default_rng(seed + step)
    return {n: rng.normal(size=s) for n, s in SHAPES.items()}


def set_grads(params, g):
    for n, p in params.items():
        p.grad = torch.tensor(g[n], dtype=torch.float64)


# ---- tests ----------------------------------------------------------------------


def test_matches_numpy_reference_over_five_steps():
    init, params = make_params()
    opt = MuonNAdam(list(params.items()), lr=LR)
    ref = {n: (NpMuon if n in MUON else NpNAdam)(v) for n, v in init.items()}
    for step in range(5):
        g = grads(step)
        set_grads(params, g)
        opt.step()
        for n in SHAPES:
            ref[n].step(g[n])
            np.testing.assert_allclose(
                params[n].detach().numpy(), ref[n].theta, rtol=1e-6, atol=1e-9, err_msg=f"{n} step {step + 1}"
            )
    # Guard against a vacuous pass: every parameter moved by far more than atol.
    for n in SHAPES:
        assert np.abs(params[n].detach().numpy() - init[n]).max() > 0.1 * LR


def test_partition_and_param_groups():
    _, params = make_params()
    muon, nadam = partition(params.items())
    assert set(muon) == MUON
    assert set(nadam) == set(SHAPES) - MUON
    opt = MuonNAdam(list(params.items()), lr=LR)
    by_flag = {g["use_muon"]: set(g["param_names"]) for g in opt.param_groups}
    assert by_flag == {True: MUON, False: set(SHAPES) - MUON}
    for g in opt.param_groups:
        assert all((p.ndim == 2) == g["use_muon"] for p in g["params"])
    # Fans come from the (in, out) layout: first axis is fan_in.
    expected_scale = {"ffn_wide": 2.0, "ffn_narrow": 1.0, "tok_embed": 2.0, "q_bias": 4.0}
    assert fans(params["q_bias"]) == (2, 32)
    assert fans(params["ffn_narrow"]) == (256, 64)
    for n, s in expected_scale.items():
        assert muon_scale(params[n]) == pytest.approx(s)


def test_nadam_first_step_is_1_47_lr():
    p = torch.zeros(64, 2, 32, dtype=torch.float64, requires_grad=True)
    rng = np.random.default_rng(1)
    g = rng.normal(size=p.shape)
    g[np.abs(g) < 1e-3] = 1e-3  # all entries non-zero, well above eps
    p.grad = torch.tensor(g)
    MuonNAdam([p], lr=LR).step()
    delta = p.detach().numpy()
    # 0.9*0.1/(1-0.81) + 1 = 1.47368...
    np.testing.assert_allclose(np.abs(delta), 1.4736842 * LR, rtol=1e-4)
    assert np.all(np.sign(delta) == -np.sign(g))


@pytest.mark.parametrize("name", sorted(MUON))
def test_muon_update_is_scaled_near_orthogonal(name):
    _, params = make_params()
    p = params[name]
    before = p.detach().clone()
    p.grad = torch.tensor(grads(0)[name])
    MuonNAdam([p], lr=LR).step()
    update = (before - p.detach()).numpy()
    fan_in, fan_out = p.shape
    scale = np.sqrt(max(1.0, fan_out / fan_in))
    sv = np.linalg.svd(update / (LR * scale), compute_uv=False)
    # Quintic NS leaves singular values roughly in [0.7, 1.2]; a missing or doubled
    # scale, or a skipped normalisation, falls outside this band.
    assert sv.min() > 0.6 and sv.max() < 1.3, sv


def test_newton_schulz_direct():
    rng = np.random.default_rng(7)
    for shape in [(8, 40), (40, 8), (16, 16)]:
        m = rng.normal(size=shape) * 5.0
        out = newton_schulz(torch.tensor(m)).numpy()
        np.testing.assert_allclose(out, np_orthogonalise(m), rtol=1e-8, atol=1e-12)
        assert out.shape == shape


def test_state_persists_across_steps():
    _, params = make_params()
    opt = MuonNAdam(list(params.items()), lr=LR)
    for step in range(3):
        set_grads(params, grads(step))
        opt.step()
        assert all(opt.state[p]["step"] == step + 1 for p in params.values())

    # A continued optimizer and a fresh one give different updates from the same point.
    _, a = make_params()
    _, b = make_params()
    opt_a = MuonNAdam(list(a.items()), lr=LR)
    set_grads(a, grads(0))
    opt_a.step()
    with torch.no_grad():
        for n in SHAPES:
            b[n].copy_(a[n])
    opt_b = MuonNAdam(list(b.items()), lr=LR)
    set_grads(a, grads(1))
    set_grads(b, grads(1))
    opt_a.step()
    opt_b.step()
    for n in SHAPES:
        assert not torch.allclose(a[n], b[n], rtol=0, atol=1e-7), n


def test_params_without_grad_are_skipped():
    _, params = make_params()
    opt = MuonNAdam(list(params.items()), lr=LR)
    before = {n: p.detach().clone() for n, p in params.items()}
    params["ffn_wide"].grad = torch.tensor(grads(0)["ffn_wide"])
    opt.step()
    assert not torch.equal(params["ffn_wide"], before["ffn_wide"])
    for n in set(SHAPES) - {"ffn_wide"}:
        assert torch.equal(params[n], before[n])
        assert params[n] not in opt.state or not opt.state[params[n]]


def test_build_optimizer():
    p = torch.nn.Parameter(torch.zeros(4, 4))
    assert isinstance(build_optimizer("muon_nadam", [p], lr=LR), MuonNAdam)
    adam = build_optimizer("adam", [p], lr=LR)
    assert isinstance(adam, torch.optim.Adam)
    g = adam.param_groups[0]
    assert g["lr"] == LR and g["betas"] == (0.9, 0.999) and g["eps"] == 1e-8
    assert g["weight_decay"] == 0.0 and not g["amsgrad"]
    with pytest.raises(ValueError) as err:
        build_optimizer("sgd", [p], lr=LR)
    msg = str(err.value)
    assert "sgd" in msg and "muon_nadam" in msg and "adam" in msg


# ---- one update for a seed batch ------------------------------------------------


SEED_SHAPES = {**SHAPES, "tok_embed_v2": (2, 64), "head_v2": (64, 2)}  # the V = 2 tables: tiny bmm


def _seed_opts(name, seeds=3, shapes=SEED_SHAPES):
    """`seeds` optimizers, each on its own float32 parameters (seed-dependent values)."""
    out = []
    for s in range(seeds):
        g = torch.Generator().manual_seed(s)
        params = [(n, torch.nn.Parameter(torch.randn(*shape, generator=g))) for n, shape in shapes.items()]
        out.append((dict(params), build_optimizer(name, params if name == "muon_nadam"
                                                  else [p for _, p in params], lr=LR)))
    return out


def _seed_grads(step, seeds):
    """Per seed, per step, a different gradient for each parameter."""
    gens = [torch.Generator().manual_seed(1000 * step + s) for s in range(seeds)]
    return [{n: torch.randn(*shape, generator=g) for n, shape in SEED_SHAPES.items()} for g in gens]


@pytest.mark.parametrize("name", ["muon_nadam", "adam", "adamw_like"])
def test_one_update_for_all_seeds_equals_each_seeds_own(name, one_thread):
    """step_seeds over S optimizers leaves each seed's parameters and state bit for bit
    where its own step() does, over several steps (one thread: the claim's setting)."""
    from tpo_bench.bench.optim import step_seeds
    build = "adam" if name == "adamw_like" else name
    own, batch = _seed_opts(build), _seed_opts(build)
    if name == "adamw_like":  # AdamW's decoupled decay through the same foreach path
        for _, o in own + batch:
            o.param_groups[0].update(weight_decay=0.01, decoupled_weight_decay=True)
    for step in range(4):
        for (pa, oa), (pb, _), g in zip(own, batch, _seed_grads(step, len(own))):
            for n in SEED_SHAPES:
                pa[n].grad, pb[n].grad = g[n].clone(), g[n].clone()
            oa.step()
        step_seeds([o for _, o in batch])
    for (pa, oa), (pb, ob) in zip(own, batch):
        for n in SEED_SHAPES:
            assert torch.equal(pa[n], pb[n]), n
            sa, sb = oa.state[pa[n]], ob.state[pb[n]]
            assert sa.keys() == sb.keys()
            assert all(torch.equal(torch.as_tensor(sa[k]), torch.as_tensor(sb[k])) for k in sa), n
    # the seeds really differ: a swap between them would show
    assert not torch.equal(own[0][0]["ffn_wide"], own[1][0]["ffn_wide"])


@pytest.mark.parametrize("shape", [(7, 5), (100, 4), (64, 16)])
def test_one_normalised_step_for_all_seeds_equals_each_seeds_own(shape, one_thread):
    """NormalisedStep (a tabular task's one table per seed): step_seeds's stacked step
    leaves each seed's table where its own step() does, bit for bit, over several steps;
    each seed's norm is its own (a norm over every seed's table would not be)."""
    from tpo_bench.bench.optim import step_seeds
    seeds = 3

    def tables():
        gens = [torch.Generator().manual_seed(s) for s in range(seeds)]
        ps = [torch.nn.Parameter(torch.randn(*shape, generator=g)) for g in gens]
        return ps, [build_optimizer("normalised_step", [p], alpha=0.1) for p in ps]
    (own, own_opts), (batch, batch_opts) = tables(), tables()
    for step in range(3):
        for s in range(seeds):
            g = torch.randn(*shape, generator=torch.Generator().manual_seed(100 * step + s)) * (s + 1)
            own[s].grad, batch[s].grad = g.clone(), g.clone()
            own_opts[s].step()
        step_seeds(batch_opts)
    assert all(torch.equal(a, b) for a, b in zip(own, batch))
    assert not torch.equal(own[0], own[1])


def test_newton_schulz_on_a_stack_equals_each_matrix_alone(one_thread):
    """orthogonalise on [G, m, n] against each matrix alone: bit for bit, tiny shapes (torch's
    own bmm loop) and BLAS ones alike; and against the unfused X <- a X + (b A + c A A) X
    written with separate matmuls, to float32 rounding (measured: 8e-7 at most)."""
    from tpo_bench.bench.optim import NS_COEFFS, orthogonalise
    a, b, c = NS_COEFFS
    g = torch.Generator().manual_seed(0)
    for shape in [(64, 256), (16, 64), (20, 64), (2, 32), (2, 64)]:
        ms = torch.randn(3, *shape, generator=g)
        ms = ms / torch.linalg.matrix_norm(ms, keepdim=True)
        stacked = orthogonalise(ms).unbind()
        for m, o in zip(ms, stacked):
            assert torch.equal(o, orthogonalise(m.unsqueeze(0))[0]), shape
            x = m
            for _ in range(5):
                A = x @ x.T
                x = a * x + (b * A + c * A @ A) @ x
            torch.testing.assert_close(o, x, rtol=0, atol=2e-6)
