"""tpo-bench's one import name: `tpo_bench.bench` (the runner), `tpo_bench.tasks`,
`tpo_bench.algorithms`, `tpo_bench.contract`, `tpo_bench.analysis`, `tpo_bench.tools`,
`tpo_bench.integrations` (other trainers' hooks) and `tpo_bench.conf`, so a project's own
`tasks/` or `analysis/` package neither breaks nor shadows the harness.

In a checkout the folders stay at the repository's top level and `tpo_bench/<room>` is a
link to `<room>/` (a file system without links gets the root on this package's path), so
Python and static tools alike find `tpo_bench.tasks` in `tasks/`. An install holds them
inside this folder. A top-level name (`python -m bench`, `python -m tools.study` from the
root; the installed `bench` entry) is the same module object as its tpo_bench name: the
room's `__init__` hands itself over with `alias`, and `bench.runner` is then
`tpo_bench.bench.runner`. Each file is loaded once, under its tpo_bench name.
"""
import importlib
import importlib.abc
import importlib.util
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

try:  # pyproject.toml's `version` is the one source
    __version__ = version("tpo-bench")
except PackageNotFoundError:  # a source tree on PYTHONPATH without an install
    __version__ = "0+unknown"

ROOMS = ("bench", "tasks", "algorithms", "contract", "analysis", "tools", "conf", "integrations")

HERE = Path(__file__).resolve().parent
if not (HERE / "contract").is_dir() and (HERE.parent / "contract" / "__init__.py").is_file():
    __path__.append(str(HERE.parent))  # a checkout whose links are plain files


class Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """`room.x` for a room already aliased: the module `tpo_bench.room.x` itself."""

    def find_spec(self, name, path=None, target=None):
        room = name.partition(".")[0]
        if room == name or name.endswith(".__main__") or room not in ROOMS:
            return None  # `python -m room` runs room/__main__.py from the package's path
        own = sys.modules.get(f"{__name__}.{room}")
        if own is None or sys.modules.get(room) is not own:
            return None  # a project's own `tasks` package
        real = importlib.util.find_spec(f"{__name__}.{name}")
        return real and importlib.util.spec_from_loader(name, self, origin=real.origin)

    def create_module(self, spec):
        return importlib.import_module(f"{__name__}.{spec.name}")

    def exec_module(self, module):
        pass  # loaded once, under its tpo_bench name

    def get_code(self, name):
        """`python -m tools.study`: runpy runs the tpo_bench module's code as __main__."""
        real = f"{__name__}.{name}"
        return importlib.util.find_spec(real).loader.get_code(real)


def alias(room: str) -> None:
    """Make the top-level name `room` (and its submodules) the module `tpo_bench.room`."""
    if room not in ROOMS:
        raise ValueError(f"alias: {room!r} is no room of tpo_bench; rooms: {', '.join(ROOMS)}")
    if not any(isinstance(f, Alias) for f in sys.meta_path):
        sys.meta_path.insert(0, Alias())
    sys.modules[room] = importlib.import_module(f"{__name__}.{room}")
