"""Algorithms: each module turns a `contract.batch.Batch` plus the current policy's
log-probs into a loss. They never import tasks.

An algorithm is a frozen dataclass registered under a name; its fields are its config
(`conf/algo/<name>.yaml` sets them). What it exposes is `contract.batch.Algorithm`, a
`typing.Protocol`: `k`, `epochs`, `loss(batch, logp) -> LossOut`; its optional members
(`needs`, `level`, `dynamic_sampling`), with their defaults, are
`contract.batch.AlgorithmOptions` (its base).

Losses weigh each candidate's term in a group's sums by `batch.candidate_weights()`
(the sampled action's indicator, or the population probability, where the task set one).
"""
if __name__ == "algorithms":  # the top-level name: this module is tpo_bench.algorithms
    import tpo_bench

    tpo_bench.alias(__name__)
    __package__ = f"tpo_bench.{__name__}"  # what follows resolves its imports there

import importlib

from ..contract.registry import ALGORITHMS, public_modules

register = ALGORITHMS.register

# Loss metrics that describe the whole update, so the runner averages them over its
# epochs: at the first epoch the policy still is the actor (a ratio of 1: no clipping,
# no KL), so a first-epoch value would say nothing. Loss and gradient norm stay the
# first epoch's, the gradient at the behaviour policy.
OVER_EPOCHS = ("clip_frac", "kl")

# The modules the harness ships here. Any other public module in this folder (your own,
# dropped in) is imported as well, and so runs in every run: bench.fingerprint makes it
# part of every run's code fingerprint.
SHIPPED = ("ce", "cispo", "clipped", "dg", "gpg", "grpo", "lpo", "pg", "ppo", "tpo")

# Each module registers itself on import: importing the package fills ALGORITHMS.
for _module in public_modules(__name__, __path__):
    importlib.import_module(_module)
