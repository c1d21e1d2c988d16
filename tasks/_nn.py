"""Initialisation shared by the policies (science §Token sequences, §MNIST bandit)."""
from __future__ import annotations

import math

import torch
from torch import nn

TRUNC_STD_CORRECTION = 0.87962566103423978  # std of N(0,1) truncated to [-2, 2]


def lecun_truncated_(t: torch.Tensor, fan_in: int, gen: torch.Generator) -> torch.Tensor:
    """LeCun normal truncated at +-2 sigma, rescaled so the final std is 1/sqrt(fan_in)."""
    std = math.sqrt(1.0 / fan_in) / TRUNC_STD_CORRECTION
    return nn.init.trunc_normal_(t, 0.0, std, -2 * std, 2 * std, generator=gen)
