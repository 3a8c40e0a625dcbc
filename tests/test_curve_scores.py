"""The studies read their curves through `compute_curve` (`calimon.studies.curve.scores`): the
robustness study and the heads evaluation give `calimon curve`'s figures on the same scores,
under the same class-size rule."""

from __future__ import annotations

import csv
import dataclasses
import json
import math

import numpy as np
import pytest
from conftest import toy_samples
from test_faults import fake_factory

from calimon.samples import write_samples
from calimon.studies.curve.scores import curve_of_scores
from calimon.studies.heads.evaluate import curve_figures, evaluate_readout


def _bench(tmp_path, n_pairs: int):
    rows = [dataclasses.replace(x, split=("test", "calib")[int(x.pair_id[1:]) % 2])
            for x in toy_samples(n_pairs)]
    return write_samples(rows, tmp_path / f"toy{n_pairs}.jsonl")


def _curve_run(smol, tmp_path, bench):
    from calimon.studies.curve.run import CurveSettings, run_curve

    run = run_curve(CurveSettings(model=str(smol.path), benchmark=str(bench), split="test",
                                  binary_prompts=(), n_boot=10, fars=(0.05, 0.10),
                                  store=tmp_path / "s.sqlite", out=tmp_path / "curve"))
    doc = json.loads((run.out / "curve.json").read_text())
    with (run.out / "curve.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    return doc, rows


def _point(doc, name):
    return next(p for p in doc["operating_points"] if p["name"] == name)


@pytest.mark.parametrize("n_pairs", [44, 24])  # a map fitted on calib (22 of each); none (12)
def test_robustness_and_heads_figures_are_calimon_curves(smol, tmp_path, monkeypatch, n_pairs):
    from calimon.studies.robustness.study import RobustnessSettings, run_robustness

    fake_factory(monkeypatch)
    bench = _bench(tmp_path, n_pairs)
    doc, rows = _curve_run(smol, tmp_path, bench)
    rob = run_robustness(RobustnessSettings(
        model=str(smol.path), benchmark=str(bench), split="test", fit_split="calib",
        store=tmp_path / "s.sqlite", out=tmp_path / "rob", attacks=("control_note",)))
    clean = rob.summary["clean"]
    assert clean["auroc_raw"] == pytest.approx(doc["auroc_raw"])
    assert clean["auroc_cal"] == pytest.approx(doc["auroc"])
    assert rob.summary["calibration"]["method"] == (doc["calibration_method"] or "none")
    far = rob.summary["operating_points"]["far"]
    assert (far["mr"], far["far"]) == pytest.approx((_point(doc, "FAR<=10%")["mr"],
                                                     _point(doc, "FAR<=10%")["far"]))

    split = {r["id"]: r for r in rows}
    p = {s: np.array([float(r["p_raw"]) for r in split.values() if r["split"] == s])
         for s in ("calib", "test")}
    y = {s: np.array([r["label"] == "1" for r in split.values() if r["split"] == s])
         for s in ("calib", "test")}
    r = evaluate_readout("x", p["calib"], y["calib"], p["test"], y["test"])
    assert r.auroc_raw == pytest.approx(doc["auroc_raw"])
    assert r.auroc_cal == pytest.approx(doc["auroc"])
    assert r.mr_at_far == pytest.approx(_point(doc, "FAR<=5%")["mr"])
    assert r.method == (doc["calibration_method"] or "none")


def test_below_the_curve_rule_every_study_figure_is_undefined():
    """Fewer than 10 of a class: `calimon curve` draws no curve, and no study reads one."""
    rng = np.random.default_rng(0)
    y = np.arange(30) < 8  # 8 misbehaving, 22 benign
    p = np.clip(0.3 + 0.4 * y + 0.2 * rng.random(30), 0, 1)
    c = curve_of_scores(p, y)
    assert not c.defined and "8 misbehaving and 22 benign" in c.reason
    assert math.isnan(c.auroc) and c.point(0.05) is None
    assert all(math.isnan(v) for v in curve_figures(p, y))
    r = evaluate_readout("x", p, y, p, y)
    assert math.isnan(r.auroc_raw) and math.isnan(r.mr_at_far)
    assert all(math.isfinite(v) for v in curve_figures(np.r_[p, p], np.r_[y, y]))  # 16, 44
