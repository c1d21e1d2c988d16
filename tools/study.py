"""The reproduction's study queue: `python -m tools.study {status,run,list}`.

The queue is a committed list (reproduction/study.yaml): stages in the order the
reproduction needs them, each a few sweeps (Hydra-style overrides with comma lists and a
seed range). `run` trains what is not completed, in that order, one run per job, JOBS jobs
at once, one torch thread each, checkpointing every 100 episodes; stop it any time and run
it again: completed runs are skipped, unfinished ones resume. `--commit` commits each run
as it completes (its summary and metrics, never a checkpoint). `status` says what is done,
what runs, what is left and its cost, from the run directories alone.

    python -m tools.study status [--markdown]
    python -m tools.study run [--jobs 2] [--stage NAME] [--commit] [--max-runs N] [--dry-run]
    python -m tools.study list [--stage NAME]          # the runs, in queue order
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
QUEUE = ROOT / "reproduction" / "study.yaml"
COMMON = ("threads=1", "checkpoint_every=100", "log_every=0", "progress_every_s=600")


@dataclass(frozen=True)
class Job:
    stage: str
    root: str  # output root, relative to the repository root
    overrides: tuple[str, ...]  # one run's overrides, seed included
    cost_s: float  # estimated CPU-seconds for the whole run (one thread)

    @property
    def label(self) -> str:
        return " ".join(self.overrides)


def _expand(args: str) -> list[tuple[str, ...]]:
    """'algo=tpo,grpo task=reverse_h9' -> one override tuple per combination, in order."""
    axes = []
    for tok in args.split():
        k, _, v = tok.partition("=")
        axes.append([f"{k}={x}" for x in v.split(",")] if "," in v and not v.startswith("[") else [tok])
    return list(itertools.product(*axes))


def load(path: Path = QUEUE) -> list[dict]:
    stages = yaml.safe_load(path.read_text())["stages"]
    for s in stages:
        for key in ("name", "why", "sweeps"):
            if key not in s:
                raise ValueError(f"{path}: stage {s.get('name', '?')!r} has no {key!r}")
    return stages


def jobs(stages: list[dict], only: str | None = None) -> list[Job]:
    """Every run of the queue in order: seed-major within a sweep, so that at any stopping
    point a sweep's methods have the same seeds."""
    names = [s["name"] for s in stages]
    if only is not None and only not in names:
        raise ValueError(f"--stage {only!r}: no such stage; the stages: {', '.join(names)}")
    out = []
    for s in stages:
        if only is not None and s["name"] != only:
            continue
        for sw in s["sweeps"]:
            lo, hi = sw["seeds"]
            for seed in range(lo, hi):
                for combo in _expand(sw["args"]):
                    out.append(Job(s["name"], sw["root"], (f"seed={seed}", *combo), float(sw["cost_s"])))
    return out


_HASHES: dict = {}


def locate(job: Job, repo: Path) -> Path:
    """The run directory `python -m bench` would use for this job (nothing is created);
    the config is composed once per sweep combination, the seed only names the folder."""
    from tpo_bench.bench.build import build
    from tpo_bench.bench.config import compose
    from tpo_bench.bench.jobs import explicit_keys
    from tpo_bench.contract import schema

    root = repo / job.root
    seed, rest = int(job.overrides[0].split("=", 1)[1]), job.overrides[1:]
    if (job.root, rest) not in _HASHES:
        ov = (*rest, f"output_root={root}")
        spec = build(compose(*ov), explicit_keys(ov))
        _HASHES[job.root, rest] = (spec.task.name, spec.algo_name, spec.config_hash)
    task, algo, h = _HASHES[job.root, rest]
    return schema.find_run(root, h, seed) or schema.run_dir(root, task, algo, h, seed)


def state(run_dir: Path) -> str:
    """completed, running/interrupted (a summary that is not completed), or todo."""
    try:
        status = json.loads((run_dir / "summary.json").read_text()).get("status")
    except (OSError, ValueError):
        return "todo"
    return "completed" if status == "completed" else "started"


def survey(all_jobs: list[Job], repo: Path) -> list[tuple[Job, Path, str]]:
    """(job, run dir, state), one per distinct run (grouped methods share one run under
    both matchings: listed once, at its first place in the queue)."""
    seen, out = set(), []
    for j in all_jobs:
        d = locate(j, repo)
        if d in seen:
            continue
        seen.add(d)
        out.append((j, d, state(d)))
    return out


def status_table(rows, stages, markdown: bool = False) -> str:
    lines = ["| stage | runs | completed | started | left | CPU-hours left | wall hours left at 2 jobs |",
             "|---|---:|---:|---:|---:|---:|---:|"] if markdown else []
    total = [0, 0, 0, 0, 0.0]
    for s in stages:
        mine = [r for r in rows if r[0].stage == s["name"]]
        done = sum(r[2] == "completed" for r in mine)
        started = sum(r[2] == "started" for r in mine)
        left = len(mine) - done
        cost = sum(r[0].cost_s for r in mine if r[2] != "completed") / 3600
        for i, v in enumerate((len(mine), done, started, left, cost)):
            total[i] += v
        if markdown:
            lines.append(f"| {s['name']} | {len(mine)} | {done} | {started} | {left} | {cost:.1f} | {cost / 2:.1f} |")
        else:
            lines.append(f"{s['name']:<22} {done:>4}/{len(mine):<4} completed, {started} started, "
                         f"{left} left: {cost:.1f} CPU-h ({cost / 2:.1f} h at 2 jobs)")
    n, done, started, left, cost = total
    if markdown:
        lines.append(f"| all | {n} | {done} | {started} | {left} | {cost:.1f} | {cost / 2:.1f} |")
    else:
        lines.append(f"{'all':<22} {done:>4}/{n:<4} completed, {started} started, {left} left: "
                     f"{cost:.1f} CPU-h ({cost / 2:.1f} h at 2 jobs)")
    return "\n".join(lines)


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)


def commit_run(repo: Path, run_dir: Path, tries: int = 20) -> bool:
    """Commit one completed run's files (summary, config, metrics; no checkpoint) and
    nothing else the index holds (a path-limited commit)."""
    files = [str(p.relative_to(repo)) for p in sorted(run_dir.iterdir())
             if p.is_file() and p.name in ("summary.json", "config.json", "metrics.parquet")]
    s = json.loads((run_dir / "summary.json").read_text())
    err = (s.get("final") or {}).get("error")
    msg = (f"Study: {s['task']}/{s['algo']} {s['config_hash']} seed {s['seed']} completed "
           f"(final error {err:.4f}; code {s.get('git_commit')})" if err is not None else
           f"Study: {run_dir.relative_to(repo)} completed")
    for _ in range(tries):
        add = _git(repo, "add", "--", *files)
        if add.returncode == 0:
            c = _git(repo, "commit", "-q", "-m", msg, "--", *files)
            if c.returncode == 0 or "nothing" in c.stdout + c.stderr:
                return True
        time.sleep(3)  # another git command holds the index: try again
    print(f"[study] could not commit {run_dir}: {add.stderr or c.stderr}", file=sys.stderr)
    return False


def run_one(job: Job, run_dir: Path, repo: Path, commit: bool) -> int:
    cmd = [sys.executable, "-m", "bench", *job.overrides, *COMMON, f"output_root={job.root}"]
    env = {**os.environ, "ATEN_CPU_CAPABILITY": os.environ.get("ATEN_CPU_CAPABILITY", "avx2")}
    t0 = time.time()
    print(f"[study] start {job.stage}: {job.label}", flush=True)
    rc = subprocess.run(cmd, cwd=repo, env=env, stdout=subprocess.DEVNULL).returncode
    st = state(run_dir)
    print(f"[study] {st if rc == 0 else f'exit {rc}'} after {time.time() - t0:.0f} s: {job.label}", flush=True)
    if rc == 0 and st == "completed" and commit:
        commit_run(repo, run_dir)
    return rc


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("command", choices=("status", "run", "list"))
    p.add_argument("--queue", type=Path, default=QUEUE)
    p.add_argument("--repo", type=Path, default=ROOT, help="the checkout the run roots are in")
    p.add_argument("--stage", default=None)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--max-runs", type=int, default=0, help="stop after this many runs (0: all)")
    p.add_argument("--commit", action="store_true")
    p.add_argument("--markdown", action="store_true")
    p.add_argument("--dry-run", action="store_true")
    a = p.parse_args(argv)
    try:
        stages = load(a.queue)
        todo = jobs(stages, a.stage)
    except (OSError, ValueError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    repo = a.repo.resolve()
    rows = survey(todo, repo)
    if a.command == "status":
        print(status_table(rows, [s for s in stages if a.stage in (None, s["name"])], a.markdown))
        return 0
    left = [(j, d) for j, d, st in rows if st != "completed"]
    if a.command == "list" or a.dry_run:
        for j, d, st in rows:
            print(f"{st:<9} {j.stage:<22} {d.relative_to(repo)}  {j.label}")
        return 0
    if a.max_runs:
        left = left[:a.max_runs]
    print(f"[study] {len(left)} runs to go, {a.jobs} at once", flush=True)
    with ThreadPoolExecutor(a.jobs) as pool:
        codes = list(pool.map(lambda jd: run_one(*jd, repo, a.commit), left))
    bad = sum(c != 0 for c in codes)
    print(f"[study] done: {len(codes) - bad} ran, {bad} failed", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
