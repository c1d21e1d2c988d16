"""The reproduction's study queue: `python -m tools.study {status,run,list,gpu,worktree}`.

The queue is reproduction/study.yaml: stages in order, each a few sweeps, and the commit its
runs train at. `worktree`: the checkout `run` trains in (a git worktree at that commit).
`run` trains what is not completed, JOBS at once, one thread each, checkpointing every 100
episodes; `--commit` commits each completed run (no checkpoint). A run completed and
committed in SOURCE (default: this checkout) counts as completed there too. A `prefix: N`
stage takes every run to episode N before any runs on. `status`: done, started and left,
with the cost (`--page`: the reproducing page's block). `gpu`: the unfinished seeds
seed-batched on one device, stopped at BUDGET_S checkpointed, packed into a tar.

    python -m tools.study worktree --repo ../tpo-study
    python -m tools.study run --repo ../tpo-study [--source SOURCE] [--jobs 2] [--stage NAME] [--commit]
    python -m tools.study status [--markdown] [--page docs/reproducing.md [--check]]
    python -m tools.study gpu [--parallel 12] [--budget-s 540] [--pack OUT.tar]
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import yaml
if __name__ == "__main__" and not (__package__ or "").startswith("tpo_bench"):
    import tpo_bench.tools  # noqa: F401  (run by path or by a top-level name: the package its relative imports name)
    __package__ = "tpo_bench.tools"

ROOT = Path(__file__).resolve().parent.parent
QUEUE = ROOT / "reproduction" / "study.yaml"
COMMON = ("threads=1", "checkpoint_every=100", "log_every=0", "progress_every_s=600")


@dataclass(frozen=True)
class Job:
    stage: str
    root: str  # output root, relative to the repository root
    overrides: tuple[str, ...]  # one run's overrides, seed included
    cost_s: float  # estimated CPU-seconds for the whole run (one thread)
    until: int | None = None  # a prefix pass: train to this episode, checkpoint and stop

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


def _read(path: Path) -> dict:
    """The queue file as a mapping, or ValueError naming the file and what is wrong."""
    try:
        queue = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ValueError(f"{path} is not valid YAML{where} ({getattr(e, 'problem', None) or e})") from None
    if not isinstance(queue, dict):
        raise ValueError(f"{path} holds a {type(queue).__name__}, not a mapping with `code` and `stages`")
    return queue


def pinned(path: Path = QUEUE) -> str | None:
    """The commit the queue's runs are trained with (study.yaml's `code`), if it names one."""
    code = _read(path).get("code")
    return None if code is None else str(code)


RUNS_PREFIX = "reproduction/runs/"
# Where the code a run trains with lives: the queue's checkout must hold exactly the commit's.
CODE_FOLDERS = ("algorithms", "tasks", "contract", "bench", "conf")


def check_code(repo: Path, code: str | None, fix: str | None = None) -> str | None:
    """None if the checkout that will train (repo) is at the queue's commit, or past it by run
    records only (what `run --commit` adds), with no edit and no untracked file in its
    CODE_FOLDERS (an untracked module in algorithms/ or tasks/ runs in every run); else why not,
    ending with `fix` (default: how to make that checkout)."""
    if code is None:
        return ("the queue names no commit to train at (study.yaml has no `code:`): add "
                "`code: <commit>`, or pass --any-code to train with whatever --repo holds")
    head = _git(repo, "rev-parse", "HEAD").stdout.strip()
    status = _git(repo, "status", "--porcelain", "--untracked-files=all", "--", *CODE_FOLDERS).stdout
    untracked = [line[3:] for line in status.splitlines() if line.startswith("??")]
    edited = len(status.splitlines()) > len(untracked)
    # the queue's own commits on top of `code` add run records only; anything else is other code
    base = _git(repo, "merge-base", "--is-ancestor", code, "HEAD").returncode == 0 if head else False
    since = _git(repo, "diff", "--name-only", code, "HEAD").stdout.split() if base else ["?"]
    if not all(f.startswith(RUNS_PREFIX) for f in since) or edited or untracked:
        extra = (" with edits" if edited else "") + (
            f"{' and' if edited else ' with'} untracked files ({', '.join(untracked[:5])}"
            f"{', ...' if len(untracked) > 5 else ''}: remove them or commit them)" if untracked else "")
        return (f"{repo} is at {head[:12] or 'no commit'}{extra}; the queue's runs "
                f"train at {code} (study.yaml's `code`): " + (fix or "`python -m tools.study worktree "
                "--repo ../tpo-study` makes that checkout; pass --repo ../tpo-study (or --any-code)"))
    return None


STUDY_BRANCH = "study"  # the branch the queue's worktree commits its runs to


def _toplevel(repo: Path) -> bool:
    """Whether `repo` is the top of a git checkout with a commit (not a folder inside one)."""
    top = _git(repo, "rev-parse", "--show-prefix")
    return top.returncode == 0 and not top.stdout.strip() and _git(repo, "rev-parse", "-q", "--verify",
                                                                      "HEAD").returncode == 0


def worktree(repo: Path, source: Path, code: str | None) -> int:
    """Make the checkout `run` trains in: a git worktree of `source` at the queue's commit
    on branch STUDY_BRANCH (an existing branch is reused as it is, never reset: it may
    hold runs not merged yet); refuse one that is not at the queue's commit."""
    if code is None:
        print("error: the queue names no commit to train at (study.yaml has no `code:`)", file=sys.stderr)
        return 2
    if not _toplevel(source):
        print(f"error: --source {source} is not the top of a git checkout with a commit", file=sys.stderr)
        return 2
    if not repo.exists():
        has_branch = _git(source, "rev-parse", "--verify", "-q", f"refs/heads/{STUDY_BRANCH}").returncode == 0
        add = _git(source, "worktree", "add", str(repo), *((STUDY_BRANCH,) if has_branch else ("-b", STUDY_BRANCH, code)))
        if add.returncode != 0:
            print(f"error: git worktree add {repo}: {add.stderr.strip()} (a branch `{STUDY_BRANCH}` "
                  f"checked out elsewhere is the queue's checkout: pass that folder as --repo)", file=sys.stderr)
            return 2
    elif not _toplevel(repo):
        print(f"error: {repo} exists and is not the top of a git checkout: name a new folder or "
              f"the queue's checkout", file=sys.stderr)
        return 2
    why = check_code(repo, code, fix=f"move that branch or folder aside (`git branch -m {STUDY_BRANCH} "
                                     f"{STUDY_BRANCH}-old`) and run this again")
    if why:
        print(f"error: {why}", file=sys.stderr)
        return 2
    head = _git(repo, "rev-parse", "--short=12", "HEAD").stdout.strip()
    print(f"[study] {repo}: branch {STUDY_BRANCH} at {head}, the queue's code {code}; "
          f"run: python -m tools.study run --repo {repo} --commit", flush=True)
    return 0


def committed_in(source: Path, rows) -> set:
    """The jobs among `rows` whose run `source` holds completed and tracked by git: `run`
    skips them and `status` counts them (a worktree at the queue's commit lacks the runs
    merged into main since)."""
    if not _toplevel(source):
        return set()
    theirs = [(j, d) for j, d, st in survey([j for j, _, _ in rows], source) if st == "completed"]
    tracked = set(_git(source, "ls-files", "--", RUNS_PREFIX).stdout.splitlines())
    return {j for j, d in theirs if str((d / "summary.json").relative_to(source)) in tracked}


SWEEP_KEYS = {"root": str, "seeds": list, "cost_s": (int, float), "args": str}


def load(path: Path = QUEUE) -> list[dict]:
    """The queue's stages, each checked to have what `jobs` reads (ValueError naming the
    stage and the key otherwise)."""
    stages = _read(path).get("stages")
    if not isinstance(stages, list) or not all(isinstance(s, dict) for s in stages):
        raise ValueError(f"{path}: `stages` must be a list of stages (name, why, sweeps)")
    for s in stages:
        for key in ("name", "why", "sweeps"):
            if key not in s:
                raise ValueError(f"{path}: stage {s.get('name', '?')!r} has no {key!r}")
        for sw in s["sweeps"] if isinstance(s["sweeps"], list) else [None]:
            for key, kind in SWEEP_KEYS.items():
                if not isinstance(sw, dict) or not isinstance(sw.get(key), kind):
                    raise ValueError(f"{path}: stage {s['name']!r}: each sweep needs {key!r} "
                                     f"({'a list' if kind is list else 'a number' if kind != str else 'a string'}); "
                                     f"the sweep keys: {', '.join(SWEEP_KEYS)}")
            if not 1 <= len(sw["seeds"]) <= 3 or not all(isinstance(x, int) for x in sw["seeds"]):
                raise ValueError(f"{path}: stage {s['name']!r}: `seeds` {sw['seeds']!r} is not "
                                 f"[start, stop] (integers, as Python's range)")
    return stages


def jobs(stages: list[dict], only: str | None = None) -> list[Job]:
    """Every run of the queue in order: seed-major within a sweep (within the whole stage
    where it says `interleave: true`), so that at any stopping point its lines have the
    same seeds."""
    names = [s["name"] for s in stages]
    if only is not None and only not in names:
        raise ValueError(f"--stage {only!r}: no such stage; the stages: {', '.join(names)}")
    out = []
    for s in stages:
        if only is not None and s["name"] != only:
            continue
        mine = [Job(s["name"], sw["root"], (f"seed={seed}", *combo), float(sw["cost_s"]))
                for sw in s["sweeps"] for seed in range(*sw["seeds"]) for combo in _expand(sw["args"])]
        if s.get("interleave"):  # seed-major across the stage's sweeps: any prefix is balanced
            mine.sort(key=lambda j: int(j.overrides[0].split("=", 1)[1]))
        if s.get("prefix"):  # every run to its first `prefix` episodes, then each to its end
            mine = [replace(j, until=int(s["prefix"])) for j in mine] + mine
        out += mine
    return out


_HASHES: dict = {}


def identity(root: Path, overrides: tuple[str, ...]) -> tuple[str, str, str]:
    """(task, algo, config hash) of `python -m bench` with these overrides (the seed aside)
    under output root `root` (not part of the hash); composed once per overrides, nothing
    is created. A ConfigError names the overrides it is about."""
    from ..bench.build import build
    from ..bench.config import ConfigError, check_overrides, compose
    from ..bench.jobs import explicit_keys

    key = tuple(overrides)
    if key not in _HASHES:
        ov = (*overrides, f"output_root={root}")
        try:
            check_overrides(list(ov))
            with warnings.catch_warnings():  # a build's warnings are for its run: none starts here
                warnings.simplefilter("ignore", UserWarning)
                spec = build(compose(*ov), explicit_keys(ov))
        except ConfigError as e:  # a mistyped name or a bad value in the queue's `args`
            raise ConfigError(f"`{' '.join(overrides)}`: {e}") from None
        _HASHES[key] = (spec.task.name, spec.algo_name, spec.config_hash)
    return _HASHES[key]


def locate(job: Job, repo: Path) -> Path:
    """The run directory `python -m bench` would use for this job (nothing is created)."""
    from ..contract import schema

    root = repo / job.root
    seed = int(job.overrides[0].split("=", 1)[1])
    try:
        task, algo, h = identity(root, job.overrides[1:])
    except ValueError as e:
        raise ValueError(f"stage {job.stage!r}, the run {e}") from None
    return schema.find_run(root, h, seed) or schema.run_dir(root, task, algo, h, seed)


def state(run_dir: Path) -> str:
    """completed, running/interrupted (a summary that is not completed), or todo."""
    try:
        status = json.loads((run_dir / "summary.json").read_text()).get("status")
    except (OSError, ValueError):
        return "todo"
    return "completed" if status == "completed" else "started"


def uncommitted(repo: Path, rows) -> set[Path] | None:
    """The completed runs among `rows` whose record (RECORD) git does not hold as it is
    (untracked or edited); None where `repo` is not a git checkout."""
    done = [d for _, d, st in rows if st == "completed"]
    roots = sorted({str(d.relative_to(repo).parts[0]) for d in done if d.is_relative_to(repo)})
    if not done or not roots:
        return set()
    tracked = _git(repo, "ls-files", "--", *roots)
    if tracked.returncode != 0:
        return None
    held = set(tracked.stdout.splitlines())
    changed = {line[3:] for line in _git(repo, "status", "--porcelain", "--untracked-files=all", "--",
                                         *roots).stdout.splitlines()}
    out = set()
    for d in done:
        files = [str((d / f).relative_to(repo)) for f in RECORD if (d / f).is_file()]
        if not files or any(f not in held or f in changed for f in files):
            out.add(d)
    return out


def survey(all_jobs: list[Job], repo: Path) -> list[tuple[Job, Path, str]]:
    """(job, run dir, state), one per distinct run (grouped methods share one run under
    both matchings: listed once, at its first place in the queue)."""
    seen, out = set(), []
    for j in all_jobs:
        d = locate(j, repo)
        if (d, j.until) in seen:
            continue
        seen.add((d, j.until))
        st = state(d)
        if j.until is not None and st != "completed":
            st = "completed" if next_step(d) >= j.until else st
        out.append((j, d, st))
    return out


def next_step(run_dir: Path) -> int:
    """The episode a run resumes at: its checkpoint's next step (0 without one)."""
    import torch

    try:
        return int(torch.load(run_dir / "checkpoint.pt", weights_only=True)["next_step"])
    except Exception:  # noqa: BLE001 (none yet, half-written, or not a checkpoint: start at 0)
        return 0


def status_table(rows, stages, markdown: bool = False, loose: set[Path] | None = None) -> str:
    """What is done, started and left per stage; `loose`: the completed runs not committed
    (uncommitted), said beside the completed count in the plain table."""
    loose = loose or set()
    lines = ["| stage | runs | completed | started | left | CPU-hours left | wall hours left at 2 jobs |",
             "|---|---:|---:|---:|---:|---:|---:|"] if markdown else []
    total = [0, 0, 0, 0, 0.0]
    for s in stages:
        mine = [r for r in rows if r[0].stage == s["name"] and r[0].until is None]
        done = sum(r[2] == "completed" for r in mine)
        started = sum(r[2] == "started" for r in mine)
        left = len(mine) - done
        cost = sum(r[0].cost_s for r in mine if r[2] != "completed") / 3600
        for i, v in enumerate((len(mine), done, started, left, cost)):
            total[i] += v
        if markdown:
            lines.append(f"| {s['name']} | {len(mine)} | {done} | {started} | {left} | {cost:.1f} | {cost / 2:.1f} |")
        else:
            n_loose = sum(r[1] in loose for r in mine)
            lines.append(f"{s['name']:<22} {done:>4}/{len(mine):<4} completed"
                         f"{f' ({n_loose} not committed)' if n_loose else ''}, {started} started, "
                         f"{left} left: {cost:.1f} CPU-h ({cost / 2:.1f} h at 2 jobs)")
    n, done, started, left, cost = total
    if markdown:
        lines.append(f"| all | {n} | {done} | {started} | {left} | {cost:.1f} | {cost / 2:.1f} |")
    else:
        n_loose = sum(r[1] in loose for r in rows if r[0].stage in {s["name"] for s in stages})
        lines.append(f"{'all':<22} {done:>4}/{n:<4} completed"
                     f"{f' ({n_loose} not committed)' if n_loose else ''}, {started} started, "
                     f"{left} left: {cost:.1f} CPU-h ({cost / 2:.1f} h at 2 jobs)")
    return "\n".join(lines)


def queue_block(table: str, stages: list[dict]) -> str:
    """The page's `queue` block: each stage's purpose, then the table."""
    why = "\n".join(f"- `{s['name']}`: {s['why']}" for s in stages)
    said = ("Counted in the tree the table was made from. A run is committed when it completes, so "
            "on a committed page none is started; `python -m tools.study status --repo <the "
            "queue's worktree>` counts the runs under way there.")
    return f"{why}\n\n{table}\n\n{said}\n"


def write_block(page: Path, block: str, check: bool) -> int:
    from ..analysis.paper import pages

    text = page.read_text()
    if "<!-- generated:queue -->" not in text:
        print(f"error: {page} has no `<!-- generated:queue -->` block", file=sys.stderr)
        return 2
    new = pages.fill(text, {"queue": lambda: block}, only={"queue"})
    if check:
        if new != text:
            print(f"error: the queue block of {page} is out of date: run "
                  f"`python -m tools.study status --page {page}`", file=sys.stderr)
            return 1
        print("queue block up to date")
        return 0
    if new != text:
        page.write_text(new)
    print(f"wrote {page}" if new != text else "queue block up to date")
    return 0


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)


# A completed run's record, what `run --commit` commits (no checkpoint).
RECORD = ("summary.json", "config.json", "metrics.parquet")
COMMIT_PAUSE_S = 3.0  # between tries while another git command holds the index


def commit_run(repo: Path, run_dir: Path, tries: int = 20) -> bool:
    """Commit one completed run's files (RECORD) and nothing else the index holds (a
    path-limited commit); False, said on stderr, when git refuses every try."""
    files = [str(p.relative_to(repo)) for p in sorted(run_dir.iterdir())
             if p.is_file() and p.name in RECORD]
    s = json.loads((run_dir / "summary.json").read_text())
    err = (s.get("final") or {}).get("error")
    size = sum((repo / f).stat().st_size for f in files)
    if s.get("status", "completed") != "completed":
        msg = (f"Study: {s['task']}/{s['algo']} {s['config_hash']} seed {s['seed']} in progress, "
               f"to episode {next_step(run_dir)} (code {s.get('git_commit')}; {size / 1024:.0f} KiB)")
    elif err is not None:
        msg = (f"Study: {s['task']}/{s['algo']} {s['config_hash']} seed {s['seed']} completed "
               f"(final error {err:.4f}; code {s.get('git_commit')}; {size / 1024:.0f} KiB)")
    else:
        msg = f"Study: {run_dir.relative_to(repo)} completed ({size / 1024:.0f} KiB)"
    for _ in range(tries):
        add = _git(repo, "add", "--", *files)
        if add.returncode == 0:
            c = _git(repo, "commit", "-q", "-m", msg, "--", *files)
            if c.returncode == 0 or "nothing" in c.stdout + c.stderr:
                return True
        time.sleep(COMMIT_PAUSE_S)  # another git command holds the index: try again
    print(f"[study] could not commit {run_dir} ({tries} tries): {(add.stderr or c.stderr).strip()}",
          file=sys.stderr)
    return False


PREFIX_POLL_S = 30.0  # how often a prefix pass reads its run's checkpoint
STOPPED = (-signal.SIGTERM, 128 + signal.SIGTERM)  # a run told to stop, checkpointed


def run_prefix(job: Job, run_dir: Path, repo: Path, commit: bool, cmd: list, env: dict) -> str:
    """Train until the run's checkpoint reaches job.until, then stop it (SIGTERM: it
    checkpoints at its next step; resuming continues bit for bit); commit what it logged."""
    t0 = time.time()
    print(f"[study] start {job.stage} to episode {job.until}: {job.label}", flush=True)
    proc = subprocess.Popen(cmd, cwd=repo, env=env, stdout=subprocess.DEVNULL)
    while proc.poll() is None:
        time.sleep(PREFIX_POLL_S)
        if next_step(run_dir) >= job.until and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait()
    rc = proc.returncode
    ok = rc == 0 or rc in STOPPED
    print(f"[study] {'at episode ' + str(next_step(run_dir)) if ok else f'exit {rc}'} after "
          f"{time.time() - t0:.0f} s: {job.label}", flush=True)
    if not ok:
        return "failed"
    return "failed" if commit and not commit_run(repo, run_dir) else "ran"


def held_elsewhere(run_dir: Path) -> bool:
    """Whether another process holds the run's lock now (another queue trains it), or has
    completed it."""
    from ..bench import rundir
    from ..contract import io
    from ..contract.schema import LOCK

    if state(run_dir) == "completed":
        return True
    if not (run_dir / LOCK).is_file():
        return False
    try:
        fd, holder = rundir.hold(run_dir / LOCK)
    except (OSError, io.LinkRefused):
        return False
    if fd is not None:
        os.close(fd)
    return holder is not None


def run_one(job: Job, run_dir: Path, repo: Path, commit: bool) -> str:
    """Train one run: "ran", "failed" (the run, or committing its record, failed) or
    "held" (another queue trains it or has completed it: left to that one)."""
    cmd = [sys.executable, "-m", "bench", *job.overrides, *COMMON, f"output_root={job.root}"]
    env = {**os.environ, "ATEN_CPU_CAPABILITY": os.environ.get("ATEN_CPU_CAPABILITY", "avx2")}
    if job.until is not None:
        return run_prefix(job, run_dir, repo, commit, cmd, env)
    t0 = time.time()
    print(f"[study] start {job.stage}: {job.label}", flush=True)
    rc = subprocess.run(cmd, cwd=repo, env=env, stdout=subprocess.DEVNULL).returncode
    st = state(run_dir)
    if rc != 0 and held_elsewhere(run_dir):
        print(f"[study] held by another process, left to it: {job.label}", flush=True)
        return "held"
    print(f"[study] {st if rc == 0 else f'exit {rc}'} after {time.time() - t0:.0f} s: {job.label}", flush=True)
    if rc != 0:
        return "failed"
    if st == "completed" and commit and not commit_run(repo, run_dir):
        return "failed"  # trained, but the queue's record of it is not committed
    return "ran"


@dataclass(frozen=True)
class Pack:
    """One seed-batched job: a config's consecutive unfinished seeds."""
    stage: str
    root: str
    overrides: tuple[str, ...]  # the config's overrides, no seed
    seeds: tuple[int, ...]
    run_dirs: tuple[Path, ...]


def packs(rows, first: str = "a_mechanism") -> list[Pack]:
    """The unfinished runs as seed-batched jobs: per config, each stretch of consecutive
    seeds one job; the `first` stage's jobs lead, the rest keep the queue's order."""
    by: dict = {}
    for job, d, st in rows:
        if st == "completed" or job.until is not None:  # a device runs each seed to its end
            continue
        key = (job.root, job.overrides[1:])
        by.setdefault(key, [job.stage, []])[1].append((int(job.overrides[0].split("=", 1)[1]), d))
    out = []
    for (root, rest), (stage, seeds) in by.items():
        seeds.sort()
        run: list = []
        for seed, d in seeds + [(None, None)]:
            if run and (seed is None or seed != run[-1][0] + 1):
                out.append(Pack(stage, root, rest, tuple(s for s, _ in run), tuple(x for _, x in run)))
                run = []
            if seed is not None:
                run.append((seed, d))
    return sorted(out, key=lambda p: p.stage != first)


def run_pack(p: Pack, repo: Path, device: str, deadline: float, extra: tuple[str, ...]) -> int:
    cmd = [sys.executable, "-m", "bench", *p.overrides, f"seed={p.seeds[0]}",
           f"seeds_per_job={len(p.seeds)}", "batch_seeds=true", f"device={device}",
           *COMMON, f"output_root={p.root}", *extra]
    if time.time() >= deadline:
        return -1
    print(f"[gpu] start {p.stage}: {' '.join(p.overrides)} seeds {p.seeds[0]}-{p.seeds[-1]}", flush=True)
    t0 = time.time()
    proc = subprocess.Popen(cmd, cwd=repo, stdout=subprocess.DEVNULL)
    try:
        rc = proc.wait(timeout=max(deadline - time.time(), 1))
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # every seed checkpoints at its next step
        rc = proc.wait()
    print(f"[gpu] exit {rc} after {time.time() - t0:.0f} s: {' '.join(p.overrides)}", flush=True)
    return rc


def gpu(rows, repo: Path, a) -> int:
    todo = packs(rows)
    runs = sum(len(p.seeds) for p in todo)
    print(f"[gpu] {len(todo)} seed-batched jobs ({runs} runs), {a.parallel} at once, "
          f"budget {a.budget_s:.0f} s, device {a.device}", flush=True)
    deadline = time.time() + a.budget_s
    extra = tuple(a.set or ())
    with ThreadPoolExecutor(a.parallel) as pool:
        codes = list(pool.map(lambda p: run_pack(p, repo, a.device, deadline, extra), todo))
    touched = [d for p, c in zip(todo, codes) if c != -1 for d in p.run_dirs if d.is_dir()]
    if a.pack:
        a.pack.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(a.pack, "w") as tar:
            for d in touched:
                for f in sorted(d.iterdir()):
                    if f.is_file() and not f.name.startswith("."):
                        tar.add(f, arcname=str(f.relative_to(repo)))
        print(f"[gpu] packed {len(touched)} run directories into {a.pack}", flush=True)
    done = sum(state(d) == "completed" for d in touched)
    print(f"[gpu] {done} runs completed, {len(touched) - done} checkpointed or failed, "
          f"{sum(c == -1 for c in codes)} jobs not started", flush=True)
    stopped = (-1, -signal.SIGTERM, 128 + signal.SIGTERM)  # not started, or stopped at the budget
    return 0 if all(c == 0 or c in stopped for c in codes) else 1


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("command", choices=("status", "run", "list", "gpu", "worktree"))
    p.add_argument("--queue", type=Path, default=QUEUE)
    p.add_argument("--repo", type=Path, default=ROOT, help="the checkout the run roots are in")
    p.add_argument("--source", type=Path, default=ROOT,
                   help="the checkout whose committed, completed runs count as completed (default: this one)")
    p.add_argument("--stage", default=None)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--max-runs", type=int, default=0, help="stop after this many runs (0: all)")
    p.add_argument("--commit", action="store_true")
    p.add_argument("--any-code", action="store_true", help="run: train with whatever code --repo holds")
    p.add_argument("--markdown", action="store_true")
    p.add_argument("--page", type=Path, default=None,
                   help="status: rewrite the page's `queue` generated block (--check: compare only)")
    p.add_argument("--check", action="store_true")
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--parallel", type=int, default=12, help="gpu: jobs at once on the device")
    p.add_argument("--budget-s", type=float, default=540.0, help="gpu: stop (checkpoint) at this many seconds")
    p.add_argument("--device", default="cuda", help="gpu: the device (cpu for a test)")
    p.add_argument("--pack", type=Path, default=None, help="gpu: pack the touched run directories here")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="gpu: an override added to every job (a test's few episodes)")
    a = p.parse_args(argv)
    repo, source = a.repo.resolve(), a.source.resolve()
    try:
        stages = load(a.queue)
        todo = jobs(stages, a.stage)
        rows = None if a.command == "worktree" else survey(todo, repo)
    except (OSError, ValueError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.command == "worktree":  # the queue file read above: pinned() reads it again safely
        return worktree(repo, source, pinned(a.queue))
    if source != repo:  # runs merged into SOURCE count as completed here too
        elsewhere = committed_in(source, [r for r in rows if r[2] != "completed"])
        rows = [(j, d, "completed" if j in elsewhere else st) for j, d, st in rows]
        mine = [r for r in rows if r[0] not in elsewhere]
    else:
        elsewhere, mine = set(), rows
    if a.command == "status":
        markdown = a.markdown or a.page
        table = status_table(rows, [s for s in stages if a.stage in (None, s["name"])], markdown,
                             None if markdown else uncommitted(repo, mine))
        if a.page is None:
            print(table)
            return 0
        return write_block(a.page, queue_block(table, stages), a.check)
    if a.command == "gpu":
        return gpu(rows, repo, a)
    left = [(j, d) for j, d, st in rows if st != "completed"]
    if a.command == "list" or a.dry_run:
        for j, d, st in rows:
            where = f"  (in {source})" if j in elsewhere else ""
            print(f"{st:<9} {j.stage:<22} {d.relative_to(repo)}  {j.label}{where}")
        return 0
    why = None if a.any_code else check_code(repo, pinned(a.queue))
    if why:
        print(f"error: {why}", file=sys.stderr)
        return 2
    if a.max_runs:
        left = left[:a.max_runs]
    loose = sorted(uncommitted(repo, mine) or ()) if a.commit else []
    if loose:  # completed before, their commit failed: the same command commits them
        print(f"[study] {len(loose)} completed run(s) not committed: committing them", flush=True)
    unsaved = sum(not commit_run(repo, d) for d in loose)
    print(f"[study] {len(left)} run{'' if len(left) == 1 else 's'} to go, {a.jobs} at once", flush=True)
    with ThreadPoolExecutor(a.jobs) as pool:
        outcomes = list(pool.map(lambda jd: run_one(*jd, repo, a.commit), left))
    bad, held = outcomes.count("failed") + unsaved, outcomes.count("held")
    print(f"[study] done: {outcomes.count('ran')} ran, {bad} failed"
          + (f", {held} held by another process (left to it)" if held else ""), flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
