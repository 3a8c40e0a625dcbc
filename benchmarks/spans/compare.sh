#!/usr/bin/env bash
# The span-method comparison of benchmarks/results/spans-v1.md (amb-open version 1): one run
# with the verdict as the occluded confidence (plus free quotes, copy-constrained quotes and
# the token head), one with the amb-open sequence head as the occluded confidence, the
# prefix-sharing timing, and the report. Readings go through one run store, so a rerun
# recomputes nothing.
#   bash benchmarks/spans/compare.sh [LIMIT]        (default 48: 24 whole pairs)
# AMB: the amb-open version read; spans-v1.md was made on version 1 (calimon data build amb-open
# --version 1 --sources ../shared/sources builds it as amb-open@1).
set -euo pipefail
LIMIT="${1:-48}"
AMB="${AMB:-amb-open@1}"
STORE="runs/spans-compare-store.sqlite"
COMMON=(--model smollm2-135m --benchmark "$AMB" --split test --limit "$LIMIT" --threads 1
        --store "$STORE" --quiet)
calimon spans "${COMMON[@]}" --copy-quotes --token-head amb-open-token \
    --out runs/spans-compare-verdict > /dev/null
calimon spans "${COMMON[@]}" --readout probe:amb-open-seq --no-quotes \
    --out runs/spans-compare-head > /dev/null
python benchmarks/spans/time_prefix_sharing.py --benchmark "$AMB" --n 6 --threads 1 \
    > runs/spans-timing.md
python benchmarks/spans/make_results.py runs/spans-compare-verdict runs/spans-compare-head \
    runs/spans-timing.md
