"""Tools around the harness, not on a run's path: benchmarks, probes, the migration, the
data stager and the cross-checks. Each is `python -m tools.<name>` from a checkout's root
(`tpo-bench <name>` where installed). Nothing imports this package but the tests; it
may import every other one.

    speed            runs' speed (episodes/s, op counts, seed batching against the loop)
    seed_batch_speed seed batching measured three ways side by side
    llm_scale        an LLM preset's memory and throughput at paper scale
    llm_base         build (or rebuild) the cached base model of an LLM task
    faults           randomised fault campaign over short demo runs
    migrate          re-key run directories recorded under the legacy config hash
    data             stage (download and verify) MNIST or GSM8K; bench_collect: collect's speed
    crosscheck_zoo, crosscheck_artifact  our losses against verl's and TRL's, our dense
                     stack against the paper's JAX artifact
    slurm-local.sh   a one-node SLURM cluster on this machine (start, status, stop)
"""
if __name__ == "tools":  # the top-level name: this module is tpo_bench.tools
    import tpo_bench

    tpo_bench.alias(__name__)
