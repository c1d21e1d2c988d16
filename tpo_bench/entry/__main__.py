"""`python -m bench` where tpo-bench is installed: tpo_bench.bench's __main__ (its first
step refuses a `tpo_bench` of the user's that shadows the harness)."""
import runpy
import sys
from importlib.machinery import PathFinder
from pathlib import Path

if __name__ == "__main__":
    spec = PathFinder.find_spec("tpo_bench")
    where = list(spec.submodule_search_locations or []) if spec else []
    if not (where and (Path(where[0]) / "entry" / "__main__.py").is_file()):
        found = (where[0] if where else spec.origin) if spec else "nothing"
        print(f"error: the tpo_bench this command imports is {found}, not tpo-bench's package: "
              f"a folder or module of that name in the working directory or on PYTHONPATH "
              f"shadows the harness; rename it, or run from another directory", file=sys.stderr)
        sys.exit(2)
    runpy.run_module("tpo_bench.bench", run_name="__main__", alter_sys=True)
