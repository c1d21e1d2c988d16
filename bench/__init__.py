"""tpo-bench's composition root: builds a run from the config, joins a task (groups of
scored candidates) with an algorithm (a loss) and records it. Nothing below imports it:
tasks and algorithms meet through `contract`.
"""
if __name__ == "bench":  # the top-level name: this module is tpo_bench.bench
    import tpo_bench

    tpo_bench.alias(__name__)

from importlib.metadata import PackageNotFoundError, version as _version

try:  # pyproject.toml's `version` is the one source
    __version__ = _version("tpo-bench")
except PackageNotFoundError:  # a source tree on PYTHONPATH without an install
    __version__ = "0+unknown"
