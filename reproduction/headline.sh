#!/usr/bin/env bash
# The headline's runs are a stage of the study queue (reproduction/study.yaml); this runs
# the whole queue in its order, one job per core (JOBS, default 2), resumable:
#   bash reproduction/headline.sh --repo ../tpo-study --commit   # (study.yaml says how to make ../tpo-study)
set -eu
cd "$(dirname "$0")/.."
exec python -m tools.study run --jobs "${JOBS:-2}" "$@"
