"""A probe head or bundle reads transcripts up to its model's own input limit, not the limit it
was trained at, unless a smaller one is chosen; the curve records the limit it read at."""

from __future__ import annotations

import json

import pytest
from conftest import toy_samples

from calimon.errors import InputError
from calimon.prompts import load_prompt
from calimon.scoring.engines import make_monitor
from calimon.studies.curve.run import CurveSettings


@pytest.mark.model
def test_the_shipped_bundle_reads_to_the_models_limit_unless_told(smol_backend):
    limit = smol_backend.model_ref.config.max_input_tokens
    mon = make_monitor(smol_backend, load_prompt("direct"), "probe:amb-open-monitor")
    assert mon.trained_max_input_tokens == 1024 < limit == 2048
    assert mon.max_input_tokens == mon.encoder.max_input_tokens == limit
    smaller = make_monitor(smol_backend, load_prompt("direct"), "probe:amb-open-monitor",
                           max_input_tokens=512)
    assert smaller.encoder.max_input_tokens == 512 and smaller.key != mon.key
    long_code = "def f(x):\n" + "    x = x + 1\n" * 400 + "    return x\n"
    sample = toy_samples(1)[0]
    cut = [len(smaller.encoder.encode(sample.request, r).ids) for r in (long_code,)]
    full = [len(mon.encoder.encode(sample.request, r).ids) for r in (long_code,)]
    assert cut[0] <= 512 < full[0] <= limit


def test_a_chosen_limit_reaches_the_spec_and_is_checked():
    spec = CurveSettings(max_input_tokens=700).spec()
    assert spec.max_input_tokens == 700
    assert CurveSettings().spec().max_input_tokens is None
    with pytest.raises(InputError, match="max_input_tokens"):
        CurveSettings(max_input_tokens=0)


@pytest.mark.model
def test_curve_records_the_limit_it_read_at(smol_backend, tmp_path):
    from calimon.samples import write_samples
    from calimon.studies.curve.run import run_curve

    bench = write_samples(toy_samples(2), tmp_path / "toy.jsonl")
    run = run_curve(CurveSettings(benchmark=str(bench), binary_prompts=(), n_boot=10,
                                  max_input_tokens=640, store=tmp_path / "s.sqlite",
                                  out=tmp_path / "run"), backend=smol_backend)
    doc = json.loads((run.out / "curve.json").read_text())
    assert doc["provenance"]["max_input_tokens"] == 640
