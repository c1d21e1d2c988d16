"""`tpo-bench COMMAND [ARGS...]`: one entry to the runner, the analysis and the tools.

Each command runs one module as `python -m` would, its own arguments passed through
(`tpo-bench run ...` is `python -m bench ...`, `tpo-bench plot ...` is
`python analysis/plot.py ...`, `tpo-bench study ...` is `python -m tools.study ...`), so
each keeps its own `--help` and exit codes. `tpo-bench` alone lists the commands. The
project's own benchmarks and cross-checks are no commands: `python -m dev.<name>` from a
checkout.
"""
import importlib.util
import runpy
import sys
from pathlib import Path

# command -> (module, what it does)
COMMANDS = {
    "run": ("tpo_bench.bench", "train: a run or a Hydra sweep (python -m bench)"),
    "collect": ("tpo_bench.analysis.collect", "runs -> one parquet table"),
    "plot": ("tpo_bench.analysis.plot", "a figure per task, or a paper figure"),
    "report": ("tpo_bench.analysis.paper.report", "the reproduction report"),
    "leaderboard": ("tpo_bench.analysis.leaderboard", "a leaderboard of methods across tasks (rliable statistics)"),
    "rule-log": ("tpo_bench.analysis.paper.rule_log", "which verdicts a rule change moved"),
    "registered": ("tpo_bench.analysis.paper.registered",
                   "the registered analysis of TPO against GRPO under terminal reward"),
    "registered-ppo": ("tpo_bench.analysis.paper.registered_ppo",
                       "the registered analysis of TPO against PPO under terminal reward"),
    "pages": ("tpo_bench.analysis.paper.pages", "the generated parts of docs/reproducing.md and docs/leaderboard.md"),
    "tune-report": ("tpo_bench.analysis.tuning.report", "each optuna study's history and parameter importance"),
    "data": ("tpo_bench.tools.data", "stage (download and verify) a data set"),
    "llm-base": ("tpo_bench.tools.llm_base", "build the base model an LLM task starts from"),
    "llm-scale": ("tpo_bench.tools.llm_scale", "an LLM task's memory and throughput"),
    "migrate": ("tpo_bench.tools.migrate", "re-key runs recorded before the preset names left the config hash"),
    "study": ("tpo_bench.tools.study", "the reproduction's study queue"),
}


def spelled(name: str) -> str:
    """How the user runs command `name` from where they stand: as the docs spell it
    (`python analysis/collect.py`, `python -m tools.study`) at the root of the checkout
    this code runs from, else as the installed command (`tpo-bench collect`), which works
    from any folder; a hint that names a checkout's path helps no one outside it."""
    module = COMMANDS[name][0]
    parts = module.split(".")[1:]  # tpo_bench.analysis.collect -> analysis, collect
    here = Path.cwd().joinpath(*parts)
    try:
        origin = importlib.util.find_spec(module).origin
        at_root = origin is not None and Path(origin).resolve() in (
            here.with_suffix(".py").resolve(), (here / "__init__.py").resolve())
    except (ImportError, OSError, AttributeError, ValueError):
        at_root = False
    if not at_root:
        return f"tpo-bench {name}"
    return f"python {'/'.join(parts)}.py" if parts[0] == "analysis" else f"python -m {'.'.join(parts)}"


def lookup(name: str) -> str | None:
    """The command `name` names: as listed, or with `_` for `-` (a tool's module name:
    `llm_base` is `llm-base`); None for no command."""
    for candidate in (name, name.replace("_", "-")):
        if candidate in COMMANDS:
            return candidate
    return None


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {what}" for name, (_, what) in COMMANDS.items()]
    return ("usage: tpo-bench COMMAND [ARGS...]   (tpo-bench COMMAND --help: its arguments;\n"
            "       tpo-bench --version: the installed version)\n\n"
            "commands:\n" + "\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    if argv[0] in ("--version", "-V"):
        from tpo_bench import __version__

        print(f"tpo-bench {__version__}")
        return 0
    name = lookup(argv[0])
    if name is None:
        print(f"tpo-bench: unknown command {argv[0]!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module, _ = COMMANDS[name]
    sys.argv = [f"tpo-bench {name}", *argv[1:]]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as stop:
        code = stop.code
        if code is None or isinstance(code, int):
            return code or 0
        print(code, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
