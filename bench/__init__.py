"""tpo-bench's composition root: builds a run from the config, joins a task (groups of
scored candidates) with an algorithm (a loss) and records it. Nothing below imports it:
tasks and algorithms meet through `contract`.
"""
if __name__ == "bench":  # the top-level name: this module is tpo_bench.bench
    import tpo_bench

    # The same block as tpo_bench/entry/__init__.py's (an install's `bench`): the package
    # that might be shadowed cannot hold it, and tests/test_newcomer.py holds the two equal.
    if not hasattr(tpo_bench, "alias"):  # a user's own tpo_bench, found first on the path
        import sys

        where = next(iter(getattr(tpo_bench, "__path__", None) or [tpo_bench.__file__]))
        print(f"error: the tpo_bench this command imports is {where}, not tpo-bench's package: a "
              f"folder or module of that name in the working directory or on PYTHONPATH shadows "
              f"the harness; rename it, or run from another directory", file=sys.stderr)
        raise SystemExit(2)
    tpo_bench.alias(__name__)
    __package__ = f"tpo_bench.{__name__}"  # what follows resolves its imports there

from importlib.metadata import PackageNotFoundError, version as _version

try:  # pyproject.toml's `version` is the one source
    __version__ = _version("tpo-bench")
except PackageNotFoundError:  # a source tree on PYTHONPATH without an install
    __version__ = "0+unknown"
