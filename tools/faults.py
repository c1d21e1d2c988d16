"""Fault campaign (a benchmark, not a test): N randomised trials of a fault on a short
demo run, each followed by the same command again until the run says `completed`, then
every run directory checked against an uninterrupted reference of its config.

    python -m tools.faults --trials 100 --root outputs/faults

Faults: SIGKILL, SIGTERM, SIGINT at a random moment; a duplicate launch; ENOSPC (a 512 KiB
tmpfs; needs root, else left out and said so); a symlinked `.lock` (refused, target
untouched); a NaN metric (`failed`, `diverged`); a code edit between two launches (comment
edit skipped, statement edit refused, `on_code_change=rerun` retrains); a plot of a table
collected before the run finished, under a symlinked output_root (warned; silent once
re-collected). Right after the fault the record must be truthful; after re-running until
completed every row must equal the reference's. Runs are found as collect finds them
(symlinks followed). Prints trials, faults, rows lost and mislabelled; exits 1 if any.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pandas as pd

from tpo_bench.contract import io
from tpo_bench.contract.schema import CHECKPOINT, LOCK, METRICS, SUMMARY, run_dirs

SIGNALS = {"sigkill": signal.SIGKILL, "sigterm": signal.SIGTERM, "sigint": signal.SIGINT}
FAULTS = (*SIGNALS, "duplicate", "enospc", "symlink_lock", "nan_metric", "code_edit", "stale_plot")
# A handful of configs, so that references are shared between trials.
CONFIGS = [
    ["task=demo", "algo=tpo", "task.episodes=16", "checkpoint_every=4"],
    ["task=demo", "algo=grpo", "task.episodes=12", "checkpoint_every=3"],
    ["task=demo", "algo=ppo", "task.episodes=20", "checkpoint_every=5"],
    ["task=demo", "algo=dg", "task.episodes=20", "checkpoint_every=2"],
    ["task=demo", "algo=pg", "task.episodes=14", "checkpoint_every=7"],
]
COMMON = ["task.batch_size=8", "task.sequence_length=4", "threads=1", "log_every=1000"]
# The code-edit fault's config: TPO through a plugin module the trial edits.
PLUGIN_CONFIG = ["task=demo", "algo=tpo", "algo.impl=tpo_fault", "plugins=[fault_plugin]",
                 "task.episodes=10", "checkpoint_every=5"]
PLUGIN = '''"""TPO through a plugin module (tools.faults edits it between launches)."""
from dataclasses import dataclass

from tpo_bench.algorithms import register
from tpo_bench.algorithms.tpo import TPO


@register("tpo_fault")
@dataclass(frozen=True)
class FaultTPO(TPO):
    def loss(self, batch, logp):
        out = super().loss(batch, logp)
        return out
'''
# Edits that leave the numbers alone: a comment (the fingerprint ignores it: the run is
# skipped) or a statement (the fingerprint changes: the run is refused until rerun).
EDITS = {"comment": ("        return out\n", "        return out  # reviewed\n"),
         "statement": ("        return out\n", "        unused = 1.0\n        return out\n")}
MAX_ATTEMPTS = 6


def write_plugin(folder: Path, text: str = PLUGIN) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "fault_plugin.py").write_text(text)


def bench(args: list[str], root: Path, plugin: Path | None = None) -> subprocess.Popen:
    """`python -m bench` on `root`; `plugin`: a folder put first on PYTHONPATH."""
    env = None if plugin is None else {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(plugin), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen([sys.executable, "-m", "bench", *args, *COMMON, f"output_root={root}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)


def run_dir(root: Path) -> Path | None:
    """The one run directory under root with a summary, found by collect's walk."""
    found = [d for d in run_dirs(root) if (d / SUMMARY).is_file()] if root.is_dir() else []
    return found[0] if len(found) == 1 else None


def status(root: Path) -> str | None:
    d = run_dir(root)
    try:
        return io.read_json_object(d / SUMMARY).get("status") if d else None
    except (OSError, io.DamagedFile):
        return "damaged"


def fingerprint(root: Path) -> str | None:
    return json.loads((run_dir(root) / SUMMARY).read_text()).get("code_fingerprint")


def wait_started(root: Path, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None and status(root) is None:
        time.sleep(0.02)


def signal_trial(args: list[str], root: Path, sig: int, rng: random.Random) -> str:
    """The status the record must have afterwards."""
    proc = bench(args, root)
    wait_started(root, proc)
    time.sleep(rng.uniform(0.0, 2.5))  # before, between or after checkpoints
    if proc.poll() is not None:
        return "completed"
    proc.send_signal(sig)
    proc.wait()
    return "running" if sig == signal.SIGKILL else "interrupted"


def duplicate_trial(args: list[str], root: Path, rng: random.Random) -> str:
    first = bench(args, root)
    time.sleep(rng.uniform(0.0, 1.5))
    second = bench(args, root)
    first.wait()
    second.wait()
    return "completed"


def enospc_trial(args: list[str], root: Path) -> str | None:
    """None where no tmpfs can be mounted here."""
    root.mkdir(parents=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(root)],
                      capture_output=True).returncode != 0:
        return None
    bench(args, root).wait()
    return "failed"


def symlink_trial(args: list[str], root: Path, where: Path) -> str | None:
    """The run's .lock (`where` under root) a link to a file outside the run: the run
    must refuse (exit 1) and write nothing; the operator then removes the link. Returns
    what was wrong, or None."""
    victim = root.parent / f"{root.name}-victim.txt"
    root.parent.mkdir(parents=True, exist_ok=True)
    victim.write_text("not the harness's")
    (root / where).mkdir(parents=True)
    (root / where / LOCK).symlink_to(victim)
    code = bench(args, root).wait()
    wrong = [f"exit {code}, not 1"] if code != 1 else []
    if not victim.is_file() or victim.read_text() != "not the harness's":
        wrong.append("the link's target was written or replaced")
    if any((d / SUMMARY).exists() for d in run_dirs(root)):
        wrong.append("a summary was written beside the link")
    (root / where / LOCK).unlink()
    return "; ".join(wrong) or None


def code_edit_trial(args: list[str], root: Path, plugin: Path, rng: random.Random) -> tuple[str, str | None]:
    """Run to completion with the plugin as written, edit it, launch again: a comment is
    skipped (exit 0), a statement refused (exit 1), the record untouched either way.
    Returns (the edit, what was wrong or None)."""
    write_plugin(plugin)
    bench(args, root, plugin).wait()
    before = (run_dir(root) / SUMMARY).read_text() if run_dir(root) else None
    edit = rng.choice(sorted(EDITS))
    old, new = EDITS[edit]
    write_plugin(plugin, PLUGIN.replace(old, new))
    code = bench(args, root, plugin).wait()
    want = 0 if edit == "comment" else 1
    wrong = [f"exit {code} after a {edit} edit, not {want}"] if code != want else []
    if before is None or (run_dir(root) / SUMMARY).read_text() != before:
        wrong.append("the completed run's record changed")
    return edit, "; ".join(wrong) or None


def analysis(script: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, f"analysis/{script}.py", *map(str, args)],
                          capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent)


def stale_plot_trial(args: list[str], root: Path, ref_root: Path, reference: pd.DataFrame) -> str | None:
    """A table collected before the run finished (the reference's), the run completed
    in a folder under root that is a symlink, then plot: it must warn that the table misses one completed run; after
    collect again it must be silent and the table hold the run's rows. Returns what was
    wrong, or None."""
    table = root / "results.parquet"
    root.mkdir(parents=True)
    # The run's output_root a link to scratch space: collect and plot walk through it.
    scratch = root.parent / f"{root.name}-scratch"
    scratch.mkdir()
    (root / "sweep").symlink_to(scratch.resolve(), target_is_directory=True)
    wrong = []
    if (r := analysis("collect", ref_root, "--out", table)).returncode != 0:
        return f"collect of the reference exited {r.returncode}: {r.stderr.strip()[-200:]}"
    time.sleep(0.05)  # the run's finished_at strictly after the table's mtime
    bench(args, root / "sweep").wait()
    r = analysis("plot", "--results", table, "--out", root / "plots")
    if r.returncode != 0 or "warning: 1 completed run under" not in r.stderr:
        wrong.append(f"plot of a stale table: exit {r.returncode}, no warning of the run it misses "
                     f"({r.stderr.strip()[-200:]!r})")
    if (r := analysis("collect", root, "--out", table)).returncode != 0:
        wrong.append(f"collect exited {r.returncode}: {r.stderr.strip()[-200:]}")
    elif len(pd.read_parquet(table, columns=["step"])) != len(reference):
        wrong.append("the re-collected table does not hold the run's rows")
    r = analysis("plot", "--results", table, "--out", root / "plots")
    if r.returncode != 0 or "warning" in r.stderr:
        wrong.append(f"plot of a fresh table: exit {r.returncode}: {r.stderr.strip()[-200:]!r}")
    return "; ".join(wrong) or None


def after_fault(root: Path, expected: str, reference: pd.DataFrame) -> tuple[int, str | None]:
    """(rows mislabelled, problem) of the record as the fault left it."""
    d = run_dir(root)
    if d is None:
        return 0, None if expected == "running" else "no run directory"
    try:
        s = io.read_json_object(d / SUMMARY)
    except (OSError, io.DamagedFile) as e:
        return len(reference), f"summary unreadable after the fault: {e}"
    try:
        rows = len(pd.read_parquet(d / METRICS))
    except (OSError, ValueError):
        rows = 0
    temps = [p.name for p in d.glob(f".*{io.TEMP_SUFFIX}")]
    wrong = None
    if s.get("status") == "completed" and expected not in ("completed", "diverged"):
        expected = "completed"  # the run ended before the fault could reach it
    if s.get("status") != ("failed" if expected == "diverged" else expected):
        wrong = f"record says {s.get('status')!r} ({s.get('reason')}), expected {expected!r}"
    elif expected == "failed" and s.get("error_kind") != "io":
        wrong = f"failed without error_kind io: {s.get('reason')}"
    elif expected == "diverged" and (s.get("error_kind") != "diverged"
                                     or "non-finite error" not in str(s.get("reason"))):
        wrong = f"NaN error not recorded as diverged: {s.get('error_kind')}: {s.get('reason')}"
    elif expected == "completed" and (rows != len(reference) or s.get("attempts") != 1):
        wrong = f"completed with {rows} rows, attempts {s.get('attempts')}"
    elif temps and expected != "running":  # a killed writer's temp is expected; others not
        wrong = f"temp files left: {temps}"
    return (max(rows, 1) if wrong else 0), wrong


def finish(args: list[str], root: Path, done=lambda: True, plugin: Path | None = None) -> int:
    """The same command again until the run is completed (a run held by a process that
    is still going waits for it) and `done()`. Returns the attempts made."""
    for attempt in range(1, MAX_ATTEMPTS + 1):
        if status(root) == "completed" and done():
            return attempt - 1
        bench(args, root, plugin).wait()
    return MAX_ATTEMPTS


def compare(result: Path, reference: pd.DataFrame) -> tuple[int, int, str | None]:
    """(rows lost, rows mislabelled, problem) of one run directory against its reference:
    a row is lost when its step is missing, mislabelled when any value but wall time
    differs, it is marked partial, or the run is not recorded as completed."""
    d = run_dir(result)
    if d is None or status(result) != "completed":
        return len(reference), 0, f"not completed ({status(result)})"
    got = pd.read_parquet(d / METRICS).drop(columns=["wall_s"])
    leftovers = [p.name for p in d.iterdir() if p.name.endswith(io.TEMP_SUFFIX)
                 or p.name == CHECKPOINT]
    lost = len(set(reference["step"]) - set(got["step"]))
    merged = reference.merge(got, on="step", how="inner", suffixes=("", "_got"))
    bad = pd.Series(False, index=merged.index)
    for col in reference.columns.drop("step"):
        a, b = merged[col], merged[f"{col}_got"]
        bad |= ~((a == b) | (a.isna() & b.isna()))
    extra = len(got) - len(merged)
    mislabelled = int(bad.sum()) + extra + int(got["partial"].sum())
    problem = f"left behind: {leftovers}" if leftovers else None
    return lost, mislabelled, problem


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0, help="the campaign's own random draws")
    ap.add_argument("--root", type=Path, default=Path("outputs/faults"))
    ap.add_argument("--minutes", type=float, default=0.0,
                    help="stop after the trial that passes this wall time (0: run every trial)")
    ap.add_argument("--only", default=None, metavar="KIND[,KIND]",
                    help=f"draw only these faults (of {', '.join(FAULTS)})")
    args = ap.parse_args(argv)
    kinds = FAULTS if args.only is None else tuple(args.only.split(","))
    if unknown := sorted(set(kinds) - set(FAULTS)):
        print(f"error: --only {','.join(unknown)}: unknown fault; valid: {', '.join(FAULTS)}",
              file=sys.stderr)
        return 2
    rng = random.Random(args.seed)
    shutil.rmtree(args.root, ignore_errors=True)
    references: dict[tuple, pd.DataFrame] = {}
    where: dict[tuple, Path] = {}  # each reference's run directory, relative to its root
    injected, problems = Counter(), []
    lost = mislabelled = compared = 0
    can_mount = True
    t0 = time.time()
    for trial in range(args.trials):
        fault = rng.choice([f for f in kinds if can_mount or f != "enospc"] or list(SIGNALS))
        c = "plugin" if fault == "code_edit" else rng.randrange(len(CONFIGS))
        seed = rng.randrange(3)
        config = [*(PLUGIN_CONFIG if c == "plugin" else CONFIGS[c]), f"seed={seed}", "debug.sleep=0.05"]
        key = (c, seed)
        plugin = None
        ref_root = args.root / "reference" / f"config{c}-seed{seed}"  # no "=": Hydra parses it
        if key not in references:
            if c == "plugin":
                plugin = args.root / "reference" / "plugin"
                write_plugin(plugin)
            bench(config, ref_root, plugin).wait()
            references[key] = pd.read_parquet(run_dir(ref_root) / METRICS).drop(columns=["wall_s"])
            where[key] = run_dir(ref_root).relative_to(ref_root)
        root = args.root / "trials" / f"{trial:03d}-{fault}"
        repair, done, problem_now = config, (lambda: True), None
        if fault in SIGNALS:
            expected = signal_trial(config, root, SIGNALS[fault], rng)
        elif fault == "duplicate":
            expected = duplicate_trial(config, root, rng)
        elif fault == "symlink_lock":
            expected, problem_now = None, symlink_trial(config, root, where[key])
        elif fault == "stale_plot":
            expected, problem_now = None, stale_plot_trial(config, root, ref_root, references[key])
        elif fault == "nan_metric":
            episodes = int(next(a for a in config if a.startswith("task.episodes=")).split("=")[1])
            expected = "diverged"
            bench([*config, f"debug.nan_error_at={rng.randrange(episodes)}"], root).wait()
        elif fault == "code_edit":
            plugin = root / "plugin"
            root = root / "out"
            edit, problem_now = code_edit_trial(config, root, plugin, rng)
            expected = None
            if edit == "statement":  # the remedy the refusal names
                first = fingerprint(root)
                repair = [*config, "on_code_change=rerun"]
                done = lambda: fingerprint(root) != first  # noqa: E731
        elif (expected := enospc_trial(config, root)) is None:
            can_mount = False
            print("[faults] cannot mount a tmpfs here (needs root): ENOSPC trials left out")
            fault = rng.choice(list(SIGNALS))
            expected = signal_trial(config, root, SIGNALS[fault], rng)
        injected[fault] += 1
        bad_record, record_problem = (0, None) if expected is None else \
            after_fault(root, expected, references[key])
        if problem_now:
            bad_record, record_problem = len(references[key]), problem_now
        if fault == "enospc":  # the operator frees space; the same command repairs the run
            subprocess.run(["mount", "-o", "remount,size=64m", str(root)], check=True)
        attempts = finish(repair, root, done, plugin)
        rows_lost, rows_bad, problem = compare(root, references[key])
        rows_bad += bad_record
        problem = "; ".join(p for p in (record_problem, problem) if p) or None
        compared += 1
        lost += rows_lost
        mislabelled += rows_bad
        if rows_lost or rows_bad or problem:
            problems.append(f"trial {trial} ({fault}, {' '.join(config)}): lost {rows_lost}, "
                            f"mislabelled {rows_bad}{'; ' + problem if problem else ''}")
        if fault == "enospc":
            subprocess.run(["umount", "-l", str(root)], check=False)
        print(f"[faults] trial {trial + 1}/{args.trials}: {fault}, {attempts} more attempt(s), "
              f"lost {rows_lost}, mislabelled {rows_bad}", flush=True)
        if args.minutes and time.time() - t0 > 60 * args.minutes:
            print(f"[faults] stopped after {trial + 1} of {args.trials} trials (--minutes {args.minutes:g})")
            break
    print(f"\n| trials | faults injected | runs compared | rows lost | rows mislabelled | other problems | wall |\n"
          f"|---|---|---|---|---|---|---|\n"
          f"| {compared} | {', '.join(f'{k} {v}' for k, v in sorted(injected.items()))} | "
          f"{compared} | {lost} | {mislabelled} | {len(problems)} | {(time.time() - t0) / 60:.1f} min |")
    for p in problems:
        print(f"  {p}")
    return 1 if lost or mislabelled or problems else 0


if __name__ == "__main__":
    sys.exit(main())
