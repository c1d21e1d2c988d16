"""How the token-level losses of the group-RL zoo reduce a per-step loss
l [N, K, T] to a scalar: the `aggregation` parameter every token-level surrogate shares.
With candidate weights w_nk (batch.candidate_weights(): 1, the sampled indicator, or the
population probability) and an optional step mask m [N, K, T] (the LLM task family's
completion mask, batch.mask; the other tasks have none: every step counts, m = 1):

    token-mean            L = sum_nkt w m l / sum_nkt w m                 DAPO, BNPO (TRL "dapo",
                                                                          "bnpo"), CISPO, GPG
    seq-mean-token-mean   L = sum_nk w (sum_t m l / sum_t m) / sum_nk w   GRPO as TRL ("grpo"), GSPO
    seq-mean-token-sum    L = sum_nk w (sum_t m l) / sum_nk w             the REINFORCE form (RLOO)
    constant              L = sum_nkt w m l / (sum_nk w * T_max)          Dr. GRPO (TRL "dr_grpo")

Sequence means count the sequences with at least one step (verl agg_loss); `constant`
counts every sequence, as TRL's dr_grpo does (per_token_loss.size(0)). T_max is the
generation budget (TRL max_completion_length), by default the batch's T.

On the token tasks every sequence has T = H steps and no mask, so token-mean,
seq-mean-token-mean and constant (T_max = T) are the same number, and seq-mean-token-sum
is T times it: the modes differ by a constant factor, which the normalised optimisers
(Muon, NAdam) all but cancel. They part only where lengths differ (a mask) or
T_max > T; tests/test_zoo.py shows each on a hand-built masked batch.
"""
from __future__ import annotations

import torch

AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "constant")


def _positive(x: torch.Tensor) -> torch.Tensor:
    """A count or weight sum as a divisor: 1 where it is 0 (nothing to average, sum 0)."""
    return torch.where(x > 0, x, torch.ones_like(x))


def aggregate(loss: torch.Tensor, mode: str, weights: torch.Tensor | float = 1.0,
              mask: torch.Tensor | None = None, max_len: int | None = None) -> torch.Tensor:
    """Reduce a per-step loss [N, K, T] by `mode` (AGGREGATIONS); weights [N, K] or a
    scalar; mask [N, K, T] of 0/1 or None; max_len: constant's T_max (None: T)."""
    if mode not in AGGREGATIONS:
        raise ValueError(f"aggregation {mode!r} is not one of {', '.join(AGGREGATIONS)}")
    T = loss.shape[-1]
    m = torch.ones_like(loss) if mask is None else mask.to(loss.dtype)
    w = torch.as_tensor(weights, dtype=loss.dtype, device=loss.device).expand(loss.shape[:-1])
    token_sum = (loss * m).sum(-1)            # [N, K]
    length = m.sum(-1)                        # [N, K]
    if mode == "token-mean":
        return (w * token_sum).sum() / _positive((w * length).sum())
    if mode == "constant":
        t_max = T if max_len is None else max_len
        if t_max < T:
            raise ValueError(f"algo.max_len={max_len} is below the batch's {T} steps: "
                             "the constant normaliser is the longest possible sequence")
        return (w * token_sum).sum() / _positive(w.sum() * t_max)
    seq = token_sum / _positive(length) if mode == "seq-mean-token-mean" else token_sum
    counted = w * (length > 0).to(loss.dtype)
    return (counted * seq).sum() / _positive(counted.sum())
