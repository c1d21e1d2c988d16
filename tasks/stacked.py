"""The forward of tasks/transformer.py's Transformer, over a leading seed axis.

S policies of one architecture run as one computation; a single run is S = 1 (the
module's own forward is this one). Their parameters stacked into [S, ...] tensors
(`stack`), activations [S, b, t, d], every dense layer (the output head too) one bmm over
the seed axis, attention one SDPA call over S*b sequences, LayerNorm tasks/_layernorm.py's.
On the CPU at one thread each seed's slice then equals its run at S = 1 bit for bit
(tests/test_batched.py). Elsewhere (more threads, a GPU, where bmm may tile and reduce
otherwise) expect last-bit differences, which training then carries on.

`stack` keeps the autograd link to each module's parameters (torch.stack is
differentiable), so a backward of the S seeds' summed losses leaves each module's own
`.grad`, and each seed's optimizer steps its module unchanged.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..contract.batch import stack_seeds
from ._layernorm import layer_norm

Params = dict[str, torch.Tensor]


def stack(policies: list[torch.nn.Module]) -> Params:
    """name -> [S, *shape], differentiable back to each policy's parameters."""
    named = [dict(p.named_parameters()) for p in policies]
    return {k: stack_seeds([n[k] for n in named]) for k in named[0]}


def _dense(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
    """x [S, n, i] @ w [S, i, o] (+ b [S, o]). A bmm's slices equal the per-seed mm
    bit for bit on the CPU (measured); so do the broadcast bias add and its gradient's
    sum over n, given each seed's gradient the strides of its single run's."""
    y = torch.bmm(x, w)
    return y if b is None else y + b.unsqueeze(1)


class Stacked:
    """A stacked view of S Transformers (S = 1: one): heads, layers and widths read from
    the first."""

    def __init__(self, policies: list[torch.nn.Module]):
        self.policies, ref = policies, policies[0]
        self.S, self.layers = len(policies), len(ref.blocks)
        self.heads, self.hd = ref.blocks[0].heads, ref.blocks[0].hd
        self.p = stack(policies)

    # x is [S, b, t, d] throughout; attention sees [S*b, heads, t, hd].

    def _qkv(self, i: int, x: torch.Tensor):
        p, S, (b, t, d) = self.p, self.S, x.shape[1:]
        pre = f"blocks.{i}."
        y = layer_norm(x.reshape(S, b * t, d), p[pre + "ln1_scale"], p[pre + "ln1_bias"])
        w = torch.cat([p[pre + "wq"], p[pre + "wk"], p[pre + "wv"]], 2).reshape(S, d, 3 * d)
        bias = torch.cat([p[pre + "bq"], p[pre + "bk"], p[pre + "bv"]], 1).reshape(S, 3 * d)
        qkv = _dense(y, w, bias).view(S * b, t, 3, self.heads, self.hd).permute(2, 0, 3, 1, 4)
        return qkv.unbind(0)  # one backward (a stack), where three indexings zero-fill three

    def _finish(self, i: int, x: torch.Tensor, att: torch.Tensor) -> torch.Tensor:
        p, S, (b, t, d) = self.p, self.S, x.shape[1:]
        pre = f"blocks.{i}."
        flat = x.reshape(S, b * t, d)
        flat = flat + torch.bmm(att.transpose(1, 2).reshape(S, b * t, d),
                                p[pre + "wo"].reshape(S, d, d)) + p[pre + "bo"].unsqueeze(1)
        y = layer_norm(flat, p[pre + "ln2_scale"], p[pre + "ln2_bias"])
        h = F.gelu(_dense(y, p[pre + "w1"], p[pre + "b1"]), approximate="tanh")
        out = flat + torch.bmm(h, p[pre + "w2"]) + p[pre + "b2"].unsqueeze(1)
        return out.view(S, b, t, d)

    def _embed(self, tokens: torch.Tensor, start: int) -> torch.Tensor:
        """tokens [S, b, t] -> [S, b, t, d]."""
        seeds = torch.arange(self.S, device=tokens.device).view(-1, 1, 1)
        return self.p["tok_emb"][seeds, tokens] + \
            self.p["pos_emb"][:, start:start + tokens.shape[2]].unsqueeze(1)

    def head(self, x: torch.Tensor) -> torch.Tensor:
        """Logits [S, ..., V] of hidden states x [S, ..., d]. The bias is added in x's
        shape, as the module adds it: its gradient is then summed over a gradient of the
        module's strides (after a flat add, over a contiguous copy: another order)."""
        S, rest, d = self.S, x.shape[1:-1], x.shape[-1]
        y = layer_norm(x.reshape(S, -1, d), self.p["lnf_scale"], self.p["lnf_bias"])
        bias = self.p["head_b"].view(S, *[1] * len(rest), -1)
        return _dense(y, self.p["head_w"]).view(S, *rest, self.p["head_w"].shape[-1]) + bias  # rest may hold a 0

    def forward(self, tokens: torch.Tensor, caches: list[list] | None = None,
                start: int = 0, head: bool = True) -> torch.Tensor:
        """Logits [S, b, t, V] (hidden states [S, b, t, d] with head=False); caches as in
        Transformer.forward, over S*b sequences."""
        x = self._embed(tokens, start)
        for i in range(self.layers):
            q, k, v = self._qkv(i, x)
            if caches is not None:
                cache = caches[i]
                if cache:
                    assert x.shape[2] == 1, "decode one position at a time after the prefill"
                    k = torch.cat([cache[0][0], k], 2)
                    v = torch.cat([cache[0][1], v], 2)
                cache[:] = [(k, v)]
            # Scale 1/sqrt(head_dim) is SDPA's default; a causal mask equals setting masked
            # scores to the dtype's minimum since no row is fully masked.
            x = self._finish(i, x, F.scaled_dot_product_attention(q, k, v, is_causal=x.shape[2] > 1))
        return self.head(x) if head else x

    def forward_shared_prefix(self, prefix: torch.Tensor, suffix: torch.Tensor, group: int,
                              head: bool = True):
        """prefix [S, b, P], suffix [S, b*group, T] -> logits [S, b, V], [S, b*group, T, V]
        (with head=False the hidden states [S, b, d], [S, b*group, T, d])."""
        xp, xs = self._embed(prefix, 0), self._embed(suffix, prefix.shape[2])
        P, T = prefix.shape[2], suffix.shape[2]
        mask = torch.ones(T, P + T, dtype=torch.bool, device=xs.device)
        mask[:, P:] = torch.ones(T, T, dtype=torch.bool, device=xs.device).tril()
        for i in range(self.layers):
            qp, kp, vp = self._qkv(i, xp)
            qs, ks, vs = self._qkv(i, xs)
            keys = torch.cat([kp.repeat_interleave(group, 0), ks], 2)
            values = torch.cat([vp.repeat_interleave(group, 0), vs], 2)
            att_s = F.scaled_dot_product_attention(qs, keys, values, attn_mask=mask)
            att_p = F.scaled_dot_product_attention(qp, kp, vp, is_causal=P > 1)
            xp, xs = self._finish(i, xp, att_p), self._finish(i, xs, att_s)
        if not head:
            return xp[:, :, -1], xs
        return self.head(xp[:, :, -1]), self.head(xs)
