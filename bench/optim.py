"""Optimizers for the benchmark.

science §Token sequences "Optimizer": the sequence-task runs use optax.contrib.muon 0.2.8 defaults,
which is Muon on 2-D tensors and NAdam on everything else. torch.optim.Muon differs
(no bias-corrected Nesterov, other scaling, no NAdam branch), so we write it out here.
science §MNIST bandit: the MNIST bandit uses plain Adam.

Our models keep every tensor in the JAX reference's layout (dense kernels (in, out),
q/k/v kernels (d_model, heads, head_dim), q/k/v biases (heads, head_dim)), so the
reference's "ndim == 2 -> Muon, fan_in = shape[0]" rule applies literally.
"""

import difflib
import importlib
import inspect
import math

import torch

# Every optimizer here takes a step size (lr, alpha). The paper's are 1e-3 and 0.1; above
# 10 a step of Adam, Muon or the normalised step moves each parameter by more than the
# whole scale of the initialisation, so such a value is a typo (1e1 for 1e-1), not a run.
MAX_STEP_SIZE = 10.0

# science §Token sequences: quintic Newton-Schulz coefficients used by optax.contrib.muon.
NS_COEFFS = (3.4445, -4.7750, 2.0315)


def is_muon(p):
    # science §Token sequences: the reference's rule is "2-D tensor -> Muon", on its own shapes.
    return p.ndim == 2


def fans(p):
    # science §Token sequences: fan_in is the first axis of an (in, out) kernel, V for (V, d) tables
    # and heads for the (heads, head_dim) q/k/v biases.
    return p.shape[0], p.shape[1]


def muon_scale(p):
    # science §Token sequences: optax scales the orthogonal update up for wide matrices only.
    fan_in, fan_out = fans(p)
    return math.sqrt(max(1.0, fan_out / fan_in))


def partition(named_params):
    """Split (name, tensor) pairs into (muon_names, nadam_names), in input order."""
    muon, nadam = [], []
    for name, p in named_params:
        (muon if is_muon(p) else nadam).append(name)
    return muon, nadam


def orthogonalise(x, steps=5):
    """Newton-Schulz on a normalised stack x [G, m, n], m <= n (science §Token sequences, optax 0.2.8
    defaults). Each step is X <- a X + (b A + c A A) X with A = X X^T, as two fused
    baddbmm calls (slice by slice: a stack's slices equal each matrix alone)."""
    a, b, c = NS_COEFFS
    for _ in range(steps):
        A = torch.bmm(x, x.mT)
        x = torch.baddbmm(x, torch.baddbmm(A, A, A, beta=b, alpha=c), x, beta=a)
    return x


def newton_schulz(m, steps=5, eps=1e-8):
    """Approximately orthogonalise one 2-D matrix (science §Token sequences)."""
    # Normalising first puts every singular value below 1, where the iteration converges.
    x = m / (torch.linalg.matrix_norm(m) + eps)
    # Iterating on the short side keeps A = X X^T small.
    tall = x.shape[0] > x.shape[1]
    o = orthogonalise((x.T if tall else x).unsqueeze(0), steps)[0]
    return o.T if tall else o


class MuonNAdam(torch.optim.Optimizer):
    """Muon for 2-D params, NAdam for the rest, one learning rate (science §Token sequences).

    `params` is an iterable of tensors or of (name, tensor) pairs (e.g.
    model.named_parameters()). It is split into two param groups, use_muon True/False.
    State and step counts persist across step() calls; there is no weight decay.
    A step is `update` over this optimizer's parameters; `step_seeds` runs one `update`
    over several optimizers' parameters (a seed batch), with the same numbers per seed.
    """

    def __init__(self, params, lr=1e-3, momentum=0.95, betas=(0.9, 0.999), eps=1e-8, ns_steps=5):
        named = []
        for i, item in enumerate(params):
            named.append(item if isinstance(item, tuple) else (f"param{i}", item))
        muon_names, _ = partition(named)
        muon_set = set(muon_names)
        groups = [
            {"params": [(n, p) for n, p in named if n in muon_set], "use_muon": True},
            {"params": [(n, p) for n, p in named if n not in muon_set], "use_muon": False},
        ]
        groups = [g for g in groups if g["params"]]
        defaults = dict(lr=lr, momentum=momentum, betas=betas, eps=eps, ns_steps=ns_steps)
        super().__init__(groups, defaults)

    def entries(self):
        """(param, its state, its group) for every parameter with a gradient."""
        return [(p, self.state[p], g) for g in self.param_groups for p in g["params"]
                if p.grad is not None]

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        update(self.entries())
        return loss


def _buckets(entries, key):
    out: dict = {}
    for e in entries:
        out.setdefault(key(e), []).append(e)
    return out.values()


@torch.no_grad()
def update(entries):
    """One MuonNAdam step of (param, state, group) entries, from any number of optimizers:
    the parameters that share a step count and hyperparameters are updated together,
    NAdam by foreach ops, Muon by foreach ops and one Newton-Schulz chain per working
    shape (a tall matrix transposed). Each parameter's arithmetic is the same whichever
    entries share its bucket (foreach and bmm act slice by slice), so a seed batch's
    update equals each seed's own (tests/test_optim.py)."""
    for p, state, group in entries:
        if not state:
            state["step"] = 0
            if group["use_muon"]:
                state["momentum"] = torch.zeros_like(p)
            else:
                state["exp_avg"] = torch.zeros_like(p)
                state["exp_avg_sq"] = torch.zeros_like(p)
        state["step"] += 1
    hyper = lambda e: (e[2]["use_muon"], e[1]["step"], e[2]["lr"], e[2]["momentum"],  # noqa: E731
                       e[2]["betas"], e[2]["eps"], e[2]["ns_steps"])
    for bucket in _buckets(entries, hyper):
        (_muon_step if bucket[0][2]["use_muon"] else _nadam_step)(bucket)


def _muon_step(bucket):
    p = [e[0] for e in bucket]
    g, m = [x.grad for x in p], [e[1]["momentum"] for e in bucket]
    t, group = bucket[0][1]["step"], bucket[0][2]
    beta = group["momentum"]
    torch._foreach_mul_(m, beta)
    torch._foreach_add_(m, g, alpha=1 - beta)
    # science §Token sequences: optax's Nesterov look-ahead, each term with its own bias correction.
    m_hat = torch._foreach_add(torch._foreach_mul(m, beta / (1 - beta ** (t + 1))),
                               torch._foreach_mul(g, (1 - beta) / (1 - beta**t)))
    # Normalising first puts every singular value below 1, where the iteration converges.
    norms = torch._foreach_norm(m_hat)
    torch._foreach_add_(norms, 1e-8)
    x = torch._foreach_div(m_hat, norms)
    # Iterating on the short side keeps A = X X^T small: a tall matrix goes transposed.
    short = [xi.mT if xi.shape[0] > xi.shape[1] else xi for xi in x]
    o: list = [None] * len(p)
    for idx in _buckets(range(len(p)), lambda i: tuple(short[i].shape)):
        for i, oi in zip(idx, orthogonalise(torch.stack([short[i] for i in idx]),
                                            group["ns_steps"]).unbind(0)):
            o[i] = oi.mT if x[i].shape[0] > x[i].shape[1] else oi
    for idx in _buckets(range(len(p)), lambda i: muon_scale(p[i])):
        torch._foreach_add_([p[i] for i in idx], [o[i] for i in idx],
                            alpha=-group["lr"] * muon_scale(p[idx[0]]))


def _nadam_step(bucket):
    p = [e[0] for e in bucket]
    g = [x.grad for x in p]
    m, v = [e[1]["exp_avg"] for e in bucket], [e[1]["exp_avg_sq"] for e in bucket]
    t, group = bucket[0][1]["step"], bucket[0][2]
    b1, b2 = group["betas"]
    torch._foreach_mul_(m, b1)
    torch._foreach_add_(m, g, alpha=1 - b1)
    torch._foreach_mul_(v, b2)
    torch._foreach_addcmul_(v, g, g, value=1 - b2)
    # science §Token sequences: the non-Muon branch is NAdam (optax's nesterov=True adam), not Adam.
    m_hat = torch._foreach_add(torch._foreach_mul(m, b1 / (1 - b1 ** (t + 1))),
                               torch._foreach_mul(g, (1 - b1) / (1 - b1**t)))
    denom = torch._foreach_div(v, 1 - b2**t)
    torch._foreach_sqrt_(denom)
    torch._foreach_add_(denom, group["eps"])
    torch._foreach_addcdiv_(p, m_hat, denom, value=-group["lr"])


class NormalisedStep(torch.optim.Optimizer):
    """science §Tabular bandits tabular update: theta -= alpha * grad / ||grad||, one global norm over
    every parameter (the whole N x K logit table), 1e-30 under the square root."""

    def __init__(self, params, alpha=0.1):
        super().__init__(params, dict(alpha=alpha))

    @torch.no_grad()
    def step(self, closure=None):
        grads = [p.grad for g in self.param_groups for p in g["params"] if p.grad is not None]
        norm = torch.sqrt(sum(g.pow(2).sum() for g in grads) + 1e-30)
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad / norm, alpha=-group["alpha"])


def _adam(params, lr):
    # science §MNIST bandit: plain Adam, no Nesterov, no weight decay. foreach: one op per step for
    # all parameters (on the CPU each parameter's numbers are the per-tensor loop's).
    return torch.optim.Adam(params, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                            foreach=True)


def _adamw(params, lr, weight_decay):
    # science §Language models: the paper's LLM runs (verl) use AdamW; decoupled weight decay.
    return torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=weight_decay)


_ADAM_KEYS = ("lr", "betas", "eps", "weight_decay", "amsgrad", "maximize", "foreach",
              "capturable", "differentiable", "fused", "decoupled_weight_decay")


def _adam_seeds(opts) -> bool:
    """torch's Adam/AdamW step for several optimizers as one foreach call over all their
    parameters; False (nothing done) where their hyperparameters differ."""
    groups = [g for o in opts for g in o.param_groups]
    if any(tuple(g.get(k) for k in _ADAM_KEYS) != tuple(groups[0].get(k) for k in _ADAM_KEYS)
           for g in groups):
        return False
    lists: tuple[list, ...] = ([], [], [], [], [], [])
    has_complex = False
    for o in opts:
        for g in o.param_groups:
            has_complex |= o._init_group(g, *lists)
    g = groups[0]
    adam_fn = importlib.import_module("torch.optim.adam").adam
    adam_fn(*lists, amsgrad=g["amsgrad"], has_complex=has_complex, beta1=g["betas"][0],
            beta2=g["betas"][1], lr=g["lr"], weight_decay=g["weight_decay"], eps=g["eps"],
            maximize=g["maximize"], foreach=True, capturable=g["capturable"],
            differentiable=g["differentiable"], fused=g["fused"],
            decoupled_weight_decay=g.get("decoupled_weight_decay", False))
    return True


def _normalised_seeds(opts) -> bool:
    """NormalisedStep for several optimizers of one parameter each (a tabular task's
    table), their gradients stacked [S, ...]: one norm per seed over its own slice, one
    division, one foreach update. False (nothing done) where their steps or shapes differ."""
    params = [[p for g in o.param_groups for p in g["params"] if p.grad is not None] for o in opts]
    alphas = {g["alpha"] for o in opts for g in o.param_groups}
    if len(alphas) != 1 or any(len(ps) != 1 for ps in params) or \
            len({ps[0].shape for ps in params}) != 1:
        return False
    p = [ps[0] for ps in params]
    g = torch.stack([x.grad for x in p])
    # NormalisedStep.step's arithmetic, per seed: a slice's sum equals its table's sum
    norm = torch.sqrt(g.pow(2).sum(tuple(range(1, g.dim()))) + 1e-30)
    torch._foreach_add_(p, (g / norm.view(-1, *[1] * (g.dim() - 1))).unbind(), alpha=-alphas.pop())
    return True


@torch.no_grad()
def step_seeds(opts: list) -> None:
    """One optimizer step for a seed batch (one optimizer per seed, same kind and
    hyperparameters), as one update over all their parameters: MuonNAdam (`update`),
    Adam/AdamW (torch's foreach step), NormalisedStep (`_normalised_seeds`). Each seed's
    parameters and state end as its own step() leaves them (tests/test_optim.py)."""
    kind = type(opts[0])
    if len(opts) > 1 and all(type(o) is kind for o in opts):
        if kind is MuonNAdam:
            return update([e for o in opts for e in o.entries()])
        if issubclass(kind, torch.optim.Adam) and _adam_seeds(opts):
            return None
        if kind is NormalisedStep and _normalised_seeds(opts):
            return None
    for o in opts:
        o.step()


def _muon_nadam(params, lr):
    return MuonNAdam(params, lr=lr)


def _normalised_step(params, alpha):
    return NormalisedStep(params, alpha=alpha)


# name -> factory(params, **hyperparameters); the factory's keyword arguments are the
# keys its conf/optim yaml may set.
OPTIMIZERS = {
    "muon_nadam": _muon_nadam,
    "adam": _adam,
    "adamw": _adamw,
    "normalised_step": _normalised_step,
}


def check_optimizer(name, hparams):
    """Validate an optim config section (without parameters to build it on)."""
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; valid choices: {sorted(OPTIMIZERS)}")
    wanted = [p for p in inspect.signature(OPTIMIZERS[name]).parameters if p != "params"]
    if sorted(hparams) != sorted(wanted):
        unknown = sorted(set(hparams) - set(wanted))
        close = difflib.get_close_matches(unknown[0], wanted, n=1) if unknown else []
        raise ValueError(f"optim={name} takes the keys {', '.join(wanted)}; got "
                         f"{', '.join(sorted(hparams)) or 'none'}"
                         + (f"; did you mean optim.{close[0]}?" if close else ""))
    for key, value in hparams.items():
        if key == "weight_decay":  # a fraction of the weights per step: 0 is none
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
                raise ValueError(f"optim.weight_decay must be a number in [0, 1), got {value!r}")
            continue
        # NaN fails both comparisons and inf the bound: no separate finiteness test.
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                0 < value <= MAX_STEP_SIZE):
            raise ValueError(f"optim.{key} must be a positive number, finite and at most "
                             f"{MAX_STEP_SIZE:g}, got {value!r}")


def build_optimizer(name, params, **hparams):
    """Look up an optimizer by config name; a new optimizer is one OPTIMIZERS entry."""
    check_optimizer(name, hparams)
    return OPTIMIZERS[name](params, **hparams)
