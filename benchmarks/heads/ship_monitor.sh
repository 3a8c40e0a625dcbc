#!/usr/bin/env bash
# The shipped monitor heads/smollm2-135m/amb-open-monitor.bundle.yaml: a sequence head (the
# score: attention-pooled over layer 15's response tokens, the best recipe of
# benchmarks/results/trained-monitors.md), a token head (the evidence spans) and a Platt map,
# all trained on amb-open only (heads on the train split, the map on the calib split), judged on
# the test split.
#   bash benchmarks/heads/ship_monitor.sh                          # the committed bundle
#   TRAIN_LIMIT=80 EVAL_LIMIT=80 NAME=try bash benchmarks/heads/ship_monitor.sh   # a quick check
# Needs amb-open built (calimon data build amb-open --sources ../shared/sources). Features are
# cached (~/.cache/calimon/features), so the token head and the curve reuse the capture pass.
set -euo pipefail
cd "$(dirname "$0")/../.."
CALIMON=${CALIMON:-.venv/bin/calimon}
NAME=${NAME:-amb-open-monitor}
MODEL=${MODEL:-smollm2-135m}
TRAIN_LIMIT=${TRAIN_LIMIT:-1200}     # train samples (whole pairs, balanced over cells)
EVAL_LIMIT=${EVAL_LIMIT:-800}       # calib + test samples of the curve run (half each)
SEQ_FLAGS=${SEQ_FLAGS:---kind sequence --estimator attention --layer 15}   # the sequence recipe
RECIPE=${RECIPE:-"attention-pooled probe on layer 15's response tokens (McKenzie et al. 2025), L2 weight by pair-grouped CV"}
TOKEN_LAYER=${TOKEN_LAYER:-15}
MAX_TOKENS=${MAX_TOKENS:-1024}
THREADS=${THREADS:-2}
OUT=${OUT:-runs/ship-$NAME}
export HF_HUB_OFFLINE=1
common=(--model "$MODEL" --benchmark amb-open --max-input-tokens "$MAX_TOKENS" --threads "$THREADS")

# shellcheck disable=SC2086
"$CALIMON" heads train --name "$NAME-seq" "${common[@]}" --limit "$TRAIN_LIMIT" $SEQ_FLAGS --no-eval
"$CALIMON" heads train --name "$NAME-token" "${common[@]}" --limit "$TRAIN_LIMIT" --kind token \
    --layer "$TOKEN_LAYER" --no-eval
"$CALIMON" curve --model "$MODEL" --benchmark amb-open --split test --limit "$EVAL_LIMIT" \
    --readout "probe:$NAME-seq" --no-binary --threads "$THREADS" --out "$OUT"
"$CALIMON" heads bundle --name "$NAME" --model "$MODEL" --sequence-head "$NAME-seq" \
    --token-head "$NAME-token" --calibration-map "$OUT/calibration/platt.json" \
    --metrics-from "$OUT/curve.json" --recipe "$RECIPE" \
    --command "TRAIN_LIMIT=$TRAIN_LIMIT EVAL_LIMIT=$EVAL_LIMIT SEQ_FLAGS='$SEQ_FLAGS' bash benchmarks/heads/ship_monitor.sh"
