"""An installed package's top-level `bench`: the module `tpo_bench.bench` itself, so
`python -m bench` runs its `__main__` from any directory, as from a checkout's root."""
import tpo_bench

# The same block as bench/__init__.py's (a checkout's `bench`): the package that might be
# shadowed cannot hold it, and tests/test_newcomer.py holds the two copies equal.
if not hasattr(tpo_bench, "alias"):  # a user's own tpo_bench, found first on the path
    import sys

    where = next(iter(getattr(tpo_bench, "__path__", None) or [tpo_bench.__file__]))
    print(f"error: the tpo_bench this command imports is {where}, not tpo-bench's package: a "
          f"folder or module of that name in the working directory or on PYTHONPATH shadows "
          f"the harness; rename it, or run from another directory", file=sys.stderr)
    raise SystemExit(2)
tpo_bench.alias("bench")
