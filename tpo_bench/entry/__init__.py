"""An installed package's top-level `bench`: the module `tpo_bench.bench` itself, so
`python -m bench` runs its `__main__` from any directory, as from a checkout's root."""
import tpo_bench

tpo_bench.alias("bench")
