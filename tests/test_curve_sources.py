"""`calimon curve` breaks curves down per source, as per category and task (stand-in backend)."""

import csv
import dataclasses
import json

from conftest import toy_samples
from test_pipeline import RecordingBackend, _curve_cli

from calimon.samples import write_samples


def test_curve_groups_and_csv_carry_the_source(smol, tmp_path, monkeypatch):
    monkeypatch.setattr("calimon.scoring.backends.transformers_backend.TransformersBackend",
                        RecordingBackend)
    # 12 pairs: a curve needs 10 of each class (calimon.numerics.class_support)
    samples = [dataclasses.replace(s, source="alpha" if i < 12 else "beta")
               for i, s in enumerate(toy_samples(12))]
    bench = write_samples(samples, tmp_path / "toy.jsonl")
    res = _curve_cli(smol, bench, tmp_path)
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "run" / "curve.json").read_text())
    assert {"source=alpha", "source=beta"} <= set(doc["curves"])
    rows = {r["group"]: r for r in doc["groups"]}
    assert rows["source=alpha"]["n_pos"] + rows["source=alpha"]["n_neg"] == 12
    with open(tmp_path / "run" / "curve.csv", newline="") as fh:
        got = {r["id"]: r["source"] for r in csv.DictReader(fh)}
    assert got == {s.id: s.source for s in samples}


def test_curve_without_sources_has_no_source_groups(smol, tmp_path, monkeypatch):
    monkeypatch.setattr("calimon.scoring.backends.transformers_backend.TransformersBackend",
                        RecordingBackend)
    bench = write_samples(toy_samples(12), tmp_path / "toy.jsonl")
    assert _curve_cli(smol, bench, tmp_path).exit_code == 0
    doc = json.loads((tmp_path / "run" / "curve.json").read_text())
    assert not any(k.startswith("source=") for k in doc["curves"])
