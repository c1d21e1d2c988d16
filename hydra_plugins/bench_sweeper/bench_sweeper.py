"""Hydra's basic sweeper with two additions a long sweep needs: every job is validated
before any is launched (a typo in job 40 must not surface after 39 jobs ran, nor leave a
sweep directory behind), and the sweep ends with a report of what ran, what was skipped
and what failed -- exiting non-zero when anything failed.
"""
from __future__ import annotations

import re
import signal
import sys
from collections import Counter
from contextlib import nullcontext
from pathlib import Path
from typing import Any, List

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf, open_dict


def save_sweep_config(config) -> None:
    """multirun.yaml into hydra.sweep.dir as Hydra's basic sweeper writes it, but through
    contract.io.write_under: a folder or file under output_root that another user made a
    symbolic link is refused (LinkRefused, named), never followed, so a link planted at
    the next sweep's path cannot aim the write at someone's file."""
    from tpo_bench.contract import io

    sweep_dir = Path(config.hydra.sweep.dir)
    root = OmegaConf.select(config, "output_root")
    try:
        io.write_under(root if root is not None else sweep_dir.parent, sweep_dir / "multirun.yaml",
                       OmegaConf.to_yaml(config))
    except io.LinkRefused as e:
        print(f"error: hydra.sweep.dir: {e.strerror}; nothing was launched", file=sys.stderr, flush=True)
        sys.exit(2)


def completed_here(run_dir: Path, fingerprint: str) -> bool:
    """Whether a run's own record says it completed under this code fingerprint, its files
    agreeing with its path: a SLURM job of such runs would only skip them."""
    from tpo_bench.contract import io, schema

    try:
        summary = io.read_json_object(Path(run_dir) / schema.SUMMARY)
    except (OSError, io.DamagedFile):
        return False
    return (summary.get("status") == schema.COMPLETED and summary.get("code_fingerprint") == fingerprint
            and not schema.path_disagreements(run_dir))


class BenchSweeper(BasicSweeper):
    def setup(self, *, hydra_context, task_function, config) -> None:
        self._slurm = str(OmegaConf.select(config, "hydra.launcher._target_") or "").endswith(
            ".SlurmLauncher")
        self._local = str(OmegaConf.select(config, "hydra.launcher._target_") or "").endswith(
            ".JoblibLauncher")
        if self._slurm:
            from tpo_bench.bench import slurm

            slurm.quiet_sacct_repeats()
            folder = config.hydra.launcher._get_node("submitit_folder")
            if folder is not None and folder._value() == slurm.PLUGIN_LOG_FOLDER:
                with open_dict(config):  # the plugin's own preset: logs beside the results too
                    config.hydra.launcher.submitit_folder = slurm.LOG_FOLDER
        try:
            super().setup(hydra_context=hydra_context, task_function=task_function, config=config)
        except Exception as e:  # typically a launcher preset whose plugin is not installed
            target = OmegaConf.select(config, "hydra.launcher._target_")
            print(f"error: hydra/launcher could not be created ({target}): {e}\n"
                  f"  install its plugin (hydra-submitit-launcher for slurm_*, "
                  f"hydra-joblib-launcher for local), or pick another hydra/launcher",
                  file=sys.stderr, flush=True)
            sys.exit(2)

    def _refuse_without_slurm(self) -> None:
        """Before anything is submitted (a dry run too): sbatch reachable, the partition real."""
        from tpo_bench.bench import slurm

        why = slurm.problem(OmegaConf.select(self.config, "hydra.launcher.partition"))
        if why is not None:
            choice = OmegaConf.select(self.config, "hydra.runtime.choices")["hydra/launcher"]
            print(f"error: hydra/launcher={choice}: {why}; nothing was launched",
                  file=sys.stderr, flush=True)
            sys.exit(2)
        if not OmegaConf.select(self.config, "dry_run") and slurm.accounting_disabled():
            slurm.stop_asking_sacct()

    def split_arguments(self, overrides, max_batch_size):
        batches = BasicSweeper.split_arguments(overrides, max_batch_size)
        drop = getattr(self, "_duplicates", set())
        return [kept for batch in batches
                if (kept := [job for job in batch if tuple(job) not in drop])]

    def _launch_all(self, arguments: List[str]) -> Any:
        """BasicSweeper.sweep, its multirun.yaml written by save_sweep_config."""
        params_conf = self._parse_config()
        params_conf.extend(arguments)
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        self.overrides = self.split_arguments(parser.parse_overrides(params_conf), self.max_batch_size)
        save_sweep_config(self.config)
        returns, initial_job_idx = [], 0
        while not self.is_done():
            batch = self.get_job_batch()
            self.validate_batch_is_legal(batch)
            results = self.launcher.launch(batch, initial_job_idx=initial_job_idx)
            for r in results:
                _ = r.return_value  # raises where the job raised
            initial_job_idx += len(batch)
            returns.append(results)
        return returns

    def sweep(self, arguments: List[str]) -> Any:
        from tpo_bench.bench.jobs import explicit_keys, job_specs
        from tpo_bench.contract.schema import seed_dir
        from tpo_bench.bench.build import ConfigError
        from tpo_bench.bench.interrupts import SweepStop
        from tpo_bench.bench.config import check_top_value
        from tpo_bench.contract.schema import NOT_STARTED, SWEEP_STOP
        from hydra_plugins.bench_sweeper._progress import SweepProgress, every_s

        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        jobs = [job for batch in self.split_arguments(
            parser.parse_overrides(self._parse_config() + list(arguments)), self.max_batch_size)
            for job in batch]
        # Seeds do not change what is validated: compose one job per config, check the
        # other seeds' values only (a 20-seed sweep validates at the cost of one). Jobs that
        # resolve to the same run (match=interactions of a grouped method is its
        # prompt-matched run) are launched once: two processes must not train one directory.
        home: dict[tuple, str] = {}  # config overrides (no seed) -> run directory minus seed
        code: dict[tuple, str] = {}  # ... -> today's code fingerprint of its runs
        packed: dict[tuple, int] = {}  # ... -> seeds per job (a job may set its own)
        dirs: dict[tuple, list] = {}  # job -> its runs' directories, for the progress line
        seen: dict[str, dict[int, list[str]]] = {}
        per_job = OmegaConf.select(self.config, "seeds_per_job") or 1
        self._duplicates: set[tuple] = set()
        try:
            for job in jobs:
                key = tuple(o for o in job if not o.startswith("seed="))
                text = next((o.split("=", 1)[1] for o in job if o.startswith("seed=")), None)
                seed = (OmegaConf.select(self.config, "seed") or 0) if text is None else \
                    int(text) if re.fullmatch(r"-?\d+", text) else text
                first = check_top_value("seed", seed)  # every job's seed, by RunConfig's rule
                if key not in home:
                    cfg = self.hydra_context.config_loader.load_sweep_config(self.config, list(job))
                    with open_dict(cfg):
                        del cfg["hydra"]
                    # A SLURM job trains on a compute node: its device is that node's to check.
                    specs = job_specs(OmegaConf.to_container(cfg, resolve=True), explicit_keys(job),
                                      here=not self._slurm)
                    home[key], packed[key] = str(specs[0].run_dir.parent), len(specs)
                    code[key] = specs[0].code_fingerprint
                taken = seen.setdefault(home[key], {})
                if first in taken:
                    if not self._duplicates:
                        example = f"{' '.join(job)} = {' '.join(taken[first])}"
                    self._duplicates.add(tuple(job))
                    continue
                taken[first] = list(job)
                dirs[tuple(job)] = [Path(home[key]) / seed_dir(first + i) for i in range(packed[key])]
            # Packed seeds overlap iff two neighbouring starts are closer than seeds_per_job:
            # one sort per config instead of comparing every job with every other.
            if isinstance(per_job, int) and per_job > 1:
                for taken in seen.values():
                    ordered = sorted(taken)
                    for a, b in zip(ordered, ordered[1:]):
                        if b - a < per_job:
                            job = taken[b]
                            raise ConfigError(
                                f"seeds_per_job={per_job}: jobs starting at seeds {a} and {b} "
                                f"would train the same seed twice (seeds {a}..{a + per_job - 1} "
                                f"and {b}..{b + per_job - 1}); step the seeds by {per_job}, "
                                f"e.g. seed=range(0,100,{per_job})")
        except (ConfigError, ImportError) as e:
            print(f"error: {e}\n  (in job: {' '.join(job)}; nothing was launched)",
                  file=sys.stderr, flush=True)
            sys.exit(2)
        if self._duplicates:
            print(f"[sweep] {len(self._duplicates)} job(s) are the same run as another job and "
                  f"are launched once, e.g. {example}", flush=True)
        jobs = [job for job in jobs if tuple(job) not in self._duplicates]
        if self._slurm:
            self._refuse_without_slurm()
            if not OmegaConf.select(self.config, "force"):
                done = {tuple(job) for job in jobs if all(completed_here(
                    d, code[tuple(o for o in job if not o.startswith("seed="))]) for d in dirs[tuple(job)])}
                if done:
                    print(f"[sweep] {len(done)} of {len(jobs)} job(s) already complete (every run "
                          f"completed under today's code, where its path says): not submitted", flush=True)
                    self._duplicates |= done
                    jobs = [job for job in jobs if tuple(job) not in done]
                if not jobs:
                    return []
        if OmegaConf.select(self.config, "dry_run"):
            print(f"[dry run] {len(jobs)} valid jobs ({len(jobs) * per_job} runs); nothing launched")
            for job in jobs:
                print("  " + " ".join(job))
            return []
        progress = SweepProgress([d for job in jobs for d in dirs[tuple(job)]], every_s(self.config),
                                 force=bool(OmegaConf.select(self.config, "force")))
        if self._local:
            # No idle workers: loky starts n_jobs at once, and one that a Ctrl-C meets
            # before its first job (so before bench.interrupts guards it) dies and takes
            # its siblings with it.
            from joblib import effective_n_jobs

            n = effective_n_jobs(self.launcher.joblib.get("n_jobs", -1))
            self.launcher.joblib["n_jobs"] = max(1, min(n, len(jobs)))
        # A local sweep stops gracefully: its workers' runs checkpoint at their next
        # episode boundary (bench.interrupts), instead of the launcher killing them.
        stop = SweepStop(Path(self.config.hydra.sweep.dir) / SWEEP_STOP) if self._local else nullcontext()
        with progress, stop:
            returns = self._launch_all(arguments)
        runs = [r for batch in returns for job in batch
                for r in (job.return_value or {}).get("runs", [])]
        progress.finish(Counter(r["status"] for r in runs if r["status"] in ("held", "refused")),
                        failed=[r["run_dir"] for r in runs if r["status"] == "failed"],
                        untouched=[r["run_dir"] for r in runs if r["status"] in ("held", "refused")])
        failed = [r for r in runs if r["status"] != "completed"]
        # held (another process is training it) and refused (a damaged or foreign file)
        # are not failures of a training run, but not done either: named apart.
        others = Counter(r["status"] for r in failed if r["status"] != "failed")
        print(f"[sweep] {len(jobs)} jobs, {len(runs)} runs: {len(runs) - len(failed)} "
              f"completed, {len(failed) - sum(others.values())} failed"
              + "".join(f", {n} {status}" for status, n in sorted(others.items())), flush=True)
        for r in failed:
            if r["status"] != NOT_STARTED:  # counted above; a stopped sweep may have hundreds
                print(f"[sweep] {r['status']}: {r['run_dir']}: {r['reason']}", file=sys.stderr, flush=True)
        if self._local and stop.signame:
            print(f"[sweep] stopped by {stop.signame}: the same command resumes it", file=sys.stderr, flush=True)
            sys.exit(128 + signal.Signals[stop.signame])
        if failed:
            sys.exit(1)
        return returns
