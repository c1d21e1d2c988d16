"""Post-processing of sweep outputs, in three rooms.

Generic (this folder; any results table): collect (runs -> one table; read_results),
stats (seed means, standard errors, steps to a threshold, intervals), configs (conf/
defaults a run is compared with), style (colours, sizes, legends), labels (line labels
and titles), plot (a figure per task and the summary table), leaderboard.

analysis.paper, the reproduction of Kaddour (2026): experiments (which rows belong to
which result), figures, verdicts, report (writes REPRODUCTION.md), rule_log, and the
paper's numbers and per-seed values as CSV. analysis.tuning: the optuna studies' report
and tuned beside untuned.

Imports go one way: paper and tuning use the generic modules (paper also tuning.tuned);
nothing generic imports them, except plot's --figure, which draws analysis.paper.figures.
Run directories' facts and the atomic writer come from contract/.
"""
if __name__ == "analysis":  # the top-level name: this module is tpo_bench.analysis
    import tpo_bench

    tpo_bench.alias(__name__)
    __package__ = f"tpo_bench.{__name__}"  # what follows resolves its imports there
