"""tpo-bench's one import name: `tpo_bench.bench` (the runner), `tpo_bench.tasks`,
`tpo_bench.algorithms`, `tpo_bench.contract`, `tpo_bench.analysis`, `tpo_bench.tools`,
`tpo_bench.integrations` (other trainers' hooks) and `tpo_bench.conf`, so a project's own
`tasks/` or `analysis/` package neither breaks nor shadows the harness, and the harness
never imports a top-level name of those.

An installed package holds them inside this folder (pyproject.toml maps the repository's
top-level folders here). In a checkout they stay at the repository's top level, the layout
users know: this package's path then also covers the repository root, so each module is
loaded once, under its tpo_bench name.
"""
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

try:  # pyproject.toml's `version` is the one source
    __version__ = version("tpo-bench")
except PackageNotFoundError:  # a source tree on PYTHONPATH without an install
    __version__ = "0+unknown"

_HERE = Path(__file__).resolve().parent
if not (_HERE / "contract").is_dir() and (_HERE.parent / "contract" / "__init__.py").is_file():
    __path__.append(str(_HERE.parent))  # a checkout: tpo_bench.tasks is <root>/tasks
