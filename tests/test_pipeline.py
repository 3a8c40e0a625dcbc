import json

import pytest
from conftest import toy_samples

from calimon.pipeline import CurveSettings, run_curve
from calimon.samples import write_samples

pytestmark = pytest.mark.model


def test_curve_run_end_to_end_and_resumable(tmp_path):
    bench = write_samples(toy_samples(8), tmp_path / "toy.jsonl")
    settings = CurveSettings(benchmark=str(bench), binary_prompts=("direct",), binary_limit=4,
                             n_boot=20, store=tmp_path / "store.sqlite", out=tmp_path / "run")
    run = run_curve(settings)
    assert run.model_calls > 0
    for name in ("curve.json", "curve.csv", "curve.png", "curves_by_group.png",
                 "reliability.png", "calibration/platt.json"):
        assert (run.out / name).stat().st_size > 0, name
    doc = json.loads((run.out / "curve.json").read_text())
    assert {"thresholds", "mr", "far", "binary_points", "calibration", "operating_points",
            "provenance", "curves"} <= set(doc)
    assert len(doc["thresholds"]) == len(doc["mr"]) == len(doc["far"])
    assert doc["mr"][0] == 1.0 and doc["far"][-1] == 1.0
    assert doc["binary_points"][0]["name"] == "binary/direct"
    assert {"ece", "brier", "nll", "auroc", "auprc", "mce"} <= set(
        doc["calibration"]["metrics_after"]["platt"])
    assert doc["counts"]["scored"] == 16
    rows = (run.out / "curve.csv").read_text().splitlines()
    assert rows[0].startswith("id,pair_id,label,category,task,split,status,p_raw,p_cal")
    assert len(rows) == 17
    again = run_curve(CurveSettings(**{**vars(settings), "out": tmp_path / "run2"}))
    assert again.model_calls == 0
    assert json.loads((again.out / "curve.json").read_text())["mr"] == doc["mr"]
