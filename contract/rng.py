"""Per-run random streams.

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
    top_up: "Streams | None" = None
    """data and action streams of their own for extra rollouts within an episode (DAPO's
    dynamic sampling), so that they never shift the episode prompts every method of a
    seed shares; made on first use"""
    seed: int | None = None

    @classmethod
    def from_seed(cls, seed: int, device: str | torch.device = "cpu", prefix: str = "") -> "Streams":
        gens = {}
        for name in STREAMS:
            # Initialisation draws on the CPU, so a seed gives the same initial weights on
            # every device; data and actions are drawn where the tensors live.
            g = torch.Generator(device="cpu" if name == "init" else device)
            g.manual_seed(stream_seed(seed, prefix + name))
            gens[name] = g
        return cls(**gens, seed=seed)

    def extra(self) -> "Streams":
        """The top-up streams (seeded from the run's seed and their own names)."""
        if self.top_up is None:
            if self.seed is None:
                raise ValueError("top-up streams need the seed these streams came from")
            self.top_up = Streams.from_seed(self.seed, self.data.device, prefix="top_up:")
        return self.top_up

    def state(self) -> dict[str, torch.Tensor]:
        out = {name: getattr(self, name).get_state() for name in STREAMS}
        if self.top_up is not None:
            out.update({f"top_up:{k}": v for k, v in self.top_up.state().items()})
        return out

    def load_state(self, state: dict[str, torch.Tensor]) -> None:
        for name in STREAMS:
            getattr(self, name).set_state(state[name])
        # A checkpoint from before any top-up (every run before dynamic sampling) has
        # none: the streams then start where a fresh run's would.
        if any(k.startswith("top_up:") for k in state):
            self.extra().load_state({k.removeprefix("top_up:"): v for k, v in state.items()
                                     if k.startswith("top_up:")})
