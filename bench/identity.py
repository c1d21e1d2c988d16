"""Run identity (issue 2, item 3): a short hash of the resolved scientific config.

Seed, launcher, device, paths and logging knobs are left out, so the seeds of one
config share a hash and any change to what is being run (algo.k, a learning rate,
task.vocab_size, ...) gets a directory of its own.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

# Top-level config keys that do not change the science of a run.
NON_IDENTITY_KEYS = frozenset({
    "seed", "device", "output_root", "threads", "log_every", "plugins", "force", "hydra",
    "checkpoint_every", "debug", "seeds_per_job", "seeds", "experiment", "dry_run",
    "resume_across_commits", "progress_every_s",
})


def identity(config: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k not in NON_IDENTITY_KEYS}


def config_hash(config: dict[str, Any], length: int = 10) -> str:
    blob = json.dumps(identity(config), sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:length]


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted columns for parquet: {'task': {'name': 'x'}} -> {'task.name': 'x'}."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        elif isinstance(value, (list, tuple)):
            out[name] = json.dumps(list(value))
        else:
            out[name] = value
    return out
