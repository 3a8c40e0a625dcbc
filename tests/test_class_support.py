"""The class-size rule (calimon.numerics.class_support): a benchmark with one class nearly absent gets no
curve, AUROC or calibration map, only the rate of each class at fixed thresholds with exact
intervals, and every command downstream (curve table, report, thresholds, escalate,
apply-policy) works on it. No model is loaded: readings are written to a real run store."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import beta as beta_dist
from typer.testing import CliRunner

from calimon.numerics.class_support import (
    MIN_PER_CLASS_CALIBRATION,
    MIN_PER_CLASS_CURVE,
    class_support,
    policy_rates,
    rates_at,
)
from calimon.samples import Sample, write_samples


def cli(*args: str):
    from calimon.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])


def one_class_samples(n_benign: int, n_misbehaving: int) -> list[Sample]:
    out = [Sample(id=f"b{i}", request="Summarize the page.", response=f"An honest summary {i}.",
                  label=False, category="safety", task="qa", pair_id=f"b{i}")
           for i in range(n_benign)]
    out += [Sample(id=f"m{i}", request="Summarize the page.", response=f"I copied the key {i}.",
                   label=True, category="safety", task="qa", pair_id=f"m{i}")
            for i in range(n_misbehaving)]
    return out


def scored_run(root: Path, n_benign: int, n_misbehaving: int, **settings) -> tuple[Path, dict]:
    """A run folder written by the real curve writer from readings in a real run store."""
    from calimon.scoring.store import MonitorKey, RunStore
    from calimon.selection import dataset_hash
    from calimon.studies.curve.outputs import write_curve_outputs
    from calimon.studies.curve.run import CurveSettings
    from calimon.verdict import Verdict

    rng = random.Random(0)
    data = one_class_samples(n_benign, n_misbehaving)
    bench = write_samples(data, root / "samples.jsonl")
    readings = {}
    for x in data:
        p = min(0.99, max(0.01, rng.gauss(0.7 if x.label else 0.3, 0.2)))
        readings[x.transcript_hash] = Verdict(x.transcript_hash, "verdict", "ok", p_raw=p,
                                              format_mass=0.01)
    store = root / "store.sqlite"
    with RunStore(store) as st:
        st.put(MonitorKey("toy", "rev0", "direct", "h-main", "verdict"), readings.values())
    s = CurveSettings(model="toy", benchmark=str(bench), store=store, n_boot=20,
                      binary_prompts=(), **settings)
    out = root / "run"
    out.mkdir(parents=True, exist_ok=True)
    summary = write_curve_outputs(
        out, s, evaluate=data, fit=[], readings=readings, binary_set=[], binary_readings={},
        provenance={"model": "toy", "model_revision": "rev0", "model_path": "/nowhere",
                    "prompt": "direct", "template_hash": "h-main", "readout": "verdict",
                    "benchmark": str(bench), "dataset_hash": dataset_hash(data),
                    "calimon_version": "test", "store": str(store),
                    "created": "2025-01-01T00:00:00+00:00"})
    return out, summary


# ------------------------------------------------------------------ the rule and its numbers

def test_the_rule_in_numbers():
    assert (MIN_PER_CLASS_CURVE, MIN_PER_CLASS_CALIBRATION) == (10, 20)
    one = class_support(1, 440)
    assert not one.curve and not one.calibration and "1 misbehaving and 440 benign" in one.reason
    mid = class_support(MIN_PER_CLASS_CURVE, 440)
    assert mid.curve and not mid.calibration and "no calibration map" in mid.reason
    full = class_support(MIN_PER_CLASS_CALIBRATION, MIN_PER_CLASS_CALIBRATION)
    assert full.curve and full.calibration and full.reason is None
    assert not class_support(0, 0).curve
    # the justification in the docstring: at n = 10 the exact 95% interval is wider than 0.3
    assert beta_dist.ppf(0.975, 1, 10) == pytest.approx(0.308, abs=1e-3)
    assert beta_dist.ppf(0.975, 6, 5) - beta_dist.ppf(0.025, 5, 6) > 0.6


def test_rates_at_thresholds_have_exact_intervals():
    scores = np.r_[np.arange(440) / 440, 0.95]
    labels = np.r_[np.zeros(440, bool), True]
    far, mr = rates_at(scores, labels, [0.9])
    assert (far.rate, far.k, far.n) == ("far", 44, 440) and far.estimate == pytest.approx(0.1)
    assert far.low == pytest.approx(beta_dist.ppf(0.025, 44, 397))
    assert far.high == pytest.approx(beta_dist.ppf(0.975, 45, 396))
    assert (mr.rate, mr.k, mr.n, mr.low) == ("mr", 0, 1, 0.0)
    (only,) = rates_at(scores[:440], labels[:440], [1.0])
    assert only.rate == "far" and only.k == 0 and only.high == pytest.approx(
        1 - 0.025 ** (1 / 440))  # a class with no sample is left out, never 0


def test_policy_rates_name_each_label_present():
    actions = np.array(["auto_block", "auto_pass", "human_review", "auto_pass", "auto_block"],
                       dtype=object)
    rates = {r.rate: r for r in policy_rates(actions, [0, 0, 0, 1, -1], 0.3, 0.8)}
    assert (rates["far"].k, rates["far"].n, rates["far"].threshold) == (1, 3, 0.8)
    assert (rates["mr"].k, rates["mr"].n, rates["mr"].threshold) == (1, 1, 0.3)
    assert (rates["block_rate"].k, rates["block_rate"].n) == (1, 1)


# ------------------------------------------------------------------ calimon curve, one class

def test_a_nearly_one_class_benchmark_gets_rates_not_a_curve(tmp_path):
    """40 benign + 1 misbehaving: before the rule this run had an AUROC, a cross-fitted Platt
    map and a curve."""
    out, summary = scored_run(tmp_path, 40, 1, rate_thresholds=(0.5, 0.8))
    doc = json.loads((out / "curve.json").read_text())
    assert doc["support"]["curve"] is False and doc["support"]["calibration"] is False
    assert "1 misbehaving and 40 benign" in doc["support"]["reason"]
    assert doc["auroc"] is None and doc["auroc_raw"] is None and doc["curves"] == {}
    assert doc["operating_points"] == [] and doc["calibration"]["maps"] == {}
    assert doc["score"] == "p_raw" and doc["run"]["calibration"] == "none"
    assert not (out / "calibration").exists() and not (out / "curve.png").exists()
    rates = doc["rates_at_thresholds"]
    assert [(r["rate"], r["threshold"], r["n"]) for r in rates] == [
        ("far", 0.5, 40), ("mr", 0.5, 1), ("far", 0.8, 40), ("mr", 0.8, 1)]
    assert all(0 <= r["low"] <= r["estimate"] <= r["high"] <= 1 for r in rates)
    with (out / "curve.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 41 and all(r["p_cal"] == "" and r["p_raw"] for r in rows)  # no p_cal
    from calimon.run_folder import read_curve_json
    from calimon.studies.curve.tables import groups_markdown, operating_table

    result = read_curve_json(out)
    text = operating_table(result)
    assert "not shown: 1 misbehaving and 40 benign" in text and "FAR" in text
    assert "AUROC raw" not in text and "operating point" not in text
    assert groups_markdown(result).count("\n") == 1  # header only: no group has a curve


def test_a_benign_only_benchmark_gets_its_far(tmp_path):
    out, _ = scored_run(tmp_path, 40, 0)
    doc = json.loads((out / "curve.json").read_text())
    (far,) = doc["rates_at_thresholds"]
    assert far["rate"] == "far" and far["n"] == 40 and doc["counts"]["n_pos"] == 0


def test_between_the_two_minimums_the_curve_is_drawn_on_the_raw_score(tmp_path):
    out, summary = scored_run(tmp_path, 40, MIN_PER_CLASS_CURVE)
    assert summary["support"]["curve"] and not summary["support"]["calibration"]
    assert summary["score"] == "p_raw" and summary["calibration_method"] is None
    assert summary["auroc"] == pytest.approx(summary["auroc_raw"])
    assert summary["calibration"]["maps"] == {} and not (out / "calibration").exists()
    assert (out / "curve.png").stat().st_size > 0


def test_groups_below_the_rule_have_no_auroc(tmp_path):
    from calimon.numerics.curves import curves_by

    y = np.r_[np.zeros(30, bool), np.ones(30, bool)]
    s = np.linspace(0.01, 0.99, 60)
    cat = ["a"] * 25 + ["b"] * 5 + ["a"] * 28 + ["b"] * 2  # b: 2 misbehaving
    curves = curves_by(s, y, keys={"category": cat}, n_boot=0,
                       min_per_class=MIN_PER_CLASS_CURVE)
    assert curves["all"].defined and curves["category=a"].defined
    b = curves["category=b"]
    assert not b.defined and np.isnan(b.auroc) and "too few of a class" in b.undefined_reason
    assert b.to_dict()["auroc"] is None


def test_curve_cli_on_a_one_class_benchmark(smol, tmp_path, monkeypatch):
    """`calimon curve` end to end with a stand-in backend (no weights): table, files, exit 0."""
    from test_pipeline import RecordingBackend

    monkeypatch.setattr(RecordingBackend, "made", [])
    monkeypatch.setattr("calimon.scoring.backends.transformers_backend.TransformersBackend",
                        RecordingBackend)
    bench = write_samples(one_class_samples(40, 1), tmp_path / "benign.jsonl")
    res = cli("curve", "--model", smol.path, "--benchmark", bench, "--no-binary",
              "--threshold", "0.5", "--threshold", "0.9", "--store", tmp_path / "s.sqlite",
              "--out", tmp_path / "run")
    assert res.exit_code == 0, res.output
    assert "not shown: 1 misbehaving and 40 benign scored samples" in res.output
    assert "FAR" in res.output and "AUROC raw" not in res.output
    doc = json.loads((tmp_path / "run" / "curve.json").read_text())
    assert [r["threshold"] for r in doc["rates_at_thresholds"]] == [0.5, 0.5, 0.9, 0.9]


# ------------------------------------------------------------------ downstream commands

@pytest.fixture
def one_class_run(tmp_path) -> Path:
    return scored_run(tmp_path, 40, 1)[0]


def test_report_on_a_one_class_run(one_class_run, tmp_path):
    res = cli("report", one_class_run, "--out", tmp_path / "report.html")
    assert res.exit_code == 0, res.output
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "Not shown: 1 misbehaving and 40 benign" in page and "Clopper-Pearson" in page


def test_thresholds_on_a_one_class_run_read_the_runs_score(one_class_run):
    res = cli("thresholds", one_class_run, "--far", "0.1", "--json")
    assert res.exit_code == 0, res.output
    rep = json.loads(res.output)
    assert rep["score"] == "p_raw" and rep["checks"][0]["certificate"]["rate"] == "far"


def test_escalate_refuses_a_one_class_run_in_one_line(one_class_run, tmp_path):
    res = cli("escalate", one_class_run, "--budget", "0.1", "--out", tmp_path / "p.yaml")
    assert res.exit_code != 0 and "cannot design a policy" in res.output
    assert len(res.output.strip().splitlines()) == 1 and "Traceback" not in res.output


def _policy(tmp_path: Path, score: str = "p_raw") -> Path:
    from calimon.deploy.policy_file import Policy, save_policy

    pol = Policy(version=1, name="saved", readout="verdict", model="toy",
                 calibration="none" if score == "p_raw" else "platt", score=score,
                 t_low=0.2, t_high=0.6)
    return save_policy(pol, tmp_path / "saved.yaml")


def test_apply_policy_on_benign_traffic_reports_realized_far(one_class_run, tmp_path):
    res = cli("apply-policy", _policy(tmp_path), one_class_run / "curve.csv",
              "--out", tmp_path / "decisions.csv", "--json")
    assert res.exit_code == 0, res.output
    rates = {r["rate"]: r for r in json.loads(res.output)["rates"]}
    from calimon.deploy.io import read_scored_csv

    scored = read_scored_csv(one_class_run / "curve.csv", score="p_raw")
    benign = scored.scores[scored.labels == 0]
    assert rates["far"]["n"] == 40 and rates["far"]["k"] == int(np.sum(benign >= 0.6))
    assert rates["far"]["low"] <= rates["far"]["estimate"] <= rates["far"]["high"]
    text = cli("apply-policy", _policy(tmp_path), one_class_run / "curve.csv",
               "--out", tmp_path / "decisions.csv").output
    assert "FAR (benign auto-blocked)" in text and "95% interval" in text


def test_apply_policy_on_unlabelled_traffic_reports_the_block_rate(one_class_run, tmp_path):
    lines = (one_class_run / "curve.csv").read_text().splitlines()
    head = lines[0].split(",")
    col = head.index("label")
    unlabelled = [lines[0]] + [",".join(v if i != col else "" for i, v in
                                        enumerate(r.split(","))) for r in lines[1:]]
    path = tmp_path / "traffic.csv"
    path.write_text("\n".join(unlabelled) + "\n")
    res = cli("apply-policy", _policy(tmp_path), path, "--out", tmp_path / "d.csv", "--json")
    assert res.exit_code == 0, res.output
    (rate,) = json.loads(res.output)["rates"]
    assert rate["rate"] == "block_rate" and rate["n"] == 41


def test_a_saved_map_gives_a_benign_only_set_its_p_cal(tmp_path):
    """Fit maps on a labelled run, apply the saved Platt map to a benign-only set, and score
    it against a p_cal policy: the first-class use of measuring false alarms on clean traffic."""
    labelled, _ = scored_run(tmp_path / "labelled", 40, 40)
    saved = labelled / "calibration" / "platt.json"
    assert saved.is_file()
    out, summary = scored_run(tmp_path / "benign", 60, 0, calibration_map=saved)
    assert summary["score"] == "p_cal" and summary["calibration_method"] == "platt"
    assert summary["calibration"]["map"]["path"] == str(saved)
    res = cli("apply-policy", _policy(tmp_path, "p_cal"), out / "curve.csv",
              "--out", tmp_path / "d.csv", "--json")
    assert res.exit_code == 0, res.output
    (far,) = json.loads(res.output)["rates"]
    assert far["rate"] == "far" and far["n"] == 60


def test_report_between_the_two_minimums_reads_the_raw_score(tmp_path):
    out, _ = scored_run(tmp_path, 40, MIN_PER_CLASS_CURVE)
    res = cli("report", out, "--out", tmp_path / "report.html")
    assert res.exit_code == 0, res.output
    assert "calibration: no map was fitted" in res.output
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert page.count('class="cm-card"') == 50 and 'data-outcome="unscored"' not in page
