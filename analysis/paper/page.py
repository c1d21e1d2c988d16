"""The comparison page (docs/figures.md): each of the paper's figures redrawn in its form,
beside a description of the paper's own, with our seed counts and the verdicts of the
paper's numbers read off that figure (the report's rules: analysis/paper/report.py).

    python analysis/plot.py --figure all --add-runs reproduction/runs/terminal \
        --add-runs reproduction/runs/llm --results reproduction/results.parquet \
        --out reproduction/figures --page docs/figures.md

The page links the PNGs where they are drawn (one copy of each figure; the docs site's hook,
docs/hooks/generated.py, serves reproduction/figures/ beside the page).
"""
from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from ..collect import completed
from . import experiments, figures, paper_figures
from . import report as R
from ..style import DPI
from ...contract import io

SHOWN = ["algorithm", "setting", "metric", "paper", "ours", "seeds", "verdict"]
# The paper numbers each figure shows: (experiment of paper_numbers.csv, filter on its rows).
NUMBERS = {
    "hero": [("mnist", {"algo": ("tpo", "grpo", "dg"), "metric": ("final_error_pct",)}),
             ("terminal_h_sweep", {"algo": ("tpo", "grpo", "dg"), "H": ("10",), "match": ("prompts",)})],
    "gradient_norms": [], "all_fail": [], "multiepoch": [],
    "llm": [("llm_gsm8k", {}), ("llm_graph_color", {})],
}


def numbers(name: str, df: pd.DataFrame, paper: pd.DataFrame, seeds: dict) -> list[dict]:
    spec = paper_figures.PAPER[name]
    blocks = NUMBERS.get(name, [(spec.experiment, {})])
    lines = []
    for exp, cond in blocks:
        rows = paper[(paper["experiment"] == exp) & (paper["kind"] == "number")]
        for key, allowed in cond.items():
            rows = rows[rows[key].isin(allowed)]
        if rows.empty:
            continue
        sel = experiments.select(df, exp) if exp in experiments.EXPERIMENTS else df.iloc[:0]
        lines += [R.number_line(r, sel, seeds) for _, r in rows.iterrows()]
    return lines



def section(name: str, df, out_page: Path, fig_dir: Path, lines: list[dict],
            seeds_png: Path | None) -> str:
    spec = paper_figures.PAPER[name]
    info = {}
    paths = paper_figures.draw(name, df, fig_dir, info=info)
    drawn = info["drawn"]
    for path in paths:
        print(f"wrote {path}")
    pngs = [p for p in paths if p.suffix == ".png"]
    text = [f"## Figure {spec.number}: `{name}`", "",
            f"**The paper's figure.** {spec.paper}", ""]
    for png in pngs:
        rel = Path(os.path.relpath(png, out_page.parent)).as_posix()
        what = "Ours, in the paper's form" if png.stem == name else "Companion: our runs not in the paper's figure"
        text += [f"**{what}** (`{png.as_posix()}`):", "", f"![{png.stem}]({rel})", ""]
    if seeds_png is not None:  # the paper's per-seed values are known: ours beside them
        rel = Path(os.path.relpath(seeds_png, out_page.parent)).as_posix()
        text += [f"**Per seed, ours beside the paper's** (`{seeds_png.as_posix()}`: every "
                 "configuration whose paper seeds are known):", "", f"![{seeds_png.stem}]({rel})", ""]
    text += [f"**Seeds per line.** {paper_figures.seed_note(drawn)}.", ""]
    if lines:
        shown = [{k: l[k] for k in SHOWN} for l in lines]
        text += ["**The paper's numbers read off this figure, with our verdicts** (rules: "
                 "`REPRODUCTION.md`):", "", R.md_table(shown), ""]
    else:
        text += ["The paper prints no number of its own for this figure in our table.", ""]
    return "\n".join(text)


def intro() -> list[str]:
    """The page's opening paragraphs: what each figure shows and says, how it is made."""
    return ["# The paper's figures, redrawn", "",
            "Each of the paper's 17 figures drawn from our committed runs in the paper's form: "
            "its panels, methods, colours and line styles (TPO blue, solid and thickest; GRPO "
            "orange; DG red, dashed; one look per method in every figure, ours included: "
            "`analysis/style.py`), axis ranges, smoothing and panel letters, with ± 1 SE bands "
            "over seeds. Beside each, the paper's figure in words, our seed counts and the "
            "verdicts of the paper's numbers it shows. Runs the paper's figure does not have "
            "(other methods, other configurations) are in its companion figure. Each line the "
            "paper draws is drawn or named inside its panel: a panel we have not run says so, "
            "and a line of the paper's a panel lacks is named (\"PPO: not run\"). Inside a panel "
            "too: lines drawn from runs of the other matching (\"TPO: prompt-matched runs (same "
            "configuration)\"), lines of runs still under way, drawn as far as they got and "
            "never judged (\"episodes 0–500 of 2,000, running\"), and lines that mix learning "
            "rates. Such a note sits where it hides the fewest pixels of the panel's lines, "
            "then of its bands, broken into shorter lines where that helps "
            "(`analysis/note.py`), and is drawn beneath the lines, so a line that no spot "
            "clears shows through it. The caption line under each figure gives our seeds per line, per panel "
            "where they differ between panels, and the paper's; a count below the paper's is "
            "starred.", "",
            "Generated by `python analysis/plot.py --figure all --results "
            "reproduction/results.parquet --add-runs reproduction/runs/terminal --add-runs "
            "reproduction/runs/llm --out reproduction/figures --page docs/figures.md`; do not "
            "edit by hand.", "",
            "Your own runs: `python analysis/plot.py --results outputs/results.parquet` draws one "
            "figure per task (method names in the legend and the table, or yours with `--labels "
            "tpo=Ours,grpo=GRPO`; `--methods tpo,grpo` and `--where H=10` pick the lines, a "
            "key filtering the column it names, H without `reward=` the terminal-reward tasks "
            "only; a "
            "method's configuration with the most seeds is its line, `--all-configs` draws "
            "every one), a PNG of at least 1,500 px at 300 dpi or more beside a PDF, and prints "
            "per task a table in percent, best line first (final error = error at the last "
            "step). Given the committed table without `--add-runs`, it also reads the "
            "committed runs beside it (`reproduction/runs/`: terminal, dense, mechanism, llm); "
            "with `--figure`, also the runs under way there and under `--add-runs`, drawn as "
            "far as they got.", ""]


def write(df: pd.DataFrame, out_page: Path, fig_dir: Path) -> Path:
    """Draw every paper figure into fig_dir and the page that links them."""
    paper, seeds = R.load_paper(), R.load_paper_seeds()
    head = intro()
    # the verdicts: from completed runs only (a run under way is drawn, never judged)
    done = completed(df)
    lines = {name: numbers(name, done, paper, seeds) for name in paper_figures.ORDER}
    groups = R.seed_figure_groups(lines.items(), seeds)
    seeds_png = (figures.draw_seed_distributions([g for _, g in groups.values()], R.SEEDS_TITLE,
                                                 fig_dir, dpi=DPI)[0] if groups else None)
    shown = {name for name, ls in lines.items() if any(l["_group"] in groups and l["_per_seed"] for l in ls)}
    body = [section(name, df, out_page, fig_dir, lines[name], seeds_png if name in shown else None)
            for name in paper_figures.ORDER]
    io.write_text(out_page, "\n".join(head + body))
    return out_page
