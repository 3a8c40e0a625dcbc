#!/usr/bin/env bash
# The adaptive attacker against three readouts: the prompted verdict, the plain probe head and
# the augmented probe head (trained by benchmarks/robustness/augment.py, which must run first),
# then the side-by-side "Adaptive attacker" section of the report.
#
#   LIMIT=80 BUDGET=64 bash benchmarks/robustness/adaptive.sh
#
# HEADS (environment): the probe heads attacked beside the verdict (default: the plain and the
# augmented head of BENCH); e.g. HEADS=amb-open-monitor for the shipped monitor on amb-open.
# Size flags (environment): BENCH (humaneval-pairs), LIMIT (test and calib samples each, whole
# pairs; 80), FAR (the operating point; 0.10), BUDGET (queries per transcript; 64), BEAM (2), WIDTH (4), MAX_EDITS (3), SEED (0),
# DEVICE (auto), CALIMON and PYTHON (the commands to run), STORE (runs/store.sqlite), REPORT (benchmarks/results/robustness.md; "none":
# write no report). Every query goes through the store: a rerun resumes where it stopped.
set -euo pipefail
cd "$(dirname "$0")/../.."

BENCH=${BENCH:-humaneval-pairs}
LIMIT=${LIMIT:-80}
FAR=${FAR:-0.10}
BUDGET=${BUDGET:-64}
BEAM=${BEAM:-2}
WIDTH=${WIDTH:-4}
MAX_EDITS=${MAX_EDITS:-3}
SEED=${SEED:-0}
DEVICE=${DEVICE:-auto}
STORE=${STORE:-runs/store.sqlite}
REPORT=${REPORT:-benchmarks/results/robustness.md}
OUT=${OUT:-runs/adaptive}
CALIMON=${CALIMON:-calimon}
HEADS=${HEADS-"$BENCH-seq-plain $BENCH-seq-aug"}
VERDICT_FLAGS=${VERDICT_FLAGS-}  # more flags for the verdict's search, e.g. "--calibration none"

common=(--benchmark "$BENCH" --limit "$LIMIT" --far "$FAR" --budget "$BUDGET" --beam "$BEAM"
        --width "$WIDTH" --max-edits "$MAX_EDITS" --seed "$SEED" --device "$DEVICE"
        --store "$STORE" --quiet)
report=()
[ "$REPORT" != none ] && report=(--report "$REPORT")

# shellcheck disable=SC2086
$CALIMON robustness --adaptive "${common[@]}" --out "$OUT/verdict" "${report[@]}" $VERDICT_FLAGS
outs=("$OUT/verdict")
for head in $HEADS; do
    outs+=("$OUT/$head")
    $CALIMON robustness --adaptive --head "$head" "${common[@]}" --out "$OUT/$head" \
        "${report[@]}"
done
${PYTHON:-python} benchmarks/robustness/adaptive_table.py "${outs[@]}" "${report[@]}" --command \
    "BENCH=$BENCH HEADS='$HEADS' LIMIT=$LIMIT FAR=$FAR BUDGET=$BUDGET BEAM=$BEAM WIDTH=$WIDTH MAX_EDITS=$MAX_EDITS SEED=$SEED bash benchmarks/robustness/adaptive.sh"
