"""The shift study's fold and report on a small synthetic feature set (no model calls)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np

from calimon.scoring.probes.features import FeatureSet
from calimon.studies.shift.synthetic import synthetic_traffic

STUDY = Path(__file__).resolve().parents[1] / "benchmarks" / "shift"
sys.path.insert(0, str(STUDY))  # run_shift imports its sibling `extract`


def _load(name: str):
    """The study script ``name`` by path, under a unique module name: other benchmark folders
    have a ``report.py`` too, and whichever a test imported first would win by plain name."""
    spec = importlib.util.spec_from_file_location(f"shift_study_{name}", STUDY / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


report = _load("report")
run_shift = _load("run_shift")


def _features():
    groups = [("A", *synthetic_traffic(60, 0.1, 0, "a")), ("B", *synthetic_traffic(60, 0.9, 1, "b")),
              ("C", *synthetic_traffic(60, 0.5, 2, "c"))]
    samples = [dataclasses.replace(x, source=src) for src, ss, _ in groups for x in ss]
    n = len(samples)
    rng = np.random.default_rng(0)
    y = np.array([x.label for x in samples])
    pooled = rng.normal(size=(n, 3, 19, 8)).astype(np.float32)
    pooled[:, 1, 17, 0] += y
    verdict = np.full((n, 4), 0.5)
    verdict[:, 0] = np.concatenate([p for _, _, p in groups])
    verdict[0, 0] = np.nan  # an unreadable verdict is dropped and counted, never 0
    return FeatureSet(tuple(samples), pooled, verdict, np.ones(n, int), np.zeros(n, np.int8))


def test_fold_rows_and_the_report(tmp_path):
    fs = _features()
    rows = run_shift.fold(fs, "A", "verdict", 10, 0) + run_shift.fold(fs, "B", "head", 10, 0)
    assert len(rows) == 4 and {r["alpha"] for r in rows} == {0.05, 0.10}
    assert rows[0]["dropped_unscored"] == 1 and rows[2]["dropped_unscored"] == 0
    for r in rows:
        assert r["n_new"] == 120 - (r["source"] == "A") and 0 <= r["naive_far_new"] <= 1
        assert r["aware_abstained"] or r["aware_bound"] <= r["alpha"]
        assert r["naive_violated"] == (r["naive_certified"] and r["naive_far_new"] > r["naive_bound"])
        assert 1 / 11 <= r["p_value"] <= 1
    ctrl = run_shift.fold(fs, run_shift.CONTROL, "verdict", 10, 0)
    assert {r["source"] for r in ctrl} == {run_shift.CONTROL} and 0 < ctrl[0]["n_new"] < 120
    rows += ctrl
    res = {"settings": {"per_source": 60, "max_input_tokens": 384, "permutations": 10,
                        "alphas": [0.05, 0.1], "delta": 0.05, "layer": 17, "pooling": "mean"},
           "counts": {"A": {"n": 120, "n_benign": 60}}, "rows": rows, "calimon_version": "x",
           "wall_seconds": 1.0}
    src = tmp_path / "shift.json"
    src.write_text(json.dumps(res, default=float))
    out = tmp_path / "shift.md"
    assert report.main(["--results", str(src), "--out", str(out)]) == 0
    text = out.read_text()
    # two alphas in the per-fold table and two in the verdict table
    assert "## Targets, as measured" in text and text.count("\n| A | verdict |") == 4
    assert "## Harmful or harmless shift: the verdict against the realized FAR" in text
    assert all(r["verdict"] in ("no shift", "shift, certificate holds",
                                "shift breaks the certificate", "shift, not judged without labels",
                                "nothing to check") for r in rows)
    assert "Control (no shift" in text
