#!/usr/bin/env bash
# The robustness study on amb-open v2 at >= 100 transcripts a side (issue 40, item 6), written to
# benchmarks/results/robustness-amb-open.md: the fixed rewrites on both sides, the prompted
# verdict undefended and under each prompt defense, the shipped probe monitor
# (probe:amb-open-monitor), and the adaptive search against both. Resumable through one run
# store: a rerun scores only what it lacks.
#
#   bash benchmarks/robustness/amb_open_v2.sh
#
# LIMIT=230 takes 230 test transcripts (107 misbehaving, 123 benign, whole pairs balanced over
# cells). The verdict runs use --calibration none: on amb-open the embedded SmolLM2's verdict
# ranks misbehavior the wrong way on the calib split, so a fitted Platt map comes out inverted
# (and stops the study); flips do not depend on an increasing map, so thresholds are read on
# the raw P(Yes) in the monitor's own orientation. The probe monitor keeps its Platt map.
# The adaptive search spends BUDGET queries per flagged transcript (16: the CLI's default).
# PHASES picks phases (default "fixed adaptive defenses"); "report" only rewrites the report
# from the finished runs, e.g. after an interrupted defenses phase. The summary table goes into
# the head of benchmarks/results/robustness.md and the adversarial section of
# docs/reliability.md (DOCS).
set -euo pipefail
cd "$(dirname "$0")/../.."
LIMIT=${LIMIT:-230}
BUDGET=${BUDGET:-16}
OUT=${OUT:-runs/robustness-v2}
STORE=${STORE:-$OUT/store.sqlite}
REPORT=${REPORT:-benchmarks/results/robustness-amb-open.md}
PHASES=${PHASES:-"fixed adaptive defenses"}
DOCS=${DOCS:-"benchmarks/results/robustness.md docs/reliability.md"}
export OUT STORE
mkdir -p "$OUT"
run() { REGENERATE="LIMIT=$LIMIT BUDGET=$BUDGET bash benchmarks/robustness/amb_open_v2.sh" \
        BENCHMARKS=amb-open AMB_LIMIT=$LIMIT VERDICT_FLAGS="--calibration none" \
        REPORT=$REPORT DOCS=$DOCS bash benchmarks/robustness/run.sh; }
for phase in $PHASES; do
    case $phase in
        fixed) DEFENSES=none HEADS="amb-open:amb-open-monitor" run ;;
        adaptive) BENCH=amb-open LIMIT=$LIMIT BUDGET=$BUDGET HEADS=amb-open-monitor \
                  VERDICT_FLAGS="--calibration none" REPORT=none OUT=$OUT/adaptive \
                  CALIMON=${CALIMON:-.venv/bin/calimon} PYTHON=${PYTHON:-.venv/bin/python} \
                  bash benchmarks/robustness/adaptive.sh ;;
        defenses) DEFENSES="spotlight reminder strip" HEADS="" run ;;
        report) DEFENSES="" HEADS="" run ;;  # no runs: run.sh only writes the report
        *) echo "unknown phase $phase" >&2; exit 2 ;;
    esac
done
# the fixed-attack report is rewritten by each run.sh; the adaptive sections go in last
if [ -f "$OUT/adaptive/verdict/adaptive.json" ]; then
    for run in "$OUT/adaptive/verdict" "$OUT/adaptive/amb-open-monitor"; do
        "${PYTHON:-.venv/bin/python}" -c 'import json, sys; from pathlib import Path
from calimon.studies.robustness.report import write_section
run = Path(sys.argv[2]); doc = json.loads((run / "adaptive.json").read_text())
readout = doc["provenance"]["readout"]
write_section(Path(sys.argv[1]), f"adaptive:{readout}/amb-open", (run / "adaptive.md").read_text())
' "$REPORT" "$run"
    done
    "${PYTHON:-.venv/bin/python}" benchmarks/robustness/adaptive_table.py "$OUT/adaptive/verdict" \
        "$OUT/adaptive/amb-open-monitor" --report "$REPORT" \
        --command "LIMIT=$LIMIT BUDGET=$BUDGET bash benchmarks/robustness/amb_open_v2.sh"
fi
