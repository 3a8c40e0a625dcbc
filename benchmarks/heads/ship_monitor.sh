#!/usr/bin/env bash
# The shipped monitor heads/smollm2-135m/amb-open-monitor.bundle.yaml: a sequence head (the
# score), a token head (the evidence spans) and a Platt map, all trained on amb-open only (heads
# on the train split, the map on the calib split), judged on the test split. The sequence
# head's recipe is chosen by `calimon heads train`'s pair-grouped CV on the train split (layer,
# pooling, two layers, logistic or MLP, and attention at the token layer; the card lists every
# candidate). The committed bundle is the attention-pooled head on layer 15:
#   SEQ_FLAGS='--kind sequence --estimator attention --layer 15' bash benchmarks/heads/ship_monitor.sh
# A candidate is made under another name and replaces it only by benchmarks/heads/ship_compare.py's
# rule (benchmarks/results/ship-monitor.md):
#   NAME=amb-open-monitor-next bash benchmarks/heads/ship_monitor.sh
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
SEQ_FLAGS=${SEQ_FLAGS:---kind sequence --attention-layer 15}   # the recipe search
case "$SEQ_FLAGS" in
  *"--estimator attention"*) DEFAULT_RECIPE="attention-pooled probe on layer 15's response tokens (McKenzie et al. 2025), L2 weight by pair-grouped CV" ;;
  *) DEFAULT_RECIPE="the recipe chosen by pair-grouped CV on amb-open train (one-standard-error rule; the sequence head's card lists every candidate)" ;;
esac
RECIPE=${RECIPE:-$DEFAULT_RECIPE}
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
