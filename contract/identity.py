"""Run identity: a short hash of the resolved scientific config.

Seed, launcher, device, paths and logging knobs are left out, so the seeds of one
config share a hash and any change to what is being run (algo.k, a learning rate,
task.vocab_size, ...) gets a directory of its own. So are the preset names (task.name,
algo.name): they are labels, and `task=reversal_v2` and `task=seq` with the same fields,
or `algo=grpo_no_kl` and `algo=grpo algo.kl_coef=0`, are one run under one hash.

Runs recorded before the names left the hash carry a `legacy_hash` (names included):
`python -m tools.migrate ROOT` re-keys their directories, and tables written before
are re-keyed as they are read (`analysis.rekey`).
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

# Top-level config keys that do not change the science of a run: Hydra's node, the logger,
# and every key of the run config (bench.config.RunConfig) but those in its identity (the
# keys not named here: bench.config.identity_keys). A new run-config key is in the hash
# until it is named here.
NON_IDENTITY_KEYS = frozenset({
    "seed", "device", "output_root", "threads", "log_every", "progress_every_s", "force",
    "resume_across_commits", "dry_run", "checkpoint_every", "seeds_per_job", "batch_seeds",
    "compile", "on_code_change", "plugins", "experiment", "seeds", "debug", "hydra", "logger"})
# Keys inside a section that name a preset rather than say what runs.
LABEL_KEYS = {"task": "name", "algo": "name"}


def identity(config: dict[str, Any]) -> dict[str, Any]:
    """The science of a config: without the non-identity keys and the preset names."""
    out = {k: v for k, v in config.items() if k not in NON_IDENTITY_KEYS}
    for section, label in LABEL_KEYS.items():
        if isinstance(out.get(section), dict):
            out[section] = {k: v for k, v in out[section].items() if k != label}
    return out


def _digest(tree: dict[str, Any], length: int) -> str:
    blob = json.dumps(tree, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:length]


def config_hash(config: dict[str, Any], length: int = 10) -> str:
    return _digest(identity(config), length)


def legacy_hash(config: dict[str, Any], length: int = 10) -> str:
    """The hash with the preset names in: the same config with task.name and algo.name
    kept (runs keyed by it are re-keyed by tools.migrate)."""
    return _digest({k: v for k, v in config.items() if k not in NON_IDENTITY_KEYS}, length)


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
