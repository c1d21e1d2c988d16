"""From one Hydra job's config to the RunSpecs it trains: shared by `python -m bench` and
the sweepers (which validate every job before launching any)."""
from __future__ import annotations

from .build import RunSpec, build
from .config import run_config


def job_specs(cfg: dict, explicit: frozenset, here: bool = True) -> list[RunSpec]:
    """The RunSpecs of one job: seeds seed .. seed + seeds_per_job - 1 (`here`: see build)."""
    rc = run_config(cfg)  # refuses a bad seed or seeds_per_job, naming the rule
    return [build({**cfg, "seed": rc.seed + i}, explicit, here) for i in range(rc.seeds_per_job)]


def explicit_keys(overrides) -> frozenset:
    """Keys set on the command line (some tasks refuse an explicit algo.k)."""
    return frozenset(o.split("=", 1)[0].lstrip("+~") for o in overrides)


def job_result(summaries: list[dict]) -> dict:
    """What a job returns to its sweeper: each run's directory and verdict (the optuna
    plugin prunes a trial on error_kind `diverged`), and the last run's final error."""
    return {"runs": [{k: s.get(k) for k in ("run_dir", "status", "reason", "error_kind")}
                     for s in summaries],
            "error": summaries[-1].get("final", {}).get("error")}
