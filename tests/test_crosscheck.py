"""dev/crosscheck_artifact.py maps the JAX artifact's parameter tree onto our
Transformer; a wrong mapping would make the cross-check compare the wrong tensors."""
import numpy as np
import torch

from tpo_bench.tasks.transformer import Transformer
from dev import crosscheck_artifact as crosscheck


def _flax_tree(m: Transformer) -> dict:
    """Our weights under flax's auto-generated names (SelfAttention_i, LayerNorm_j, Dense_j)."""
    a = lambda t: t.detach().numpy().copy()  # noqa: E731
    P = {"Embed_0": {"embedding": a(m.tok_emb)}, "pos_emb": a(m.pos_emb),
         f"LayerNorm_{2 * len(m.blocks)}": {"scale": a(m.lnf_scale), "bias": a(m.lnf_bias)},
         f"Dense_{2 * len(m.blocks)}": {"kernel": a(m.head_w), "bias": a(m.head_b)}}
    for i, b in enumerate(m.blocks):
        P[f"LayerNorm_{2 * i}"] = {"scale": a(b.ln1_scale), "bias": a(b.ln1_bias)}
        P[f"LayerNorm_{2 * i + 1}"] = {"scale": a(b.ln2_scale), "bias": a(b.ln2_bias)}
        P[f"SelfAttention_{i}"] = {n: {"kernel": a(getattr(b, f"w{s}")), "bias": a(getattr(b, f"b{s}"))}
                                   for n, s in (("query", "q"), ("key", "k"), ("value", "v"), ("out", "o"))}
        P[f"Dense_{2 * i}"] = {"kernel": a(b.w1), "bias": a(b.b1)}
        P[f"Dense_{2 * i + 1}"] = {"kernel": a(b.w2), "bias": a(b.b2)}
    return P


def _distinct(m: Transformer) -> Transformer:
    # Every tensor distinct (LayerNorm scales and biases too), so a swap cannot go unseen.
    with torch.no_grad():
        for j, p in enumerate(m.parameters()):
            p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(j)))
    return m


def test_load_puts_every_artifact_tensor_in_its_place():
    src = _distinct(Transformer(2, 20))
    dst = Transformer(2, 20)
    crosscheck.load(dst, _flax_tree(src))
    for (n, a), (_, b) in zip(src.named_parameters(), dst.named_parameters()):
        assert torch.equal(a, b), n


def test_param_gap_ignores_only_the_key_biases():
    a, b = _distinct(Transformer(2, 20)), _distinct(Transformer(2, 20))
    with torch.no_grad():
        b.blocks[0].bk.add_(1.0)
    assert crosscheck.param_gap(a, b) == (0.0, "tok_emb")
    with torch.no_grad():
        b.blocks[1].bq.add_(0.5)
    gap, where = crosscheck.param_gap(a, b)
    assert where == "blocks.1.bq" and np.isclose(gap, 0.5)
