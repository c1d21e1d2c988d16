"""`python -m bench [overrides] [-m]`: each Hydra job trains one run (or `seeds_per_job`
consecutive seeds, one after the other or, with batch_seeds=true, as one computation), failures recorded in the run's summary.json instead of raised."""
import argparse
import sys

import hydra
from omegaconf import DictConfig, OmegaConf

if __name__ == "__main__" and not (__package__ or "").startswith("tpo_bench"):
    import tpo_bench.bench  # noqa: F401  (run by path or by a top-level name: the package its relative imports name)
    __package__ = "tpo_bench.bench"
from . import config


def groups_help() -> str:
    """The groups `--help` lists: Hydra's own listing shows `tune` (search spaces the optuna
    sweeper reads, not a choice) and hides the launchers under --hydra-help."""
    from hydra.core.global_hydra import GlobalHydra

    loader = GlobalHydra.instance().config_loader()
    options = {g: sorted(loader.get_group_options(g)) for g in
               ("algo", "task", "optim", "logger", "experiment", "hydra/launcher", "hydra/sweeper", "tune")}
    return "\n".join([
        *(f"{g}: {', '.join(options[g])}" for g in ("algo", "task", "optim", "logger")),
        f"experiment (+experiment=NAME, with -m): {', '.join(options['experiment'])}",
        f"hydra/launcher (with -m): {', '.join(options['hydra/launcher'])}",
        f"hydra/sweeper (with -m; bench is the default): {', '.join(options['hydra/sweeper'])}",
        f"search spaces for hydra/sweeper=optuna (conf/tune/, not a group): "
        f"{', '.join(options['tune'])}",
    ])


OmegaConf.register_new_resolver("bench_groups", groups_help, replace=True)
config.register()


def register_sweepers() -> None:
    """Hydra finds plugins by walking the `hydra_plugins` namespace, and an editable
    install (setuptools' import hook) hides ours from that walk: outside the repository
    root every multirun failed with "Unknown plugin class". Registering them by hand works
    for every kind of install."""
    from hydra.core.plugins import Plugins

    # Scan first: Hydra's scan re-executes the modules it finds (Hydra's own sweeper base
    # class included), so a class imported before it would subclass a stale copy.
    plugins = Plugins.instance()
    from hydra_plugins.bench_optuna.optuna_sweeper import OptunaSweeper
    from hydra_plugins.bench_sweeper.bench_sweeper import BenchSweeper

    for sweeper in (BenchSweeper, OptunaSweeper):
        plugins.register(sweeper)


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> dict:
    from hydra.core.hydra_config import HydraConfig

    from . import interrupts
    from .build import ConfigError
    from .jobs import explicit_keys, job_result, job_specs
    from .runner import run, run_seeds
    from ..contract import schema

    try:
        resolved = OmegaConf.to_container(cfg, resolve=True)
        specs = job_specs(resolved, explicit_keys(HydraConfig.get().overrides.task))
    except (ConfigError, ImportError) as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        sys.exit(2)
    worker = interrupts.latch_in_sweep_worker()
    # batch_seeds: the job's seeds as one stacked computation (bench.engine), else one by one
    groups = [specs] if resolved.get("batch_seeds") and len(specs) > 1 else [[s] for s in specs]
    summaries = []
    for group in groups:
        if why := interrupts.stop_requested():  # this worker, or its sweep, was stopped
            summaries += [{"run_dir": str(s.run_dir), "status": schema.NOT_STARTED,
                           "reason": f"the sweep was stopped ({why}) before it started"} for s in group]
            continue
        try:
            summaries += run_seeds(group, compile=bool(resolved.get("compile"))) \
                if len(group) > 1 else [run(group[0])]
        except interrupts.Interrupted as e:  # the run checkpointed and recorded itself as interrupted
            if not worker:
                print(f"interrupted by {e.signame}: the same command resumes it", file=sys.stderr, flush=True)
                sys.exit(128 + e.signum)
            # A local sweep's worker ends its job normally: an exception would make the
            # launcher kill the other workers mid-episode. The sweeper reports the stop.
            summaries += getattr(e, "answers", None) or [
                {"run_dir": str(group[0].run_dir), "status": schema.INTERRUPTED, "reason": e.signame}]
    failed = [s for s in summaries if s["status"] != "completed"]
    if failed and HydraConfig.get().mode.name == "RUN":
        sys.exit(1)  # a single run reports its failure through the exit code
    # A sweep goes on; the sweeper reports every run at the end.
    return job_result(summaries)


def bad_input(error: BaseException | None) -> bool:
    """Whether Hydra stopped on the command line or the config (an unknown group option or
    key, a value of the wrong type, an override it cannot parse) rather than on a failure."""
    from hydra.errors import (ConfigCompositionException, MissingConfigException,
                              OverrideParseException)
    from omegaconf.errors import OmegaConfBaseException

    return isinstance(error, (ConfigCompositionException, MissingConfigException,
                              OverrideParseException, OmegaConfBaseException))


def multirun_first(argv: list[str]) -> list[str]:
    """`-m`/`--multirun` anywhere on the line: Hydra's parser takes it only before the
    overrides (after them argparse stops at "unrecognized arguments")."""
    flags = [a for a in argv if a in ("-m", "--multirun")]
    return flags + [a for a in argv if a not in ("-m", "--multirun")]


class _Refused(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # a line Hydra's own parser refuses: Hydra says why
        raise _Refused(message)


# Hydra's command-line flags (`python -m bench --help` lists them), those taking a value.
FLAGS = ("--help", "-h", "--hydra-help", "--version", "--resolve", "--run", "-r", "--multirun",
         "-m", "--shell-completion", "-sc")
VALUED = (("--package", "-p"), ("--config-path", "-cp"),
          ("--config-name", "-cn"), ("--config-dir", "-cd"), ("--experimental-rerun",))
INFO = ("all", "config", "defaults", "defaults-tree", "plugins", "searchpath")


def command_line_overrides(argv: list[str]) -> list[str]:
    """The overrides on a command line: its words that are not Hydra's flags or their
    values; none where Hydra's parser would refuse the line (Hydra then says why)."""
    parser = _Parser(add_help=False)
    parser.add_argument("overrides", nargs="*")
    for flag in FLAGS:
        parser.add_argument(flag, action="store_true", dest=flag.lstrip("-"))
    for flags in VALUED:
        parser.add_argument(*flags)
    parser.add_argument("--cfg", "-c", choices=("job", "hydra", "all"))
    parser.add_argument("--info", "-i", nargs="?", const="all", choices=INFO)
    try:
        args, _ = parser.parse_known_args(argv)
    except _Refused:
        return []
    return list(args.overrides or [])


def cli() -> None:
    """Exit codes, one convention whoever catches the problem: 0 done; 1 a run failed or
    a file it met was refused; 2 bad input (nothing was created); 128 + N a signal N."""
    if sys.argv[1:] == ["--version"]:  # tpo-bench's, not Hydra's
        from .. import __version__

        print(f"tpo-bench {__version__}")
        sys.exit(0)
    sys.argv[1:] = multirun_first(sys.argv[1:])
    try:
        config.check_overrides(command_line_overrides(sys.argv[1:]))
    except config.ConfigError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        sys.exit(2)
    register_sweepers()
    try:
        main()
    except SystemExit as e:
        # Hydra reports its errors and exits 1 from inside its handler, so the error it
        # handled is the exit's context.
        if e.code == 1 and bad_input(e.__context__):
            sys.exit(2)
        raise
    except Exception as e:  # HYDRA_FULL_ERROR=1: Hydra re-raises instead
        if bad_input(e):
            import traceback

            traceback.print_exc()
            sys.exit(2)
        raise


if __name__ == "__main__":
    cli()
