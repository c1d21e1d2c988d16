"""The token-sequence policy of science §Token sequences: a 2-layer, 2-head, pre-norm causal transformer.

Parameters are stored in the JAX reference's layout -- dense kernels (in, out), q/k/v
kernels (d_model, heads, head_dim), q/k/v biases (heads, head_dim), the out kernel
(heads, head_dim, d_model) -- so the reference's optimizer rule "2-D tensor -> Muon,
fan_in = first axis" applies to them unchanged (bench/optim.py).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ._layernorm import layer_norm
from ._nn import lecun_truncated_


def _param(*shape: int) -> nn.Parameter:
    return nn.Parameter(torch.zeros(*shape))


def _ln(x: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """LayerNorm of x [..., d] as one seed of tasks/_layernorm.py's stacked form (S = 1),
    so a seed of a batched job rounds as its single run."""
    d = x.shape[-1]
    return layer_norm(x.reshape(1, -1, d), scale.unsqueeze(0), bias.unsqueeze(0)).view(x.shape)


class Block(nn.Module):
    def __init__(self, d: int, heads: int, ffn_mult: int):
        super().__init__()
        hd = d // heads
        self.heads, self.hd = heads, hd
        self.ln1_scale, self.ln1_bias = nn.Parameter(torch.ones(d)), _param(d)
        self.wq, self.wk, self.wv = _param(d, heads, hd), _param(d, heads, hd), _param(d, heads, hd)
        self.bq, self.bk, self.bv = _param(heads, hd), _param(heads, hd), _param(heads, hd)
        self.wo, self.bo = _param(heads, hd, d), _param(d)
        self.ln2_scale, self.ln2_bias = nn.Parameter(torch.ones(d)), _param(d)
        self.w1, self.b1 = _param(d, ffn_mult * d), _param(ffn_mult * d)
        self.w2, self.b2 = _param(ffn_mult * d, d), _param(d)

    def init_(self, gen: torch.Generator) -> None:
        d = self.wq.shape[0]
        for w in (self.wq, self.wk, self.wv):
            lecun_truncated_(w.data, d, gen)
        lecun_truncated_(self.wo.data, self.heads * self.hd, gen)
        lecun_truncated_(self.w1.data, d, gen)
        lecun_truncated_(self.w2.data, self.w1.shape[1], gen)

    def _qkv(self, x: torch.Tensor):
        b, t, d = x.shape
        y = _ln(x, self.ln1_scale, self.ln1_bias)
        w = torch.cat([self.wq, self.wk, self.wv], 1).reshape(d, 3 * d)
        bias = torch.cat([self.bq, self.bk, self.bv]).reshape(3 * d)
        return (y @ w + bias).view(b, t, 3, self.heads, self.hd).permute(2, 0, 3, 1, 4)

    def _finish(self, x: torch.Tensor, att: torch.Tensor) -> torch.Tensor:
        """Attention output [b, heads, t, hd] -> residual, then the FFN sublayer."""
        b, t, d = x.shape
        x = x + att.transpose(1, 2).reshape(b, t, d) @ self.wo.reshape(d, d) + self.bo
        y = _ln(x, self.ln2_scale, self.ln2_bias)
        return x + F.gelu(y @ self.w1 + self.b1, approximate="tanh") @ self.w2 + self.b2

    def forward(self, x: torch.Tensor, cache: list | None = None) -> torch.Tensor:
        """x [b, t, d]. With `cache` (a list holding (k, v) or nothing), keys and values of
        earlier calls are reused and the new ones appended: incremental decoding."""
        q, k, v = self._qkv(x)
        if cache is not None:
            if cache:
                # Decoding appends one position at a time; it may see every cached key.
                assert x.shape[1] == 1, "decode one position at a time after the prefill"
                k = torch.cat([cache[0][0], k], 2)
                v = torch.cat([cache[0][1], v], 2)
            cache[:] = [(k, v)]
        # Scale 1/sqrt(head_dim) is SDPA's default; a causal mask equals setting masked
        # scores to the dtype's minimum since no row is fully masked.
        return self._finish(x, F.scaled_dot_product_attention(q, k, v, is_causal=x.shape[1] > 1))

    def forward_shared_prefix(self, xp: torch.Tensor, xs: torch.Tensor, group: int):
        """Prefix states xp [b, P, d] shared by `group` suffixes each, xs [b*group, S, d]:
        the prefix is computed once per b instead of once per suffix."""
        qp, kp, vp = self._qkv(xp)
        qs, ks, vs = self._qkv(xs)
        P, S = xp.shape[1], xs.shape[1]
        keys = torch.cat([kp.repeat_interleave(group, 0), ks], 2)
        values = torch.cat([vp.repeat_interleave(group, 0), vs], 2)
        mask = torch.ones(S, P + S, dtype=torch.bool, device=xs.device)
        mask[:, P:] = torch.ones(S, S, dtype=torch.bool, device=xs.device).tril()
        att_s = F.scaled_dot_product_attention(qs, keys, values, attn_mask=mask)
        att_p = F.scaled_dot_product_attention(qp, kp, vp, is_causal=P > 1)
        return self._finish(xp, att_p), self._finish(xs, att_s)


class Transformer(nn.Module):
    def __init__(self, vocab_size: int, max_len: int, d_model: int = 64, heads: int = 2,
                 layers: int = 2, ffn_mult: int = 4):
        super().__init__()
        self.tok_emb = _param(vocab_size, d_model)
        self.pos_emb = _param(max_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, heads, ffn_mult) for _ in range(layers))
        self.lnf_scale, self.lnf_bias = nn.Parameter(torch.ones(d_model)), _param(d_model)
        self.head_w, self.head_b = _param(d_model, vocab_size), _param(vocab_size)

    def init_(self, gen: torch.Generator) -> "Transformer":
        """science §Token sequences initialisation; biases stay zero, LayerNorm scales one."""
        d = self.tok_emb.shape[1]
        with torch.no_grad():
            self.tok_emb.normal_(0.0, 1.0 / math.sqrt(d), generator=gen)
            self.pos_emb.normal_(0.0, 0.02, generator=gen)
            for blk in self.blocks:
                blk.init_(gen)
            lecun_truncated_(self.head_w.data, d, gen)
        return self

    def _embed(self, tokens: torch.Tensor, start: int) -> torch.Tensor:
        return self.tok_emb[tokens] + self.pos_emb[start:start + tokens.shape[1]]

    def _head(self, x: torch.Tensor) -> torch.Tensor:
        x = _ln(x, self.lnf_scale, self.lnf_bias)
        return x @ self.head_w + self.head_b

    def forward(self, tokens: torch.Tensor, caches: list[list] | None = None,
                start: int = 0) -> torch.Tensor:
        """Logits [b, t, V] for tokens [b, t] sitting at positions start..start+t-1."""
        x = self._embed(tokens, start)
        for i, blk in enumerate(self.blocks):
            x = blk(x, None if caches is None else caches[i])
        return self._head(x)

    def forward_shared_prefix(self, prefix: torch.Tensor, suffix: torch.Tensor, group: int):
        """Logits of a group of continuations of each prefix, as one forward of
        prefix + suffix would give them, with the prefix computed once.

        prefix [b, P] and suffix [b*group, S] tokens -> logits at the prefix's last
        position [b, V] and at every suffix position [b*group, S, V]."""
        xp, xs = self._embed(prefix, 0), self._embed(suffix, prefix.shape[1])
        for blk in self.blocks:
            xp, xs = blk.forward_shared_prefix(xp, xs, group)
        return self._head(xp[:, -1]), self._head(xs)
