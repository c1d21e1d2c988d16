#!/usr/bin/env bash
# The paper's headline at its own seed count: terminal reward, reverse copy,
# V = 2, K = 8, B = 100, 2000 episodes, H = 10, prompt-matched, 20 seeds of TPO, GRPO and
# DG; then GRPO-no-KL, PPO and interaction-matched DG at H = 10. One job per core, one
# torch thread each, checkpoints every 100 episodes: interrupt it any time and run it
# again; completed runs are skipped and unfinished ones resume.
#
#   bash reproduction/headline.sh            # from the repository root
#
# Runs land in reproduction/runs/terminal/ (committed, so the study continues from any
# checkout); `python analysis/collect.py reproduction/runs/terminal` gathers them.
set -u
cd "$(dirname "$0")/.."
root=${HEADLINE_ROOT:-reproduction/runs/terminal}
# Its runs so far (and their checkpoints) were recorded under torch's AVX2 kernels: the
# remaining seeds keep to them, so every seed reproduces bit for bit on any x86 machine
# with AVX2 (an AVX512 one would differ in the last bits; README, "Randomness").
export ATEN_CPU_CAPABILITY=${ATEN_CPU_CAPABILITY:-avx2}
common="task=reverse_h10 threads=1 checkpoint_every=100 hydra/launcher=local hydra.launcher.n_jobs=${JOBS:-2} output_root=$root"
# `seed=` before `algo=`: seed-major order, so that at any stopping point the methods
# have the same seeds. Seeds 0-2 of TPO and GRPO are in reproduction/results.parquet
# (the ablations' runs, same config hashes), so they come last.
label="match=prompts"  # no +experiment: its sweep order is algo-major
python -m bench -m 'seed=range(20)' algo=dg $label $common
python -m bench -m 'seed=range(3,20)' algo=tpo,grpo $label $common
python -m bench -m 'seed=range(3)' algo=tpo,grpo $label $common
python -m bench -m 'seed=range(20)' algo=grpo_no_kl,ppo $label $common
python -m bench -m 'seed=range(20)' algo=dg,ppo match=interactions $common
