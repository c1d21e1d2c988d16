"""Re-key runs recorded before the preset names left the config hash (contract.identity).

    python -m tools.migrate ROOT [ROOT ...] [--dry-run]

moves every `<task>/<algo>/<legacy hash>/seed=<n>` under ROOT to its current hash and
rewrites the hash inside (summary.json, config.json, metrics.parquet, checkpoint.pt), so
the runner finds (skips, resumes) it again. A run held by a live process, or whose new
place is taken, is left as it is and named; it exits 1 if any was. Run it again any
time: a run already under its current hash is left alone.

Tables written before (reproduction/results.parquet) are re-keyed as they are read
(analysis.rekey).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

if __name__ == "__main__" and not (__package__ or "").startswith("tpo_bench"):
    import tpo_bench.tools  # noqa: F401  (run by path or by a top-level name: the package its relative imports name)
    __package__ = "tpo_bench.tools"
from ..contract import io, schema
from ..contract.identity import config_hash, legacy_hash


class Unreadable(ValueError):
    """A file of the run that migrate would rewrite cannot be read; the message says which."""


def _read(path: Path) -> tuple[pd.DataFrame | None, dict | None, dict | None]:
    """(metrics, checkpoint state, summary) of a run, each None where absent; Unreadable
    for a damaged one, so nothing is rewritten in a run that cannot be rewritten whole."""
    metrics = state = summary = None
    if (path / schema.METRICS).exists():
        try:
            metrics = pd.read_parquet(path / schema.METRICS)
        except Exception as e:  # pyarrow raises several types for a torn or foreign file
            raise Unreadable(f"{schema.METRICS} unreadable ({type(e).__name__})") from None
    if (path / schema.CHECKPOINT).exists():
        from ..bench import checkpoint  # only here: reading a table needs no torch

        try:
            state = checkpoint.load(path)
        except checkpoint.CheckpointError:
            raise Unreadable(f"{schema.CHECKPOINT} is damaged or not a tpo-bench checkpoint; "
                             f"remove it (the run restarts from step 0) and migrate again") from None
    if (path / schema.SUMMARY).exists():
        try:
            summary = io.read_json_object(path / schema.SUMMARY)
        except (OSError, io.DamagedFile) as e:
            raise Unreadable(f"{schema.SUMMARY}: {e}") from None
    return metrics, state, summary


def _rewrite(path: Path, old: str, new: str) -> None:
    """The hash inside a run: the table's column, the checkpoint's identity, then the
    two JSON records (summary last: it is what collect reads first). Every file is read
    before the first is written (Unreadable: none is)."""
    df, state, summary = _read(path)
    if df is not None and "config_hash" in df.columns:
        io.write_parquet(path / schema.METRICS, df.assign(config_hash=new))
    if state is not None and isinstance(state.get("identity"), dict):
        import torch

        state["identity"]["config_hash"] = new
        with io.atomic_path(path / schema.CHECKPOINT) as tmp:
            torch.save(state, tmp)
    if summary is not None:
        run_dir = str(summary.get("run_dir", ""))
        io.write_json(path / schema.SUMMARY, {
            **summary, "config_hash": new, "legacy_config_hash": old,
            "run_dir": run_dir.replace(f"/{old}/", f"/{new}/") if run_dir else run_dir})


def check_run(path: Path) -> tuple[str, str]:
    """What migrate_run would do to one run directory, doing nothing."""
    try:
        config = io.read_json_object(path / schema.CONFIG)
        _read(path)
    except (OSError, io.DamagedFile, Unreadable) as e:
        return "left", f"{e}" if isinstance(e, Unreadable) else f"no readable {schema.CONFIG} ({e})"
    if schema.parse_run_dir(path).config_hash == config_hash(config):
        return "current", ""
    return "moved", f"would move to hash {config_hash(config)}"


def migrate_run(path: Path) -> tuple[str, str]:
    """(what happened, detail) for one run directory."""
    where = schema.parse_run_dir(path)
    try:
        config = io.read_json_object(path / schema.CONFIG)
    except (OSError, io.DamagedFile) as e:
        return "left", f"no readable {schema.CONFIG} ({e})"
    new = config_hash(config)
    if where.config_hash == new:
        return "current", new
    if where.config_hash != legacy_hash(config):
        return "left", (f"its folder says {where.config_hash}, its {schema.CONFIG} hashes to "
                        f"{legacy_hash(config)} (legacy) / {new}: not a run this tool wrote")
    target = schema.run_dir(path.parents[3], where.task, where.algo, new, where.seed)
    elsewhere = schema.find_run(path.parents[3], new, where.seed)
    if target.exists() or elsewhere is not None:
        return "left", f"{target if target.exists() else elsewhere} already holds this run"
    from ..bench import rundir  # only here: its checkpoint module needs torch

    rd = rundir.RunDir(path)
    holder = rd.acquire()
    if holder is not None:
        return "left", f"held by {rundir.describe(holder)}"
    try:
        try:
            _rewrite(path, where.config_hash, new)
        except Unreadable as e:
            return "left", str(e)
        target.parent.mkdir(parents=True, exist_ok=True)
        path.rename(target)  # under the lock: a runner cannot start on it mid-move
    finally:
        rd.release()
    if not any(path.parent.iterdir()):
        path.parent.rmdir()
    return "moved", str(target)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.migrate", description=__doc__.split("\n\n")[0])
    p.add_argument("roots", nargs="+", type=Path, metavar="ROOT", help="an output_root to re-key")
    p.add_argument("--dry-run", action="store_true", help="say what would move; move nothing")
    args = p.parse_args(argv)
    missing = [str(r) for r in args.roots if not r.is_dir()]
    if missing:
        print(f"error: ROOT {', '.join(missing)}: not a directory", file=sys.stderr)
        return 2
    counts = {"moved": 0, "current": 0, "left": 0}
    for root in args.roots:
        for path in schema.run_dirs(root):
            try:
                what, detail = check_run(path) if args.dry_run else migrate_run(path)
            except OSError as e:  # unreadable folder, a full disk: this run, not the rest
                what, detail = "left", f"{type(e).__name__}: {e}"
            counts[what] += 1
            if what != "current":
                print(f"[{what}] {path}: {detail}", file=sys.stderr if what == "left" else sys.stdout)
    verb = "would move" if args.dry_run else "moved"
    print(f"{verb} {counts['moved']}, already current {counts['current']}, left {counts['left']}")
    return 1 if counts["left"] else 0


if __name__ == "__main__":
    sys.exit(main())
