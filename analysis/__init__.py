"""Post-processing of sweep outputs, in three rooms.

Generic (this folder; any results table):
    collect   gather completed runs into one table; read_results, what every reader checks
    stats     seed means, standard errors, steps to a threshold, intervals
    configs   conf/ defaults a run is compared with; one configuration out of several
    style     colours, line styles, text sizes, the log floor, the value formatter, legends
    labels    line labels and titles from the table's config columns
    plot      one figure per task and the summary table (--figure: the paper's figures)

analysis.paper: the reproduction of Kaddour (2026)
    experiments  which rows belong to which paper result
    figures      the paper's figures, declared panel by panel
    verdicts     the verdict rules; report  writes reproduction/REPRODUCTION.md
    rule_log     which verdicts a rule change moved
    paper_numbers.csv, paper_seeds.csv  the paper's printed numbers and per-seed values

analysis.tuning: the optuna studies
    report    history and importance plots per study; tuned  tuned beside untuned

Imports go one way: paper and tuning use the generic modules, paper uses tuning.tuned
for its "tuned beside untuned" section; nothing generic imports them, except plot's
--figure, which draws analysis.paper.figures. The facts of a run directory and the atomic
writer come from contract/.
"""
