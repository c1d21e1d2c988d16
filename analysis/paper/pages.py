"""The generated parts of docs/reproducing.md, docs/leaderboard.md and the README's
results line, from committed data.

    python -m analysis.paper.pages            # rewrite every page's generated blocks
    python -m analysis.paper.pages --check    # exit 1 if a block differs from its data

A page keeps its prose; each block between `<!-- generated:NAME -->` and
`<!-- /generated:NAME -->` is rewritten: from reproduction/REPRODUCTION.md (the report's
verdicts, provenance and paired tests of the terminal-reward table), the runs' summary.json
under reproduction/runs/terminal (status, wall time), the paper's per-seed values (the
final-error rule's power) and reproduction/leaderboard/ (the board, and paired readings of its
runs). tests/test_pages.py regenerates them, so a number on a page cannot drift from data.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
if __name__ == "__main__" and not (__package__ or "").startswith("tpo_bench"):
    import tpo_bench.analysis.paper  # noqa: F401  (run by path or by a top-level name: the package its relative imports name)
    __package__ = "tpo_bench.analysis.paper"

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "reproduction" / "REPRODUCTION.md"
RUNS = ROOT / "reproduction" / "runs" / "terminal"
TABLE = ROOT / "reproduction" / "results.parquet"
BOARD = ROOT / "reproduction" / "leaderboard"
PAGES = {"reproducing": ROOT / "docs" / "reproducing.md", "leaderboard": ROOT / "docs" / "leaderboard.md",
         "readme": ROOT / "README.md"}
BLOCK = re.compile(r"(<!-- generated:(\w+) -->\n)(.*?)(<!-- /generated:\2 -->)", re.S)
POWER_SEEDS = (5, 9, 12, 15, 20)
POWER_DRAWS = 1000
ALPHA = 0.05


def cells(line: str) -> list[str]:
    """A markdown table row's cells, stripped (an escaped \\| stays inside its cell)."""
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def tables(markdown: str) -> list[list[dict]]:
    """Every markdown table in the text, each as its rows keyed by its header."""
    found, rows, header = [], [], None
    for line in markdown.splitlines() + [""]:
        if line.startswith("|"):
            row = cells(line)
            if header is None:
                header = row
            elif not set(line) <= set("|-: "):
                rows.append(dict(zip(header, row)))
        elif header is not None:
            found.append(rows)
            rows, header = [], None
    return found


def section_tables(markdown: str, section: str) -> list[list[dict]]:
    """The markdown tables of one report section (`## ... (`section`)`), as row dicts."""
    return tables(markdown.split(f"(`{section}`)", 1)[1].split("\n## ", 1)[0])


def md(rows: list[dict], cols: list[str]) -> str:
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    return "\n".join(out + ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows])


def verdict_block(report: str) -> str:
    numbers = section_tables(report, "terminal_h_sweep")[0]
    rows = [{"H": re.search(r"H=(\d+)", r["setting"]).group(1),
             "match": re.search(r"match=(\w+)", r["setting"]).group(1), OURS: r["ours"], **r} for r in numbers]
    return md(rows, ["H", "match", "algorithm", "paper", OURS, "seeds", "verdict", "provenance"])


OURS = "ours: mean ± SE"


def paired_block(report: str) -> str:
    readings = [t for t in section_tables(report, "terminal_h_sweep") if t and "comparison" in t[0]]
    if not readings:
        return "No paired comparison yet: no H has runs of TPO and another method on one seed."
    cols = list(readings[0][0])
    return md(readings[0], cols)


def registered_block(report: str) -> str:
    """The report's registered tests of the central claim: each one's registration, seeds run
    per H, tests of complete H and outcome, then the outcome over both."""
    from .report import COMBINED, REGISTERED_HEAD
    if REGISTERED_HEAD not in report or COMBINED not in report:
        return "The report has no registered test yet: regenerate it."
    body = report[report.index(REGISTERED_HEAD):]
    end = body.index(COMBINED)
    return body[:end + body[end:].index("\n")].strip()


def claim_line(report: str) -> str:
    """One line for the README: the registered outcome and the seeds run toward it."""
    from .report import ASSURED, COMBINED, FIXED, OUT_OF_REACH, OVER_BOTH, REGISTERED
    block = registered_block(report)
    if COMBINED not in block:
        return "The registered test of the central claim has no outcome yet."
    outcome = block.split(COMBINED, 1)[1].strip().removesuffix(".**")
    seeds = "; ".join(f"against {reg.other.upper()}, " + ", ".join(
        f"H = {r['H']}: {r['seeds run (of 20)']}" for r in rows) for reg, rows in zip(REGISTERED, tables(block)))
    found = re.findall(rf"({re.escape(FIXED)} H = [\d, ]+\(all \d+ seeds\)).*? So (against [A-Z]+, "
                       rf"{re.escape(OVER_BOTH)}, (?:{re.escape(OUT_OF_REACH)}|{re.escape(ASSURED)}))", block)
    fixed = "".join(f". {by}: {then}" for by, then in found)
    return (f"**The central claim** (under terminal reward TPO's error is the lowest at every "
            f"H; registered tests of TPO against GRPO at H = 7–10 and against PPO at H = 7 and 8, "
            f"where the paper's prompt-matched PPO is below its GRPO; 20 seeds per method and H): {outcome}. "
            f"Seeds run of 20: {seeds}{fixed} ([the tests](docs/reproducing.md#the-registered-test)).")


def summaries(root: Path = RUNS) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(root.glob("*/*/*/seed=*/summary.json"))]


def status_block(root: Path = RUNS) -> str:
    runs = summaries(root)
    done = {}
    for s in runs:
        if s.get("status") == "completed":
            done.setdefault((s["task"], s["algo"], _match(root, s), s["config_hash"]), []).append(int(s["seed"]))
    from .report import seed_list

    lines = [f"- `{t}` {a}, {m}-matched: {len(v)} completed (seeds {seed_list(v)})"
             for (t, a, m, _), v in sorted(done.items())]
    lines += [f"- `{s['task']}` {s['algo']} seed {s['seed']}: not completed, metrics logged to "
              f"episode {_last_step(root, s)} (resumes from its last checkpoint)"
              for s in runs if s.get("status") != "completed"]
    return "\n".join(lines)


def _run_dir(root: Path, summary: dict) -> Path:
    return root / summary["task"] / summary["algo"] / summary["config_hash"] / f"seed={summary['seed']}"


def _match(root: Path, summary: dict) -> str:
    """The run's matching as its config.json records it (prompt- or interaction-)."""
    try:
        match = json.loads((_run_dir(root, summary) / "config.json").read_text()).get("match")
    except (OSError, ValueError):
        match = None
    return {"prompts": "prompt", "interactions": "interaction"}.get(match, "?")


def _last_step(root: Path, summary: dict) -> str:
    """The last episode a committed unfinished run logged (its summary, written at start
    or at a kill, may say `running` with no final row)."""
    path = _run_dir(root, summary) / "metrics.parquet"
    try:
        return str(int(pd.read_parquet(path, columns=["step"])["step"].max()))
    except (OSError, ValueError, KeyError):
        return "?"


def cost_block(root: Path = RUNS, table: Path = TABLE) -> str:
    """Training wall time (the last logged wall_s) of each completed terminal-reward run:
    the committed table's and those under root, apart (they ran under different loads)."""
    from ..rekey import rekey_table

    by, here = {}, set()
    for s in summaries(root):
        wall = (s.get("final") or {}).get("wall_s")
        if s.get("status") == "completed" and wall:
            here.add((s["config_hash"], int(s["seed"])))
            match = json.loads((root / s["task"] / s["algo"] / s["config_hash"] / f"seed={s['seed']}"
                                / "config.json").read_text()).get("match", "")
            by.setdefault((root.relative_to(ROOT).as_posix(), s["task"], s["algo"], match),
                          []).append(wall / 3600)
    d = pd.read_parquet(table)
    d = rekey_table(d[d["task.name"].astype(str).str.startswith("reverse_h")])[0]
    last = d.sort_values("step").groupby(["config_hash", "seed"]).tail(1)
    last = last[[(h, int(s)) not in here for h, s in zip(last["config_hash"], last["seed"])]]
    for (t, a, m), w in last.groupby(["task.name", "algo.name", "match"])["wall_s"]:
        by[(table.relative_to(ROOT).as_posix(), t, a, m)] = list(w / 3600)
    rows = [{"runs from": f"`{src}`", "task": t, "method": a, "match": m, "runs": len(v),
             "min h": f"{min(v):.2f}", "median h": f"{np.median(v):.2f}", "max h": f"{max(v):.2f}"}
            for (src, t, a, m), v in sorted(by.items())]
    return md(rows, list(rows[0]))


def power_block(seed_counts=POWER_SEEDS, n_draws: int = POWER_DRAWS) -> str:
    """How often the final-error rule says reproduced on redraws (with replacement) of the
    paper's own per-seed values, each row with the margin the report judges it by."""
    from .. import stats
    from . import report
    from . import verdicts as V

    seeds = report.load_paper_seeds()
    tpo, grpo = np.asarray(seeds["terminal-tpo-H10"]), np.asarray(seeds["terminal-grpo-H10"])
    term = V.MARGINS["terminal_error"]
    rows = {"7.4": V.replicate_margin(term, tpo), "50.4": V.replicate_margin(term, grpo)}

    def passes(values, k, printed):
        rng = np.random.default_rng(0)
        paper = V.parse_paper(printed)
        got = [V.number_verdict(paper, rows[printed],
                                *stats.t_interval(values[rng.integers(0, len(values), k)], V.LEVEL), k)
               for _ in range(n_draws)]
        return f"{np.mean([g == V.REPRODUCED for g in got]):.1%}"

    out = [{"seeds": k, "TPO on TPO's row": passes(tpo, k, "7.4"),
            "GRPO on GRPO's row": passes(grpo, k, "50.4"),
            "TPO × 3 on TPO's row": passes(3 * tpo, k, "7.4"),
            "GRPO on TPO's row": passes(grpo, k, "7.4"), "TPO on GRPO's row": passes(tpo, k, "50.4")}
           for k in seed_counts]
    return md(out, list(out[0]))


def board_block(board: Path = BOARD) -> str:
    return (board / "leaderboard.md").read_text().strip()


def readings_block(board: Path = BOARD) -> str:
    """Per task: the lowest final error against the runner-up, and TPO against GRPO, as
    one-sided paired sign-flip tests over the seeds (a seed fixes weights and prompts)."""
    from .. import stats
    from ..collect import read_results
    from ..leaderboard import METHOD, TASK, scores_from_table

    df = read_results(board / "results.parquet", "nothing to read")
    runs = scores_from_table(df)[0]  # what the board ranks: one config per task and method
    lines = []
    for task, g in runs.groupby(TASK, sort=True):
        wide = g.pivot_table(index="seed", columns=METHOD, values="final_error") * 100
        means = wide.mean().sort_values()
        pairs = [(means.index[0], means.index[1], "lowest mean, against the next")]
        if {"tpo", "grpo"} <= set(wide.columns):
            pairs.append(("tpo", "grpo", "TPO against GRPO"))
        for a, b, what in pairs:
            both = wide[[a, b]].dropna()
            p = stats.paired_sign_flip_test(both[a], both[b])
            n = len(both)
            verdict = (f"{a} lower, p = {p:.2g}" if p < ALPHA
                       else f"not significant at {n} seeds (p = {p:.2g})")
            lines.append(f"- `{task}`, {what}: {a} {means[a]:.2f} % vs {b} {means[b]:.2f} % "
                         f"({n} paired seeds): {verdict}")
    return "\n".join(lines)


def margins_block() -> str:
    """Every family's margin as the rules declare it (verdicts.MARGINS), with its derivation."""
    from .report import margin_rows
    return md(margin_rows(), ["family", "δ", "derived from the paper's numbers"])


def reproducing_blocks(report: Path = REPORT, runs: Path = RUNS) -> dict:
    return {"verdicts": lambda: verdict_block(report.read_text()),
            "registered": lambda: registered_block(report.read_text()),
            "paired": lambda: paired_block(report.read_text()),
            "status": lambda: status_block(runs), "cost": lambda: cost_block(runs),
            "power": power_block, "margins": margins_block}


BLOCKS = {"reproducing": reproducing_blocks(), "leaderboard": {"board": board_block,
                                                               "readings": readings_block},
          "readme": {"claim": lambda: claim_line(REPORT.read_text())}}


def write_page(name: str, blocks: dict | None = None, check: bool = False) -> bool:
    """Rewrite (or with check, only compare) one page's generated blocks; True if stale."""
    path = PAGES[name]
    text = path.read_text()
    new = fill(text, blocks or BLOCKS[name])
    if new != text and not check:
        path.write_text(new)
    return new != text


# Blocks another command writes (it imports code this module may not): left as they are here.
FOREIGN = {"queue": "python -m tools.study status --page docs/reproducing.md"}


def fill(text: str, blocks: dict, only=None) -> str:
    """text with each generated block (of only, if given) rewritten; a block the page
    names but blocks lacks is an error, unless another command writes it (FOREIGN)."""
    def sub(m):
        name = m.group(2)
        if only is not None and name not in only or only is None and name in FOREIGN:
            return m.group(0)
        if name not in blocks:
            raise KeyError(f"no generator for block {name!r}; valid: {', '.join(blocks)}")
        return f"{m.group(1)}{blocks[name]().rstrip()}\n{m.group(4)}"
    return BLOCK.sub(sub, text)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    parser.add_argument("--page", choices=sorted(PAGES), action="append", help="default: all")
    args = parser.parse_args(argv)
    stale = [str(PAGES[n]) for n in args.page or sorted(PAGES) if write_page(n, check=args.check)]
    if args.check and stale:
        print(f"error: generated blocks out of date in {', '.join(stale)}: run "
              f"`python -m analysis.paper.pages`", file=sys.stderr)
        return 1
    print(f"wrote {', '.join(stale)}" if stale else "generated blocks up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
