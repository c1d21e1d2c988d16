"""An installed package's top-level `bench`: `python -m bench` from any directory runs
`tpo_bench.bench`'s command line (in a checkout the repository's own bench/ is that)."""
