"""Per-run random streams (issue 2, item 4).

Each stream is its own torch.Generator seeded from (seed, stream name), never the
global RNG, so a seed gives the same initial weights and the same prompts under every
algorithm (paired comparisons), and jobs sharing a process cannot disturb each other.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch

STREAMS = ("init", "data", "action")


def stream_seed(seed: int, stream: str) -> int:
    digest = hashlib.sha256(f"tpo-bench:{seed}:{stream}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


@dataclass
class Streams:
    init: torch.Generator
    """model initialisation"""
    data: torch.Generator
    """prompts, images, contexts"""
    action: torch.Generator
    """the policy's sampling"""

    @classmethod
    def from_seed(cls, seed: int, device: str | torch.device = "cpu") -> "Streams":
        gens = {}
        for name in STREAMS:
            # Initialisation draws on the CPU, so a seed gives the same initial weights on
            # every device; data and actions are drawn where the tensors live.
            g = torch.Generator(device="cpu" if name == "init" else device)
            g.manual_seed(stream_seed(seed, name))
            gens[name] = g
        return cls(**gens)

    def state(self) -> dict[str, torch.Tensor]:
        return {name: getattr(self, name).get_state() for name in STREAMS}

    def load_state(self, state: dict[str, torch.Tensor]) -> None:
        for name in STREAMS:
            getattr(self, name).set_state(state[name])
