"""Optimizers for the benchmark.

SPEC 3.1 "Optimizer": the sequence-task runs use optax.contrib.muon 0.2.8 defaults,
which is Muon on 2-D tensors and NAdam on everything else. torch.optim.Muon differs
(no bias-corrected Nesterov, other scaling, no NAdam branch), so we write it out here.
SPEC 3.2: the MNIST bandit uses plain Adam.

Our models keep every tensor in the JAX reference's layout (dense kernels (in, out),
q/k/v kernels (d_model, heads, head_dim), q/k/v biases (heads, head_dim)), so the
reference's "ndim == 2 -> Muon, fan_in = shape[0]" rule applies literally.
"""

import difflib
import inspect
import math

import torch

# Every optimizer here takes a step size (lr, alpha). The paper's are 1e-3 and 0.1; above
# 10 a step of Adam, Muon or the normalised step moves each parameter by more than the
# whole scale of the initialisation, so such a value is a typo (1e1 for 1e-1), not a run.
MAX_STEP_SIZE = 10.0

# SPEC 3.1: quintic Newton-Schulz coefficients used by optax.contrib.muon.
NS_COEFFS = (3.4445, -4.7750, 2.0315)


def is_muon(p):
    # SPEC 3.1: the reference's rule is "2-D tensor -> Muon", on its own shapes.
    return p.ndim == 2


def fans(p):
    # SPEC 3.1: fan_in is the first axis of an (in, out) kernel, V for (V, d) tables
    # and heads for the (heads, head_dim) q/k/v biases.
    return p.shape[0], p.shape[1]


def muon_scale(p):
    # SPEC 3.1: optax scales the orthogonal update up for wide matrices only.
    fan_in, fan_out = fans(p)
    return math.sqrt(max(1.0, fan_out / fan_in))


def partition(named_params):
    """Split (name, tensor) pairs into (muon_names, nadam_names), in input order."""
    muon, nadam = [], []
    for name, p in named_params:
        (muon if is_muon(p) else nadam).append(name)
    return muon, nadam


def newton_schulz(m, steps=5, eps=1e-8):
    """Approximately orthogonalise a 2-D matrix (SPEC 3.1, optax 0.2.8 defaults)."""
    a, b, c = NS_COEFFS
    # Normalising first puts every singular value below 1, where the iteration converges.
    x = m / (torch.linalg.matrix_norm(m) + eps)
    # Iterating on the short side keeps A = X X^T small.
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.T
    for _ in range(steps):
        A = x @ x.T
        x = a * x + (b * A + c * A @ A) @ x
    return x.T if tall else x


class MuonNAdam(torch.optim.Optimizer):
    """Muon for 2-D params, NAdam for the rest, one learning rate (SPEC 3.1).

    `params` is an iterable of tensors or of (name, tensor) pairs (e.g.
    model.named_parameters()). It is split into two param groups, use_muon True/False.
    State and step counts persist across step() calls; there is no weight decay.
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

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if group["use_muon"]:
                    self._muon_step(p, group)
                else:
                    self._nadam_step(p, group)
        return loss

    def _muon_step(self, p, group):
        g, beta = p.grad, group["momentum"]
        state = self.state[p]
        if not state:
            state["step"] = 0
            state["momentum"] = torch.zeros_like(p)
        state["step"] += 1
        t, m = state["step"], state["momentum"]
        m.mul_(beta).add_(g, alpha=1 - beta)
        # SPEC 3.1: optax's Nesterov look-ahead, each term with its own bias correction.
        m_hat = (beta / (1 - beta ** (t + 1))) * m + ((1 - beta) / (1 - beta**t)) * g
        o = newton_schulz(m_hat, steps=group["ns_steps"])
        p.add_(o, alpha=-group["lr"] * muon_scale(p))

    def _nadam_step(self, p, group):
        g = p.grad
        b1, b2 = group["betas"]
        state = self.state[p]
        if not state:
            state["step"] = 0
            state["exp_avg"] = torch.zeros_like(p)
            state["exp_avg_sq"] = torch.zeros_like(p)
        state["step"] += 1
        t, m, v = state["step"], state["exp_avg"], state["exp_avg_sq"]
        m.mul_(b1).add_(g, alpha=1 - b1)
        v.mul_(b2).addcmul_(g, g, value=1 - b2)
        # SPEC 3.1: the non-Muon branch is NAdam (optax's nesterov=True adam), not Adam.
        m_hat = (b1 / (1 - b1 ** (t + 1))) * m + ((1 - b1) / (1 - b1**t)) * g
        v_hat = v / (1 - b2**t)
        p.addcdiv_(m_hat, v_hat.sqrt().add_(group["eps"]), value=-group["lr"])


class NormalisedStep(torch.optim.Optimizer):
    """SPEC 3.3 tabular update: theta -= alpha * grad / ||grad||, one global norm over
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
    # SPEC 3.2: plain Adam, no Nesterov, no weight decay.
    return torch.optim.Adam(params, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)


def _adamw(params, lr, weight_decay):
    # SPEC 7: the paper's LLM runs (verl) use AdamW; decoupled weight decay.
    return torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=weight_decay)


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
