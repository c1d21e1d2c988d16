"""An installed package's top-level `bench`: `python -m bench` from any directory runs
`tpo_bench.bench`'s command line (in a checkout the repository's own bench/ is that)."""
from importlib.metadata import PackageNotFoundError, version

try:  # pyproject.toml's `version` is the one source
    __version__ = version("tpo-bench")
except PackageNotFoundError:
    __version__ = "0+unknown"
