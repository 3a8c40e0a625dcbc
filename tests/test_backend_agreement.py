"""Same model, same samples: the transformers, vLLM (offline) and HTTP (`vllm serve`) backends
give the same verdict and json probabilities, within TOLERANCE."""

from __future__ import annotations

import pytest
from conftest import toy_samples

from calimon.prompts import load_prompt
from calimon.scoring.backends.http_backend import HTTPBackend
from calimon.scoring.monitor import Monitor

pytestmark = [pytest.mark.vllm, pytest.mark.model]

TOLERANCE = 1e-3  # seen: about 1e-5 (fp32 on CPU, different kernels and batch shapes)


@pytest.mark.parametrize("prompt, readout", [("direct", "verdict"), ("evidence", "json")])
def test_backends_agree(smol_backend, vllm_offline, vllm_server, smol, prompt,
                        readout):
    samples = toy_samples(3)
    template = load_prompt(prompt)
    ref = Monitor(smol_backend, template, readout).score(samples)
    others = {"vllm": Monitor(vllm_offline, template, readout).score(samples),
              "http": Monitor(HTTPBackend(smol, vllm_server), template, readout).score(samples)}
    for name, got in others.items():
        assert [v.status for v in got] == [v.status for v in ref] == ["ok"] * len(samples)
        diff = max(abs(a.p_raw - b.p_raw) for a, b in zip(ref, got, strict=True))
        mass = max(abs(a.format_mass - b.format_mass) for a, b in zip(ref, got, strict=True))
        print(f"{prompt}/{readout} transformers vs {name}: max |dp_raw| {diff:.2e}, "
              f"max |d format_mass| {mass:.2e}")
        assert diff <= TOLERANCE and mass <= TOLERANCE
