#!/usr/bin/env bash
# The three suites CI runs last (vllm, lora, integrations), one after another and then the vllm
# suite beside the other two (as .ci/run runs them): wall seconds and CPU seconds of each run.
# Run in a checkout where .ci/run has made the suites' environments (.venv-vllm, .venv-lora,
# .venv-integrations), on a quiet machine (about 25 minutes on 2 cores):
#     bash benchmarks/ci/beside.sh [alone|beside|both]
set -uo pipefail
cd "$(dirname "$0")/../.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/calimon-beside.XXXXXX")
files() { grep -lE "pytest\.mark\.$1\b" tests/test_*.py; }
run() {  # run MARKER VENV [PYTEST-ARGS...]: one suite, as .ci/run's `suite` runs it
    local marker=$1 venv=$2; shift 2
    mapfile -t found < <(files "$marker")
    /usr/bin/time -f "%e %U %S" -o "$LOGS/$marker.time" "$venv/bin/python" -m pytest -q \
        -p no:cacheprovider "$@" -m "$marker" "${found[@]}" >"$LOGS/$marker.log" 2>&1
    local rc=$?
    read -r wall user sys <"$LOGS/$marker.time"
    echo "| $MODE | $marker | $rc | $wall | $(python3 -c "print(round($user + $sys))") |"
}
WORKERS=(-n 2 --dist worksteal)
echo "| mode | suite | exit | wall s | CPU s |"
echo "|---|---|---|---|---|"
if [[ ${1:-both} != beside ]]; then
    MODE=alone; t0=$SECONDS
    run vllm .venv-vllm; run lora .venv-lora; run integrations .venv-integrations "${WORKERS[@]}"
    echo "| alone | all three | | $((SECONDS - t0)) | |"
fi
if [[ ${1:-both} != alone ]]; then
    MODE=beside; t0=$SECONDS
    run vllm .venv-vllm > "$LOGS/vllm.row" &
    run lora .venv-lora; run integrations .venv-integrations "${WORKERS[@]}"
    wait; cat "$LOGS/vllm.row"
    echo "| beside | all three | | $((SECONDS - t0)) | |"
fi
echo "(logs in $LOGS)"
