"""`python -m tools.llm_base task=<llm preset> [overrides] [--rebuild]`: build the base
model an LLM task built from `task.arch` starts from (the architecture, the character
tokenizer and its supervised warm start), or rebuild it, and say where it is cached.

Runs build it on first use anyway (one per recipe, under a lock); this command builds it
ahead of a sweep, or again after the cache is cleared. The recipe fixes the weights: the
same recipe and thread count give the same base, bit for bit, on the CPU.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

if __name__ == "__main__" and not (__package__ or "").startswith("tpo_bench"):
    import tpo_bench.tools  # noqa: F401  (run by path or by a top-level name: the package its relative imports name)
    __package__ = "tpo_bench.tools"
from ..bench.build import ConfigError, build
from ..bench.config import compose


def main(argv: list[str]) -> int:
    rebuild = "--rebuild" in argv
    overrides = [a for a in argv if a != "--rebuild"]
    try:
        task = build(compose(*overrides)).task
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not hasattr(task, "base_path"):
        print(f"error: task={task.name!r} is not an LLM task (task.impl=llm)", file=sys.stderr)
        return 2
    if task.model_path:
        print(f"task.model_path={task.model_path}: the base is that directory; nothing to build")
        return 0
    t0 = time.perf_counter()
    path = Path(task.base_path(rebuild=rebuild))
    recipe = json.loads((path / "recipe.json").read_text())
    print(f"{path}  ({recipe['parameters']:,} parameters; warm-start loss "
          f"{recipe['warm_start_loss_first']} -> {recipe['warm_start_loss_last']}; "
          f"{time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
