#!/usr/bin/env bash
# The leaderboard at its preset size (conf/experiment/leaderboard.yaml: 17 methods x
# 5 tasks x 5 seeds, about 5.3 core-hours here), one job per core, one torch thread each,
# checkpoints every 20 episodes: interrupt it any time and run it again; completed runs are
# skipped and unfinished ones resume. Then the table and figure are regenerated.
#
#   bash reproduction/leaderboard.sh            # from the repository root
#   SEEDS=20 bash reproduction/leaderboard.sh   # the 20-seed board (about 21 core-hours)
#
# Runs land in reproduction/runs/leaderboard/ (committed, so the study continues from any
# checkout); the board in reproduction/leaderboard/ (leaderboard.md, .png, .pdf).
# MNIST's files are read from $TPO_BENCH_MNIST_DIR, else downloaded: offline, point it at
# a copy first (e.g. TPO_BENCH_MNIST_DIR=/data/mnist), or the MNIST runs fail.
set -eu
cd "$(dirname "$0")/.."
root=${LEADERBOARD_ROOT:-reproduction/runs/leaderboard}
out=${LEADERBOARD_OUT:-reproduction/leaderboard}
python -m bench -m +experiment=leaderboard seeds="${SEEDS:-5}" threads=1 checkpoint_every=20 \
    hydra/launcher=local hydra.launcher.n_jobs="${JOBS:-2}" output_root="$root"
python analysis/collect.py "$root" --out "$out/results.parquet"
python analysis/leaderboard.py --results "$out/results.parquet" --out "$out"
