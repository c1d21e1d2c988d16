#!/usr/bin/env bash
# The paper's headline: terminal reward, reverse copy, V = 2, K = 8, B = 100, 2000
# episodes. In order of what the paper's claim needs first:
#   1. TPO and GRPO at H = 10, prompt-matched, to 20 seeds;
#   2. GRPO-no-KL and PPO (prompt-matched) and interaction-matched DG at H = 10, to 5 seeds;
#   3. H = 9, the five methods (TPO, GRPO, GRPO-no-KL, PPO, DG), prompt-matched, to 5 seeds;
#   4. H = 7 and 8, the five methods, and interaction-matched PPO and DG, to 5 seeds;
#   5. the rest: every row of the terminal table to 20 seeds.
# One job per core (JOBS, default 2), one torch thread each, checkpoints every 100
# episodes: interrupt it any time and run it again; completed runs are skipped and
# unfinished ones resume.
#
#   bash reproduction/headline.sh            # from the repository root
#
# Runs land in reproduction/runs/terminal/ (committed, so the study continues from any
# checkout; HEADLINE_ROOT names another root); `python analysis/collect.py
# reproduction/runs/terminal` gathers them.
set -u
cd "$(dirname "$0")/.."
root=${HEADLINE_ROOT:-reproduction/runs/terminal}
# Its runs so far (and their checkpoints) were recorded under torch's AVX2 kernels: the
# remaining seeds keep to them, so every seed reproduces bit for bit on any x86 machine
# with AVX2 (an AVX512 one would differ in the last bits; README, "Randomness").
export ATEN_CPU_CAPABILITY=${ATEN_CPU_CAPABILITY:-avx2}
common="threads=1 checkpoint_every=100 hydra/launcher=local hydra.launcher.n_jobs=${JOBS:-2} output_root=$root"
run() { python -m bench -m "$@" $common; }
# `seed=` first: seed-major order, so that at any stopping point the methods of one call
# have the same seeds. No +experiment: its sweep order is algo-major. Matching changes
# nothing for the grouped methods (TPO, GRPO, GRPO-no-KL: one config, one hash under
# either), so they run prompt-matched only.
#
# Seeds 0-2 of TPO, GRPO and GRPO-no-KL at H = 10 (the ablations' runs) and of the H = 7
# and 8 rows are in reproduction/results.parquet, recorded under their legacy hashes
# (preset names included), which the report re-keys to these configs' hashes: the steps
# below start those rows at seed 3, and step 5 re-runs seeds 0-2 under this code last
# (each re-run replaces the table's copy in the report).
all=tpo,grpo,grpo_no_kl,ppo,dg
# 1.
run 'seed=range(3,20)' algo=tpo,grpo match=prompts task=reverse_h10
# 2.
run 'seed=range(3,5)' algo=grpo_no_kl,ppo match=prompts task=reverse_h10
run 'seed=range(3)' algo=ppo match=prompts task=reverse_h10
run 'seed=range(5)' algo=dg match=interactions task=reverse_h10
# 3.
run 'seed=range(5)' algo=$all match=prompts task=reverse_h9
# 4.
run 'seed=range(3,5)' algo=$all match=prompts task=reverse_h8,reverse_h7
run 'seed=range(3,5)' algo=ppo,dg match=interactions task=reverse_h8,reverse_h7
# 5. (DG at H = 10, prompt-matched, has its 20 seeds here already.)
run 'seed=range(5,20)' algo=grpo_no_kl,ppo match=prompts task=reverse_h10
run 'seed=range(5)' algo=ppo match=interactions task=reverse_h10
run 'seed=range(5)' algo=ppo,dg match=interactions task=reverse_h9
run 'seed=range(5,20)' algo=$all match=prompts task=reverse_h9,reverse_h8,reverse_h7
run 'seed=range(5,20)' algo=ppo,dg match=interactions task=reverse_h10,reverse_h9,reverse_h8,reverse_h7
run 'seed=range(3)' algo=tpo,grpo,grpo_no_kl match=prompts task=reverse_h10
run 'seed=range(3)' algo=$all match=prompts task=reverse_h8,reverse_h7
run 'seed=range(3)' algo=ppo,dg match=interactions task=reverse_h8,reverse_h7
