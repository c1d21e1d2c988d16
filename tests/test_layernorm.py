"""tasks/_layernorm.py: LayerNorm over a leading seed axis. Against F.layer_norm the
forward is equal and the gradients close; a seed's slice of the stacked computation is
that seed alone bit for bit (on the CPU, one thread); its op count does not grow with S."""
import re

import pytest
import torch
import torch.nn.functional as F

from conftest import REPO, one_line
from tpo_bench.tasks._layernorm import LN_EPS, layer_norm

pytestmark = pytest.mark.usefixtures("one_thread")  # bit-for-bit claims

# Gradients against F.layer_norm: max abs difference over each gradient's scale
# (dx: max |dy * w| / min std of a row; dw, db: the reference's largest magnitude).
# Measured worst, 20 draws each of n 1-1000, d 3-67: dx 6.7e-7, dw 2.2e-6, db 2.2e-6.
TOL = 1e-5


def _case(S: int, n: int, d: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(S, n, d, generator=g) * 2 + 0.5
    w, b = 1 + 0.3 * torch.randn(S, d, generator=g), 0.1 * torch.randn(S, d, generator=g)
    return x, w, b, torch.randn(S, n, d, generator=g)


def _run(fn, x, w, b, dy):
    """(output, dx, dw, db) of fn(x, w, b) under the output gradient dy."""
    leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    out = fn(*leaves)
    out.backward(dy)
    return (out.detach(), *(t.grad for t in leaves))


@pytest.mark.parametrize("n, d", [(1, 3), (5, 8), (40, 64), (300, 67)])
def test_matches_f_layer_norm(n, d):
    x, w, b, dy = _case(1, n, d, seed=n + d)
    ours = _run(layer_norm, x, w, b, dy)
    ref = _run(lambda x, w, b: F.layer_norm(x, (d,), w[0], b[0], LN_EPS).unsqueeze(0),
               x[0], w, b, dy)
    assert torch.equal(ours[0], ref[0])
    scales = ((dy * w.unsqueeze(1)).abs().max() / x.std(-1, correction=0).min(),
              ref[2].abs().max(), ref[3].abs().max())
    for got, want, scale in zip(ours[1:], (ref[1].unsqueeze(0), *ref[2:]), scales):
        assert (got - want).abs().max() <= TOL * scale


@pytest.mark.parametrize("S", [2, 3, 8, 32])
@pytest.mark.parametrize("n, d", [(1, 3), (5, 8), (15, 64), (33, 67), (257, 64), (4099, 64)])
def test_a_seeds_slice_is_that_seed_alone_bit_for_bit(S, n, d):
    """Output and the three gradients, for the first, a middle and the last seed."""
    x, w, b, dy = _case(S, n, d, seed=S * n + d)
    stacked = _run(layer_norm, x, w, b, dy)
    for s in (0, S // 2, S - 1):
        alone = _run(layer_norm, x[s:s + 1], w[s:s + 1], b[s:s + 1], dy[s:s + 1])
        for name, a, c in zip(("y", "dx", "dw", "db"), stacked, alone):
            assert torch.equal(a[s:s + 1], c), (name, s)


def test_its_op_count_does_not_grow_with_the_seeds():
    from dev.speed import OpCount

    def ops(S):
        x, w, b, dy = _case(S, 5, 8)
        with OpCount() as count:
            _run(layer_norm, x, w, b, dy)
        return count.ops

    assert ops(1) == ops(8) == ops(32)


def test_its_op_count_against_the_fused_kernels_is_the_performance_pages():
    """docs/performance.md: 7 ops per call under autograd (forward and backward) and 2
    without, where F.layer_norm's fused kernels take 2 and 1."""
    from dev.speed import OpCount

    x, w, b, dy = _case(1, 5, 8)

    def ops(fn, grad, s=slice(None)):  # s: the single run's tensors without the seed axis
        leaves = [t[s].clone().requires_grad_(grad) for t in (x, w, b)]
        with OpCount() as count:
            out = fn(*leaves)
            if grad:
                out.backward(dy[s])
        return count.ops

    fused = lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, LN_EPS)
    counts = [ops(layer_norm, True), ops(layer_norm, False), ops(fused, True, 0), ops(fused, False, 0)]
    page = one_line((REPO / "docs" / "performance.md").read_text())
    said = re.search(r"It costs the single run (\d+) ops per LayerNorm call under autograd \(forward and "
                     r"backward\) and (\d+) without, where `F.layer_norm`'s fused kernels take (\d+) and (\d+)",
                     page)
    assert said, "docs/performance.md does not quote the LayerNorm op counts"
    assert [int(v) for v in said.groups()] == counts
