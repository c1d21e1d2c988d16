"""The project's own maintenance: its benchmarks, probes, fault campaign and cross-checks.
None is on a run's path, installed (pyproject.toml lists tpo_bench's rooms alone) or a
`tpo-bench` command; each runs from a checkout's root as `python -m dev.<name>`. They may
import the harness (as tpo_bench.<room>) and each other; only the tests import them.

    speed               episodes/s, op counts, profiles, seed batching against the loop
    seed_batch_speed    seed batching measured three ways side by side
    bench_collect       collect's speed over many synthetic runs
    sweep_speed         a sweep's up-front validation, timed over thousands of jobs
    same_metrics        two checkouts' short runs, metrics compared bit for bit
    faults              a randomised fault campaign over short demo runs
    crosscheck_zoo      our losses against verl's and TRL's loss code
    crosscheck_artifact our dense stack against the paper's JAX artifact
    vs_artifact         a single run's CPU cost against the paper's JAX artifact
    history_growth      what each commit adds to a clone
"""
