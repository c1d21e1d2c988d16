"""Fault campaign (a benchmark, not a test): N randomised trials of a fault on a short
demo run, each followed by the same command again until the run says `completed`, then
every run directory checked against an uninterrupted reference of its config.

    python -m bench.faults --trials 100 --root outputs/faults

Faults: SIGKILL, SIGTERM, SIGINT at a random moment; a duplicate launch; ENOSPC (the
output root on a 512 KiB tmpfs; needs root, else left out and said so). Right after the
fault the record must be truthful: `completed` and equal to the reference when a process
finished it; `interrupted` with a checkpoint after SIGTERM/SIGINT; `failed` with
`error_kind: io` after ENOSPC; no temp file left behind. After re-running until
completed, every row must equal the reference's. Prints trials, faults, runs compared,
rows lost and mislabelled; exits 1 if any row was lost or mislabelled.
"""
from __future__ import annotations

import argparse
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pandas as pd

from contract import io
from contract.schema import CHECKPOINT, METRICS, SUMMARY

SIGNALS = {"sigkill": signal.SIGKILL, "sigterm": signal.SIGTERM, "sigint": signal.SIGINT}
FAULTS = (*SIGNALS, "duplicate", "enospc")
# A handful of configs, so that references are shared between trials.
CONFIGS = [
    ["task=demo", "algo=tpo", "task.episodes=16", "checkpoint_every=4"],
    ["task=demo", "algo=grpo", "task.episodes=12", "checkpoint_every=3"],
    ["task=demo", "algo=ppo", "task.episodes=20", "checkpoint_every=5"],
    ["task=demo", "algo=dg", "task.episodes=20", "checkpoint_every=2"],
    ["task=demo", "algo=pg", "task.episodes=14", "checkpoint_every=7"],
]
COMMON = ["task.batch_size=8", "task.sequence_length=4", "threads=1", "log_every=1000"]
MAX_ATTEMPTS = 6


def bench(args: list[str], root: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "bench", *args, *COMMON, f"output_root={root}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run_dir(root: Path) -> Path | None:
    found = [p.parent for p in root.rglob(SUMMARY)]
    return found[0] if len(found) == 1 else None


def status(root: Path) -> str | None:
    d = run_dir(root)
    try:
        return io.read_json_object(d / SUMMARY).get("status") if d else None
    except (OSError, io.DamagedFile):
        return "damaged"


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
    if s.get("status") == "completed" and expected != "completed":
        expected = "completed"  # the run ended before the fault could reach it
    if s.get("status") != expected:
        wrong = f"record says {s.get('status')!r} ({s.get('reason')}), expected {expected!r}"
    elif expected == "failed" and s.get("error_kind") != "io":
        wrong = f"failed without error_kind io: {s.get('reason')}"
    elif expected == "completed" and (rows != len(reference) or s.get("attempts") != 1):
        wrong = f"completed with {rows} rows, attempts {s.get('attempts')}"
    elif temps and expected != "running":  # a killed writer's temp is expected; others not
        wrong = f"temp files left: {temps}"
    return (max(rows, 1) if wrong else 0), wrong


def finish(args: list[str], root: Path) -> int:
    """The same command again until the run is completed (a run held by a process that
    is still going waits for it). Returns the attempts made."""
    for attempt in range(1, MAX_ATTEMPTS + 1):
        if status(root) == "completed":
            return attempt - 1
        bench(args, root).wait()
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
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    shutil.rmtree(args.root, ignore_errors=True)
    references: dict[int, pd.DataFrame] = {}
    injected, problems = Counter(), []
    lost = mislabelled = compared = 0
    can_mount = True
    t0 = time.time()
    for trial in range(args.trials):
        c = rng.randrange(len(CONFIGS))
        seed = rng.randrange(3)
        config = [*CONFIGS[c], f"seed={seed}", "debug.sleep=0.05"]
        key = (c, seed)
        if key not in references:
            ref_root = args.root / "reference" / f"config{c}-seed{seed}"  # no "=": Hydra parses it
            bench(config, ref_root).wait()
            references[key] = pd.read_parquet(run_dir(ref_root) / METRICS).drop(columns=["wall_s"])
        fault = rng.choice([f for f in FAULTS if can_mount or f != "enospc"])
        root = args.root / "trials" / f"{trial:03d}-{fault}"
        if fault in SIGNALS:
            expected = signal_trial(config, root, SIGNALS[fault], rng)
        elif fault == "duplicate":
            expected = duplicate_trial(config, root, rng)
        elif (expected := enospc_trial(config, root)) is None:
            can_mount = False
            print("[faults] cannot mount a tmpfs here (needs root): ENOSPC trials left out")
            fault = rng.choice(list(SIGNALS))
            expected = signal_trial(config, root, SIGNALS[fault], rng)
        injected[fault] += 1
        bad_record, record_problem = after_fault(root, expected, references[key])
        if fault == "enospc":  # the operator frees space; the same command repairs the run
            subprocess.run(["mount", "-o", "remount,size=64m", str(root)], check=True)
        attempts = finish(config, root)
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
    print(f"\n| trials | faults injected | runs compared | rows lost | rows mislabelled | other problems | wall |\n"
          f"|---|---|---|---|---|---|---|\n"
          f"| {args.trials} | {', '.join(f'{k} {v}' for k, v in sorted(injected.items()))} | "
          f"{compared} | {lost} | {mislabelled} | {len(problems)} | {(time.time() - t0) / 60:.1f} min |")
    for p in problems:
        print(f"  {p}")
    return 1 if lost or mislabelled or problems else 0


if __name__ == "__main__":
    sys.exit(main())
