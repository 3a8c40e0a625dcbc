#!/usr/bin/env bash
# The models leaderboard (benchmarks/results/models.md): each model scores the same amb-open
# selection with the verdict and json readouts and one probe head, and `calimon compare` draws
# the runs on one MR/FAR figure.
#   benchmarks/models/run_models.sh [MODEL...]        (default: smollm2-135m gemma3-270m)
# Needs amb-open built (calimon data build amb-open --sources ../shared/sources) and, for
# gemma3-270m, `make gemma`. Sizes: LIMIT samples drawn from the calib and test splits (half
# each, whole pairs balanced over cells; maps fitted on calib, curves judged on test),
# TRAIN_LIMIT train samples for the head, BINARY_LIMIT test samples for the binary protocol;
# every readout cuts transcripts at the model config's max_input_tokens (head_tail).
set -euo pipefail
cd "$(dirname "$0")/../.."
CALIMON=${CALIMON:-.venv/bin/calimon}
LIMIT=${LIMIT:-160}
TRAIN_LIMIT=${TRAIN_LIMIT:-160}
BINARY_LIMIT=${BINARY_LIMIT:-16}
OUT=${OUT:-runs/models}
HEAD=${HEAD:-amb-open-seq}
# models.md was made on amb-open version 1 (calimon data build amb-open --version 1 ...)
AMB=${AMB:-amb-open@1}
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(smollm2-135m gemma3-270m)

# A store of its own, so that samples/s counts this run's scoring, not readings reused from others.
common=(--benchmark "$AMB" --split test --limit "$LIMIT" --store "$OUT/store.sqlite" --quiet)
mkdir -p "$OUT"
printf '{"limit": %d, "train_limit": %d, "binary_limit": %d, "head": "%s"}\n' \
    "$LIMIT" "$TRAIN_LIMIT" "$BINARY_LIMIT" "$HEAD" > "$OUT/settings.json"
runs=()
for m in "${models[@]}"; do
    # The head reads transcripts cut at the same input limit as the prompted readouts (the config's).
    max_tokens=$("${CALIMON%/calimon}/python" -c \
        "from calimon.models import load_model_config as c; print(c('$m').max_input_tokens)")
    "$CALIMON" curve --model "$m" "${common[@]}" --readout verdict \
        --binary-limit "$BINARY_LIMIT" --out "$OUT/$m-verdict"
    "$CALIMON" curve --model "$m" "${common[@]}" --readout json --no-binary \
        --out "$OUT/$m-json"
    "$CALIMON" heads train --model "$m" --name "$HEAD" --benchmark "$AMB" \
        --limit "$TRAIN_LIMIT" --max-input-tokens "$max_tokens" --no-eval --quiet
    "$CALIMON" curve --model "$m" "${common[@]}" --readout "probe:$HEAD" --no-binary \
        --out "$OUT/$m-probe"
    runs+=("$OUT/$m-verdict" "$OUT/$m-json" "$OUT/$m-probe")
done
"$CALIMON" compare "${runs[@]}" --out "$OUT/compare" --markdown "$OUT/compare/table.md" \
    --html "$OUT/compare/compare.html"
