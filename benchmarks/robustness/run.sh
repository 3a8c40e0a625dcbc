#!/usr/bin/env bash
# The robustness study (benchmarks/results/robustness.md and the adversarial section of
# docs/reliability.md): both benchmarks, the test split (all cells), every fixed rewrite on both
# sides (misbehaving: flips; benign: false alarms), the verdict readout undefended and under each
# prompt defense, and the probe heads (undefended: a defense changes the prompt a head was
# trained on). One `calimon robustness` run per (benchmark, readout, defense), then report.py.
#   benchmarks/robustness/run.sh                                   # full size (use a GPU)
#   DEVICE=cuda BATCH_TOKENS=65536 benchmarks/robustness/run.sh     # on a GPU
#   BENCHMARKS=humaneval-pairs HE_LIMIT=40 HEADS= benchmarks/robustness/run.sh   # a small check
# Resumable: each reading is committed to the run store ($STORE) as it is scored, and a rerun
# scores only what the store lacks (defended readings are keyed apart by their template hash).
set -euo pipefail
cd "$(dirname "$0")/../.."
CALIMON=${CALIMON:-.venv/bin/calimon}
PYTHON=${PYTHON:-.venv/bin/python}
BENCHMARKS=${BENCHMARKS:-"humaneval-pairs amb-open"}
HE_LIMIT=${HE_LIMIT-}         # humaneval-pairs: samples per split (empty: the whole split)
AMB_LIMIT=${AMB_LIMIT-840}    # amb-open: samples per split; 840 gives >= 400 a side in test
DEFENSES=${DEFENSES-"none spotlight reminder strip spotlight,reminder,strip"}
HEADS=${HEADS-"humaneval-pairs:humaneval-pairs-seq amb-open:amb-open-seq"}
DEVICE=${DEVICE:-auto}
BATCH_TOKENS=${BATCH_TOKENS:-8192}
FLAGS=${FLAGS-}               # more `calimon robustness` flags for every run, e.g. "--threads 2"
VERDICT_FLAGS=${VERDICT_FLAGS-}  # more flags for the verdict runs only, e.g. "--calibration none"
OUT=${OUT:-runs/robustness}
STORE=${STORE:-$OUT/store.sqlite}
REPORT=${REPORT:-benchmarks/results/robustness.md}
DOCS=${DOCS:-docs/reliability.md}   # the files whose summary section is replaced (space-separated)
export HF_HUB_OFFLINE=1
mkdir -p "$OUT"

limit_of() {  # benchmark -> its --limit flag (none: the whole split)
    local n
    case $1 in humaneval-pairs) n=$HE_LIMIT ;; amb-open) n=$AMB_LIMIT ;; *) n=${LIMIT-} ;; esac
    [ -n "$n" ] && echo "--limit $n" || true
}
study() {  # benchmark, run name, then flags
    local bench=$1 name=$2; shift 2
    mkdir -p "$OUT/$bench"
    echo "== $bench $name" >&2
    # shellcheck disable=SC2046
    "$CALIMON" robustness --benchmark "$bench" $(limit_of "$bench") --device "$DEVICE" \
        --batch-tokens "$BATCH_TOKENS" --store "$STORE" --out "$OUT/$bench/$name" --quiet \
        $FLAGS "$@" > "$OUT/$bench/$name.txt"
}
for bench in $BENCHMARKS; do
    for defense in $DEFENSES; do
        # shellcheck disable=SC2086
        study "$bench" "verdict-${defense//,/+}" --readout verdict --defense "$defense" \
            $VERDICT_FLAGS
    done
    for pair in $HEADS; do
        if [ "${pair%%:*}" = "$bench" ]; then
            study "$bench" "probe-${pair#*:}" --head "${pair#*:}"
        fi
    done
done
docs_flags=()
for d in $DOCS; do docs_flags+=(--docs "$d"); done
"$PYTHON" benchmarks/robustness/report.py "$OUT" --out "$REPORT" "${docs_flags[@]}" \
    ${REGENERATE:+--command "$REGENERATE"}
