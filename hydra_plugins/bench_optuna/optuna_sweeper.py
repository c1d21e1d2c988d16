"""`hydra/sweeper=optuna`: a small Hydra sweeper over current optuna (the published
hydra-optuna-sweeper pins optuna < 3, which breaks with current SQLAlchemy).

Each grid point of the command line (e.g. `algo=tpo,grpo`) is one study, named
`<task>-<algo>[-<study_key>]`, stored in SQLite under `<output_root>/.optuna/`, searched
by a seeded TPE sampler over `tune/<algo>.yaml`. A trial is `seeds` ordinary jobs, one
per seed, through the configured launcher (so each seed writes its own run directory and
a resumed study skips completed runs); its value is the seed mean of the objective. A
diverged trial (NaN loss) is PRUNED, any other failure FAIL; `n_trials` counts every
finished trial, so every method gets the same trials x seeds x episodes.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, List

import yaml
from omegaconf import OmegaConf, open_dict

from hydra_plugins.bench_optuna import _space as S
from hydra_plugins.bench_optuna import _trials as T
from hydra_plugins.bench_optuna._trials import Plan
from hydra_plugins.bench_sweeper.bench_sweeper import BenchSweeper, save_sweep_config

RERUN_SEED_OFFSET = 1000  # fresh seeds for the full-length rerun, clear of the tuning seeds
# Overrides that the printed full-length rerun command must not carry over.
NOT_RERUN = {"seed", "task", "task.episodes", "algo", "experiment"}


class Refused(Exception):
    """Bad input, found before any study is created or job launched (exit 2)."""


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def refuse_seed_sweeps(parsed) -> None:
    """A trial's seeds are the sweeper's to set: a swept seed or seeds_per_job is refused."""
    for o in parsed:
        if o.is_sweep_override() and _key(o.get_key_element()) in ("seed", "seeds_per_job"):
            raise Refused(f"{o.input_line}: a trial's seeds are seed .. seed + "
                          "hydra.sweeper.seeds - 1; do not sweep them")


class OptunaSweeper(BenchSweeper):
    def __init__(self, *, n_trials: int, seeds: int, objective: str, final_window: int, n_jobs: int,
                 sampler: Any, study_key: str | None, storage: str | None, space_file: str | None,
                 enqueue: Any, best_dir: str | None, best_name: str, rerun_seeds: int, params: Any,
                 max_batch_size: Any = None) -> None:
        # Every option's default is conf/hydra/sweeper/optuna.yaml's, which Hydra passes whole.
        # max_batch_size: bench.yaml's key, present when an experiment merges optuna.yaml
        # over the default sweeper node (conf/experiment/tuned_terminal.yaml); unused.
        super().__init__(max_batch_size=None, params=params)
        plain = lambda v: OmegaConf.to_container(v) if OmegaConf.is_config(v) else v  # noqa: E731
        self.opts = dict(n_trials=n_trials, seeds=seeds, objective=objective,
                         final_window=final_window, n_jobs=n_jobs, study_key=study_key,
                         storage=storage, space_file=space_file, best_dir=best_dir,
                         best_name=best_name, rerun_seeds=rerun_seeds)
        self.sampler_opts = dict(plain(sampler) or {})
        self.enqueue = list(plain(enqueue) or [])
        self.job_idx = 0

    # ------------------------------------------------------------ planning (no side effects)

    def check_opts(self) -> None:
        """The sweeper's own options (hydra.sweeper.*), checked before any study is planned."""
        o = self.opts
        for key in ("n_trials", "seeds", "final_window", "n_jobs", "rerun_seeds"):
            if not isinstance(o[key], int) or isinstance(o[key], bool) or o[key] < 1:
                raise Refused(f"hydra.sweeper.{key} must be a positive integer, got {o[key]!r}")
        seed = self.sampler_opts.get("seed")
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise Refused(f"hydra.sweeper.sampler.seed must be an integer (each study's TPE seed), got {seed!r}")
        if o["objective"] not in T.OBJECTIVES:
            raise Refused(f"hydra.sweeper.objective={o['objective']!r}: one of {', '.join(T.OBJECTIVES)}")

    def _compose(self, overrides: list[str]) -> dict:
        """The resolved job config a job with these overrides would get."""
        try:
            cfg = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
        except Exception as e:  # composition errors: unknown group option, bad override
            raise Refused(f"{type(e).__name__}: {e}") from None
        with open_dict(cfg):
            del cfg["hydra"]
        return OmegaConf.to_container(cfg, resolve=True)

    def _validate(self, cfg: dict, overrides: list[str]):
        from tpo_bench.bench.jobs import explicit_keys, job_specs
        from tpo_bench.bench.build import ConfigError
        try:
            # a SLURM trial trains on a compute node: its device is that node's to check
            return job_specs(cfg, explicit_keys(overrides), here=not self._slurm)
        except (ConfigError, ImportError) as e:
            raise Refused(str(e)) from None

    def _load_space(self, algo: str) -> tuple[dict, str]:
        """hydra.sweeper.space_file, else tune/<algo>.yaml on the config search path (so a
        user's own conf folder, added with hydra.searchpath, can hold spaces too)."""
        if self.opts["space_file"]:
            path = Path(self.opts["space_file"])
            if not path.is_file():
                raise Refused(f"hydra.sweeper.space_file={path}: no such file")
            return S.check_space(yaml.safe_load(path.read_text()), str(path)), str(path)
        from hydra.core.object_type import ObjectType
        available = set()
        for src in self.hydra_context.config_loader.get_sources():
            if src.is_config(f"tune/{algo}"):
                space = OmegaConf.to_container(src.load_config(f"tune/{algo}").config)
                where = f"{src.path}/tune/{algo}.yaml"
                return S.check_space(space, where), where
            if src.is_group("tune"):
                available.update(src.list("tune", ObjectType.CONFIG))
        raise Refused(f"no search space for algo {algo!r}: add conf/tune/{algo}.yaml or set "
                      f"hydra.sweeper.space_file (spaces available: {', '.join(sorted(available))})")

    def _plan(self, point: list[str]) -> Plan:
        overrides = [o for o in point if _key(o) != "seed"]
        cfg = self._compose(point)
        specs = self._validate(cfg, point)
        if len(specs) != 1:
            raise Refused("hydra/sweeper=optuna runs one job per seed: leave seeds_per_job at 1 "
                          "and set hydra.sweeper.seeds")
        task, algo = cfg["task"]["name"], cfg["algo"]["name"]
        space, source = self._load_space(algo)
        fixed = [k for k in space if k in {_key(o) for o in point}]
        space = {k: v for k, v in space.items() if k not in fixed}
        if not space:
            raise Refused(f"{source}: every key is fixed on the command line; nothing to tune")
        for key in space:
            if OmegaConf.select(OmegaConf.create(cfg), key, default="<absent>") == "<absent>":
                raise Refused(f"{source}: {key} is not a key of the {algo} config")
        for params in self.enqueue:
            if not set(params) <= set(space):
                raise Refused(f"hydra.sweeper.enqueue: {sorted(set(params) - set(space))} "
                              f"not in the search space ({', '.join(space)})")
        # Every key at its low value (first choice) must make a valid run: a space that
        # cannot work here (algo.k on MNIST, say) is refused now, not trial by trial.
        probe = {k: v["choices"][0] if v["type"] == "categorical" else v["low"] for k, v in space.items()}
        probe_overrides = point + [S.as_override(k, v) for k, v in probe.items()]
        try:
            self._validate(self._compose(probe_overrides), probe_overrides)
        except Refused as e:
            raise Refused(f"{source} does not fit this config ({e}); probe: "
                          f"{' '.join(S.as_override(k, v) for k, v in probe.items())}") from None
        key = self.opts["study_key"]
        name = f"{task}-{algo}" + (f"-{key}" if key else "")
        root = Path(cfg["output_root"])
        storage = self.opts["storage"] or f"sqlite:///{(root / '.optuna' / f'{name}.db').absolute()}"
        best_dir = Path(self.opts["best_dir"] or root / "tuned")
        # One folder per study: two studies of one algorithm (two tasks, two study keys)
        # each keep their own `<algo>_tuned`, and the rerun command loads each from its own.
        best = best_dir / name / "algo" / f"{self.opts['best_name'].format(algo=algo, task=task)}.yaml"
        first = cfg.get("seed", 0)
        return Plan(name, overrides, task, algo, cfg["task"].get("episodes"),
                    list(range(first, first + self.opts["seeds"])), space, source, storage,
                    best, dict(cfg["algo"]), fixed, specs[0].config_hash,
                    {"objective": self.opts["objective"], "final_window": self.opts["final_window"]},
                    Plan.lock_for(storage, name, root))

    def _budget(self, plan: Plan) -> str:
        n, s, e = self.opts["n_trials"], len(plan.seeds), plan.episodes
        total = f" = {n * s * e:,} episodes" if isinstance(e, int) else ""
        return f"{n} trials x {s} seeds x {e} episodes{total} ({n * s} runs)"

    # ------------------------------------------------------------ sweeping

    def sweep(self, arguments: List[str]) -> Any:
        from hydra.core.override_parser.overrides_parser import OverridesParser
        try:
            import optuna  # noqa: F401
        except ImportError:
            print("error: hydra/sweeper=optuna needs optuna: pip install -e '.[tune]'",
                  file=sys.stderr, flush=True)
            sys.exit(2)
        if self._slurm:  # before a study database or sweep folder is made
            self._refuse_without_slurm()
        try:
            self.check_opts()
            parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
            parsed = parser.parse_overrides(self._parse_config() + list(arguments))
            refuse_seed_sweeps(parsed)
            plans = [self._plan(point) for point in self.split_arguments(parsed, None)[0]]
        except (Refused, S.SpaceError) as e:
            print(f"error: {e}\n  (nothing was launched)", file=sys.stderr, flush=True)
            sys.exit(2)
        o = self.opts
        for p in plans:
            print(f"[tune] study {p.name}: {self._budget(p)}; objective {o['objective']}"
                  + (f" (mean of the last {o['final_window']} logged steps)" if o["objective"] == "final" and o["final_window"] > 1 else "")
                  + f"; space {p.space_source}: {', '.join(p.space)}", flush=True)
            if p.fixed_tuned:
                print(f"[tune]   fixed on the command line, not tuned: {', '.join(p.fixed_tuned)}")
        budgets = {self._budget(p) for p in plans}
        if len(plans) > 1:
            print(f"[tune] {len(plans)} studies, " + (f"the same budget each: {budgets.pop()}"
                  if len(budgets) == 1 else "budgets differ (different tasks or episodes)"), flush=True)
        if OmegaConf.select(self.config, "dry_run"):
            print(f"[dry run] {len(plans)} studies validated; nothing launched")
            return []
        save_sweep_config(self.config)
        results = [self._optimise(p) for p in plans]
        self._report(plans, results)
        if any(r is None for r in results):
            sys.exit(1)
        return results

    def _optimise(self, plan: Plan):
        import optuna
        from optuna.trial import TrialState

        optuna.logging.set_verbosity(optuna.logging.WARNING)  # our own lines say what happened
        self._own(plan)
        if plan.storage.startswith("sqlite:///"):
            Path(plan.storage.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        held = len(optuna.create_study(study_name=plan.name, storage=plan.storage,
                                       direction="minimize", load_if_exists=True).trials)
        # Seeded, and offset by the trials the study already holds: a resumed study must
        # not draw its first points again (a sampler restarted from the same seed would).
        sampler = optuna.samplers.TPESampler(**{**self.sampler_opts,
                                                "seed": self.sampler_opts["seed"] + held})
        study = optuna.load_study(study_name=plan.name, storage=plan.storage, sampler=sampler)
        setup = json.loads(json.dumps(plan.setup))
        stored = study.user_attrs.get("setup")
        if stored is None:
            study.set_user_attr("setup", setup)
            for params in self.enqueue:
                study.enqueue_trial(params)
        elif stored != setup:
            diff = ", ".join(f"{k}: stored {stored.get(k)!r}, now {setup.get(k)!r}"
                             for k in setup if stored.get(k) != setup.get(k))
            print(f"error: study {plan.name} ({plan.storage}) was created for another setup "
                  f"({diff}); set hydra.sweeper.study_key=<new key> to start a new study",
                  file=sys.stderr, flush=True)
            sys.exit(2)
        # Trials left RUNNING by a killed sweep: record them as interrupted (not counted
        # against the budget) and run their parameters again; their completed seeds are
        # skipped by the runner, interrupted ones resume from their checkpoints.
        for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            self._interrupted(study, t.number, t.params)
        while (todo := self.opts["n_trials"] - self._counted(study)) > 0:
            batch = [study.ask() for _ in range(min(self.opts["n_jobs"], todo))]
            self._run_batch(plan, study, batch)
        return self._write_best(plan, study)

    def _own(self, plan: Plan) -> None:
        """Take the study for this sweep (until the process ends) or exit 1 naming the
        sweep that has it: two sweeps on one study would mark each other's live trials
        interrupted and tell finished trials twice. Held, every RUNNING trial is a dead
        sweep's."""
        from tpo_bench.bench import rundir
        from tpo_bench.contract import io

        if not self.opts["storage"]:  # the default database under output_root/.optuna/
            db = Path(plan.storage.removeprefix("sqlite:///"))
            try:
                for p in (db.parent, db, plan.lock_path):
                    io.refuse_link(p)
            except io.LinkRefused as e:
                print(f"error: study {plan.name}: {e.strerror}; nothing was run",
                      file=sys.stderr, flush=True)
                sys.exit(1)
        fd, holder = rundir.hold(plan.lock_path)
        if holder is not None:
            print(f"error: study {plan.name} ({plan.storage}) is being run by another sweep, "
                  f"{rundir.describe(holder)} (lock {plan.lock_path}); wait for it to finish, or "
                  f"set hydra.sweeper.study_key=<new key> for a study of its own",
                  file=sys.stderr, flush=True)
            sys.exit(1)
        self._held = [*getattr(self, "_held", []), fd]  # open while this process sweeps

    @staticmethod
    def _counted(study) -> int:
        from optuna.trial import TrialState
        skip = set(study.user_attrs.get("interrupted", []))
        done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED,
                                                        TrialState.FAIL))
        return sum(t.number not in skip for t in done)

    @staticmethod
    def _interrupted(study, number: int, params: dict) -> None:
        from optuna.trial import TrialState
        study.set_user_attr("interrupted", study.user_attrs.get("interrupted", []) + [number])
        study.tell(number, state=TrialState.FAIL, skip_if_finished=True)
        study.enqueue_trial(params, user_attrs={"retry_of": number})
        print(f"[tune] {study.study_name} trial {number}: interrupted; its parameters run again",
              flush=True)

    def _run_batch(self, plan: Plan, study, batch) -> None:
        from optuna.trial import TrialState

        jobs, owners = [], []
        for trial in batch:
            params = S.suggest(trial, plan.space)
            overrides = plan.overrides + [S.as_override(k, v) for k, v in params.items()]
            try:  # sampled values the config refuses (a bad combination): FAIL, not launched
                self._validate(self._compose(overrides + [f"seed={plan.seeds[0]}"]), overrides)
            except Refused as e:
                self._tell(plan, study, trial, T.Outcome("invalid", reasons=[str(e)]))
                continue
            for seed in plan.seeds:
                jobs.append(overrides + [f"seed={seed}"])
                owners.append((trial, seed))
        if not jobs:
            return
        try:
            returns = self.launcher.launch(jobs, initial_job_idx=self.job_idx)
        except BaseException:  # Ctrl-C, a lost launcher: the study must still resume cleanly
            for trial in batch:
                if study.get_trials(deepcopy=False)[trial.number].state == TrialState.RUNNING:
                    self._interrupted(study, trial.number, trial.params)
            raise
        self.job_idx += len(jobs)
        results: dict[int, list] = {}
        for (trial, seed), ret in zip(owners, returns):
            try:
                value = ret.return_value  # raises what the job raised
            except Exception as e:
                value = e
            results.setdefault(trial.number, []).append((seed, value))
        for trial in batch:
            if trial.number in results:
                outcome = T.score(results[trial.number], self.opts["objective"], self.opts["final_window"])
                self._tell(plan, study, trial, outcome)

    def _tell(self, plan: Plan, study, trial, outcome: T.Outcome) -> None:
        from optuna.trial import TrialState

        trial.set_user_attr("outcome", outcome.kind)
        trial.set_user_attr("per_seed", {str(k): v for k, v in outcome.per_seed.items()})
        if outcome.reasons:
            trial.set_user_attr("reasons", [r[:500] for r in outcome.reasons])
        trial.set_user_attr("run_dirs", outcome.run_dirs)
        if outcome.kind == "complete":
            study.tell(trial, outcome.value)
            text = f"COMPLETE {self.opts['objective']} {outcome.value:.4g} (seeds: " + \
                ", ".join(f"{v:.3g}" for v in outcome.per_seed.values()) + ")"
        else:  # diverged -> PRUNED; failed or invalid -> FAIL
            study.tell(trial, state=TrialState.PRUNED if outcome.kind == "diverged" else TrialState.FAIL)
            text = f"{'PRUNED' if outcome.kind == 'diverged' else 'FAIL'} ({outcome.kind}: " \
                   f"{outcome.reasons[0] if outcome.reasons else '?'})"
        params = " ".join(S.as_override(k, v) for k, v in trial.params.items())
        print(f"[tune] {plan.name} trial {trial.number} ({self._counted(study)}/"
              f"{self.opts['n_trials']}): {text} | {params}", flush=True)

    # ------------------------------------------------------------ results

    def _write_best(self, plan: Plan, study):
        from optuna.trial import TrialState
        if not study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            print(f"[tune] {plan.name}: no completed trial; no best configuration written",
                  file=sys.stderr, flush=True)
            return None
        best = study.best_trial
        body = T.tuned_config(plan.algo_section, best.params, plan.best_path.stem)
        T.write_best(plan.best_path, body, [
            f"{plan.best_path.stem}: best trial ({best.number}) of optuna study {plan.name}",
            f"  ({plan.storage}): {self.opts['objective']} {best.value:.4g}, mean over seeds "
            f"{plan.seeds[0]}..{plan.seeds[-1]} of {plan.task} with {plan.episodes} episodes.",
            f"Budget: {self._budget(plan)}. Written by hydra/sweeper=optuna.",
            "Use: python -m bench algo=" + f"{plan.best_path.stem} hydra.searchpath=[file://"
            f"{plan.best_path.parent.parent.absolute()}] (or copy this file into conf/algo/).",
        ])
        return {"study": plan.name, "trial": best.number, "value": best.value,
                "params": best.params, "file": str(plan.best_path)}

    def _report(self, plans: list[Plan], results: list) -> None:
        for plan, r in zip(plans, results):
            if r is not None:
                params = " ".join(S.as_override(k, v) for k, v in r["params"].items())
                print(f"[tune] best of {plan.name}: trial {r['trial']}, {self.opts['objective']} "
                      f"{r['value']:.4g}: {params} -> {r['file']}", flush=True)
        by_task: dict[str, list[Plan]] = {}
        for plan, r in zip(plans, results):
            if r is not None:
                by_task.setdefault(plan.task, []).append(plan)
        first = plans[0].seeds[0] + RERUN_SEED_OFFSET if plans else 0
        for task, group in by_task.items():
            algos = [p.best_path.stem for p in group] + [p.algo for p in group]
            tuned = {k for p in group for k in p.space}
            extra = [o for o in group[0].overrides if _key(o) not in NOT_RERUN | tuned
                     and not _key(o).startswith("algo.")]
            dirs = sorted({str(p.best_path.parent.parent.absolute()) for p in group})
            print(f"[tune] rerun tuned beside untuned at full length with fresh seeds:\n"
                  f"  python -m bench -m algo={','.join(algos)} task={task} "
                  f"'seed=range({first},{first + self.opts['rerun_seeds']})' "
                  f"'hydra.searchpath=[{','.join('file://' + d for d in dirs)}]' "
                  + " ".join(extra), flush=True)
