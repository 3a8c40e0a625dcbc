#!/usr/bin/env bash
# benchmarks/results/spans.md on amb-open (version 2) for the embedded model: the segment study
# (the token head and its segments, their precision map fitted on calib and judged on test),
# copy-constrained quotes and occlusion on the sequence head, each against its random floor
# with bootstrap intervals, per category, task and cell. Readings go through one run store, so
# a rerun recomputes nothing; the small outputs the report is made from go to
# benchmarks/spans/out/ (sample ids and figures, no transcript text).
#   bash benchmarks/spans/study.sh [TEST_LIMIT [COPY_LIMIT [OCCLUSION_LIMIT]]]
# TEST_LIMIT (default 220: 102 misbehaving test samples with gold spans) selects the segment
# study's test samples; COPY_LIMIT and OCCLUSION_LIMIT (default TEST_LIMIT) those of the
# copy-quote and the occlusion run, which cost far more per sample (the notes under benchmarks/results/spans.md).
set -euo pipefail
TEST_LIMIT="${1:-220}"
COPY_LIMIT="${2:-$TEST_LIMIT}"
OCC_LIMIT="${3:-$TEST_LIMIT}"
STORE="runs/spans-v2-store.sqlite"
OUT="benchmarks/spans/out"
COMMON=(--model smollm2-135m --benchmark amb-open --split test --threads 1 --store "$STORE"
        --no-quotes --quiet)
python benchmarks/spans/segments.py --fit-limit 400 --test-limit "$TEST_LIMIT" --store "$STORE" \
    --out "$OUT/spans-segments.json"
calimon spans "${COMMON[@]}" --limit "$COPY_LIMIT" --copy-quotes --max-segments 1 \
    --out runs/spans-v2-verdict > /dev/null
calimon spans "${COMMON[@]}" --limit "$OCC_LIMIT" --readout probe:amb-open-seq \
    --out runs/spans-v2-head > /dev/null
python benchmarks/spans/collect_runs.py --copy runs/spans-v2-verdict \
    --occlusion runs/spans-v2-head --out "$OUT/spans-runs.json"
python benchmarks/spans/make_segment_results.py "$OUT/spans-segments.json" "$OUT/spans-runs.json"
