#!/usr/bin/env bash
# The headline's runs are a stage of the study queue (reproduction/study.yaml); this runs
# the whole queue in its order, one job per core (JOBS, default 2), resumable:
#   bash reproduction/headline.sh            # = python -m tools.study run --jobs 2
set -eu
cd "$(dirname "$0")/.."
exec python -m tools.study run --jobs "${JOBS:-2}" "$@"
