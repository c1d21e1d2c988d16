"""The commands a user runs around the harness, not on a run's path: the data stager, the
LLM base builder and probe, the migration and the reproduction's study queue. Each is
`python -m tools.<name>` from a checkout's root (`tpo-bench <name>` where installed).
No room of the harness imports this package (the tests and dev/ do); it may import every room.
The project's own benchmarks, probes and cross-checks are in dev/, not installed.

    data             stage (download and verify) MNIST or GSM8K
    llm_base         build (or rebuild) the cached base model of an LLM task
    llm_scale        an LLM preset's memory and throughput on this device (random weights)
    migrate          re-key run directories recorded under the legacy config hash
    study            the reproduction's study queue (reproduction/study.yaml)
    slurm-local.sh   a one-node SLURM cluster on this machine (start, status, stop)
"""
if __name__ == "tools":  # the top-level name: this module is tpo_bench.tools
    import tpo_bench

    tpo_bench.alias(__name__)
    __package__ = f"tpo_bench.{__name__}"  # what follows resolves its imports there
