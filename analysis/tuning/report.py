"""Optimisation history and parameter importance of each optuna study (hydra/sweeper=optuna).

    python analysis/tuning/report.py [--storage URL_OR_PATH ...] [--out DIR]
    python -m analysis.tuning.report ...

--storage takes optuna storage URLs, SQLite files or folders of them (default: every
outputs/.optuna/*.db). Per study it prints the trials by outcome and the best trial, and
writes to --out (default outputs/plots/tune/): <study>_history.png (objective per trial,
best so far; diverged/pruned and failed trials marked along the top), <study>_trials.csv,
and <study>_importance.png once the study has MIN_COMPLETE complete trials (parameter
importance from fewer is noise; the report says so instead).
"""
from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

if __name__ == "__main__" and not (__package__ or "").startswith("tpo_bench"):
    import tpo_bench.analysis.tuning  # noqa: F401  (run by path or by a top-level name: the package its relative imports name)
    __package__ = "tpo_bench.analysis.tuning"
from ...contract import io, schema  # noqa: E402

DEFAULT_DIR = Path(schema.OUTPUT_ROOT) / ".optuna"
MIN_COMPLETE = 5
YLABEL = {"final": "final error", "auc": "mean error over the run (AUC)"}
MARKS = {"diverged": ("x", "tab:red"), "failed": ("v", "tab:gray"), "invalid": ("v", "black"),
         "interrupted": ("|", "tab:orange")}


def storages(args: list[str]) -> list[str]:
    out = []
    for a in args or [str(DEFAULT_DIR)]:
        p = Path(a)
        if "://" in a:
            out.append(a)
        elif p.is_dir():
            out += [f"sqlite:///{f.absolute()}" for f in sorted(p.glob("*.db"))]
        elif p.is_file():
            out.append(f"sqlite:///{p.absolute()}")
        else:
            print(f"warning: {a}: no such storage file or folder", file=sys.stderr)
    return out


def outcome(trial, interrupted: set) -> str:
    """complete | diverged | failed | invalid | interrupted | running | waiting."""
    if trial.number in interrupted:
        return "interrupted"
    if trial.state.name == "PRUNED":
        return "diverged"
    if trial.state.name == "FAIL":
        return trial.user_attrs.get("outcome", "failed")
    return trial.state.name.lower()


def plot_history(study, kinds: dict, path: Path) -> None:
    trials = study.get_trials(deepcopy=False)
    done = [t for t in trials if kinds[t.number] == "complete"]
    fig, ax = plt.subplots(figsize=(6.4, 4))
    if done:
        x, y = [t.number for t in done], [t.value for t in done]
        ax.scatter(x, y, s=18, color="tab:blue", label="trial (seed mean)")
        best = [min(y[: i + 1]) for i in range(len(y))]
        ax.step(x, best, where="post", color="tab:green", label="best so far")
    top = ax.get_ylim()[1] if done else 1.0
    for kind, (marker, color) in MARKS.items():
        xs = [t.number for t in trials if kinds[t.number] == kind]
        if xs:
            ax.scatter(xs, [top] * len(xs), marker=marker, color=color, s=40, clip_on=False,
                       label=f"{kind} ({len(xs)})")
    setup = study.user_attrs.get("setup", {})
    ax.set_xlabel("trial")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(YLABEL.get(setup.get("objective"), "objective") + ", seed mean")
    ax.set_title(f"{study.study_name}: {len(trials)} trials x {len(setup.get('seeds', []))} seeds "
                 f"x {setup.get('episodes')} episodes", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    io.save_figure(fig, path, dpi=120)
    plt.close(fig)


def plot_importance(study, n_complete: int, path: Path) -> str:
    """Draw the importances; returns a line for the printed report."""
    import optuna

    if n_complete < MIN_COMPLETE:
        return f"importance: needs {MIN_COMPLETE} complete trials, has {n_complete}; not drawn"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # optuna's experimental-feature warnings
            imp = optuna.importance.get_param_importances(study)
    except Exception as e:  # e.g. no parameter varies across the complete trials
        return f"importance: not computable ({type(e).__name__}: {e})"
    if not imp:
        return "importance: no parameter varies across the complete trials"
    names = list(imp)[::-1]
    fig, ax = plt.subplots(figsize=(6.4, 0.5 + 0.4 * len(names)))
    ax.barh(names, [imp[n] for n in names], color="tab:blue")
    ax.set_xlabel("importance (normalised)")
    ax.set_title(f"{study.study_name}: parameter importance ({n_complete} complete trials)", fontsize=9)
    fig.tight_layout()
    io.save_figure(fig, path, dpi=120)
    plt.close(fig)
    return "importance: " + ", ".join(f"{k} {v:.2f}" for k, v in imp.items())


def report(storage: str, name: str, out: Path, stem: str) -> None:
    """Print one study's summary; its files are <out>/<stem>_*."""
    import optuna

    study = optuna.load_study(study_name=name, storage=storage)
    interrupted = set(study.user_attrs.get("interrupted", []))
    trials = study.get_trials(deepcopy=False)
    kinds = {t.number: outcome(t, interrupted) for t in trials}
    counts = {k: list(kinds.values()).count(k) for k in dict.fromkeys(kinds.values())}
    print(f"{name} ({storage}): {len(trials)} trials: "
          + ", ".join(f"{n} {k}" for k, n in counts.items()))
    out.mkdir(parents=True, exist_ok=True)
    study.trials_dataframe().assign(outcome=lambda d: d["number"].map(kinds)).to_csv(
        out / f"{stem}_trials.csv", index=False)
    plot_history(study, kinds, out / f"{stem}_history.png")
    n_complete = counts.get("complete", 0)
    if n_complete:
        best = study.best_trial
        print(f"  best: trial {best.number}, {best.value:.4g}: "
              + " ".join(f"{k}={v}" for k, v in best.params.items()))
    print("  " + plot_importance(study, n_complete, out / f"{stem}_importance.png"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage", nargs="*", default=[],
                        help=f"storage URLs, .db files or folders (default: {DEFAULT_DIR}/*.db)")
    parser.add_argument("--out", default=f"{schema.OUTPUT_ROOT}/plots/tune", help="folder for the figures")
    args = parser.parse_args(argv)
    try:
        import optuna
    except ImportError:
        print("error: needs optuna: pip install -e '.[tune]'", file=sys.stderr)
        return 2
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    stems: list[str] = []
    for storage in storages(args.storage):
        for name in optuna.study.get_all_study_names(storage):
            # Two storages may hold studies of one name: number the later ones' files.
            stem = name if name not in stems else f"{name}_{stems.count(name) + 1}"
            stems.append(name)
            report(storage, name, Path(args.out), stem)
    if not stems:
        print("error: no optuna study found (run python -m bench -m hydra/sweeper=optuna ...)",
              file=sys.stderr)
        return 1
    print(f"figures in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
