"""The token-sequence policy of science §Token sequences: a 2-layer, 2-head, pre-norm causal transformer.

Its parameters and their initialisation; its forward is tasks/stacked.py's at S = 1 (one
forward for a single run and a seed batch). Parameters are stored in the JAX reference's
layout -- dense kernels (in, out), q/k/v kernels (d_model, heads, head_dim), q/k/v biases
(heads, head_dim), the out kernel (heads, head_dim, d_model) -- so the reference's
optimizer rule "2-D tensor -> Muon, fan_in = first axis" applies to them unchanged
(bench/optim.py).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from ._nn import lecun_truncated_
from .stacked import Stacked


def _param(*shape: int) -> nn.Parameter:
    return nn.Parameter(torch.zeros(*shape))


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

    def forward(self, tokens: torch.Tensor, caches: list[list] | None = None,
                start: int = 0) -> torch.Tensor:
        """Logits [b, t, V] for tokens [b, t] sitting at positions start..start+t-1. With
        `caches` (one list per layer, holding (k, v) or nothing), keys and values of
        earlier calls are reused and the new ones appended: incremental decoding."""
        return Stacked([self]).forward(tokens[None], caches, start)[0]

    def forward_shared_prefix(self, prefix: torch.Tensor, suffix: torch.Tensor, group: int):
        """Logits of a group of continuations of each prefix, as one forward of
        prefix + suffix would give them, with the prefix computed once.

        prefix [b, P] and suffix [b*group, S] tokens -> logits at the prefix's last
        position [b, V] and at every suffix position [b*group, S, V]."""
        first, rest = Stacked([self]).forward_shared_prefix(prefix[None], suffix[None], group)
        return first[0], rest[0]
