"""The reproduction of Target Policy Optimization (Kaddour 2026): which rows of the results
table belong to which paper result (experiments), its figures, the verdict rules, the
report (reproduction/REPRODUCTION.md, its figures in reproduction/figures/), the
rule-change log, and the paper's own numbers (paper_numbers.csv, paper_seeds.csv)."""
