"""Tasks: each module produces groups of scored candidates (`contract.batch.Batch`, built
with one of its four named constructors) from a policy it owns. They never import
algorithms.

A task is a frozen dataclass registered under a name; its fields are its config
(`conf/task/<preset>.yaml`). What it exposes is `contract.batch.Task`, a
`typing.Protocol`: `name`, `episodes`, `check_algorithm`, `make_policy`, `rollout`,
`logprobs`, `evaluate`; its optional members, with their defaults, are `contract.batch.TaskOptions` (its base). Each task
keeps what it needs to re-score its candidates in a frozen dataclass of its own
(`batch.obs`), read only by its `logprobs`.
"""
if __name__ == "tasks":  # the top-level name: this module is tpo_bench.tasks
    import tpo_bench

    tpo_bench.alias(__name__)
    __package__ = f"tpo_bench.{__name__}"  # what follows resolves its imports there

import importlib

from ..contract.registry import TASKS, public_modules

register = TASKS.register

# The modules the harness ships here. Any other public module in this folder (your own,
# dropped in) is imported as well, and so runs in every run: bench.fingerprint makes it
# part of every run's code fingerprint.
SHIPPED = ("llm", "mnist", "seq", "stacked", "tabular", "transformer")

# Each module registers itself on import: importing the package fills TASKS.
for _module in public_modules(__name__, __path__):
    importlib.import_module(_module)
