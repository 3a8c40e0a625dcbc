"""curve.json as a typed result: `compute_curve` (no I/O), the versioned writer and reader of
`calimon.run_folder`, files written before the format version (tests/data), and the generic
dataclass codec they rest on (`calimon.typed_json`)."""

from __future__ import annotations

import json
import math
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from conftest import toy_samples

from calimon.curve_result import (
    CURVE_JSON_VERSION,
    CurveData,
    CurveResult,
    GroupRow,
    OperatingPoint,
    Provenance,
    RunSettings,
)
from calimon.errors import InputError
from calimon.run_folder import (
    curve_json_doc,
    curve_result_from_doc,
    read_curve_json,
    write_curve_json,
)
from calimon.typed_json import NULL_INF, OMIT_NONE, REST, from_json, prefix, to_json

DATA = Path(__file__).parent / "data"
OLD_FILES = ("curve-0.1.0.json", "curve-rates-only-0.1.0.json")


# ------------------------------------------------------------------ files of today's format

@pytest.mark.parametrize("name", OLD_FILES)
def test_a_file_written_before_the_format_version_reads_as_version_1_and_writes_back_the_same(
        name, tmp_path):
    doc = json.loads((DATA / name).read_text())
    assert "format_version" not in doc
    result = read_curve_json(DATA / name)
    assert result.format_version == CURVE_JSON_VERSION
    again = curve_json_doc(result)
    assert list(again)[0] == "format_version"
    assert {k: v for k, v in again.items() if k != "format_version"} == doc
    write_curve_json(tmp_path / "curve.json", result)
    assert read_curve_json(tmp_path) == result  # a run folder reads as its curve.json


def test_the_typed_parts_of_an_old_file():
    r = read_curve_json(DATA / "curve-0.1.0.json")
    assert r.has_curve and r.score == "p_cal" and r.calibration_method == "platt"
    assert isinstance(r.point("FAR<=5%"), OperatingPoint) and r.point("nope") is None
    assert all(isinstance(p.threshold, float) for p in r.operating_points)
    assert r.thresholds[0] == math.inf and r.overall.thresholds[0] == math.inf  # null: +inf
    assert r.provenance.model == "toy" and r.provenance.defenses == ()
    assert r.settings.fars == (0.01, 0.05, 0.1) and r.settings.split is None
    assert r.timing.api_usage == {"requests": 3, "tokens": 120}
    assert [c.drawn for c in r.binary_checks] == [False]
    assert r.binary_points[0].n_parse_failure == 1
    undefined = next(g for g in r.groups if g.note)
    assert undefined.mr_at_far == {} and undefined.eer is None
    assert r.groups[0].mr_at(0.05) == r.point("FAR<=5%").mr
    assert r.metrics_after == r.calibration.metrics_after["platt"]
    rates = read_curve_json(DATA / "curve-rates-only-0.1.0.json")
    assert not rates.has_curve and rates.operating_points == () and rates.overall is None
    assert rates.calibration.map.method == "platt" and rates.calibration.notes is None


def test_the_demo_file_without_binary_checks_reads():
    doc = json.loads((DATA / "curve-0.1.0.json").read_text())
    del doc["binary_checks"]  # as written before the free-format check
    r = curve_result_from_doc(doc)
    assert r.binary_checks is None and "binary_checks" not in curve_json_doc(r)


# ------------------------------------------------------------------ refusals

def test_a_newer_format_version_is_refused_naming_the_file(tmp_path):
    doc = json.loads((DATA / "curve-0.1.0.json").read_text())
    path = tmp_path / "curve.json"
    path.write_text(json.dumps({"format_version": CURVE_JSON_VERSION + 1, **doc}))
    newer = f"format version {CURVE_JSON_VERSION + 1} is newer than this calimon"
    with pytest.raises(InputError, match=newer) as err:
        read_curve_json(path)
    assert str(path) in str(err.value) and "upgrade calimon" in str(err.value)
    path.write_text(json.dumps({**doc, "format_version": "1"}))
    with pytest.raises(InputError, match="format_version"):
        read_curve_json(path)


def test_a_wrong_value_names_its_key_and_the_file(tmp_path):
    doc = json.loads((DATA / "curve-0.1.0.json").read_text())
    doc["operating_points"][2]["mr"] = "low"
    path = tmp_path / "curve.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=r"operating_points\[2\]\.mr.*expected a number") as err:
        read_curve_json(path)
    assert str(path) in str(err.value)
    with pytest.raises(InputError, match="not a field of a curve.json"):
        curve_result_from_doc({"format": "calimon-calibration-map"})
    with pytest.raises(InputError, match=r"missing key 'curves': not a curve.json"):
        curve_result_from_doc({"provenance": {}}, required=("provenance", "curves"))
    with pytest.raises(InputError, match="provenance.max_input_tokens': expected int, got str"):
        curve_result_from_doc({"provenance": {"max_input_tokens": "many"}})
    with pytest.raises(InputError, match="cannot read this curve.json"):
        read_curve_json(tmp_path / "nothing")


# ------------------------------------------------------------------ compute_curve

def _inputs(n_pairs: int = 20, seed: int = 0):
    rng = random.Random(seed)
    from calimon.selection import dataset_hash
    from calimon.verdict import Verdict

    data = toy_samples(n_pairs)
    readings = {s.transcript_hash: Verdict(s.transcript_hash, "verdict", "ok", p_raw=min(
        0.99, max(0.01, rng.gauss(0.62 if s.label else 0.38, 0.17)))) for s in data}
    prov = {"model": "toy", "model_revision": "rev0", "prompt": "direct", "template_hash": "h",
            "readout": "verdict", "benchmark": "toy", "dataset_hash": dataset_hash(data)}
    return data, readings, prov


def test_compute_curve_writes_nothing_and_is_what_the_run_folder_holds(tmp_path, monkeypatch):
    from calimon.studies.curve.compute import compute_curve
    from calimon.studies.curve.outputs import write_curve_outputs
    from calimon.studies.curve.run import CurveSettings

    data, readings, prov = _inputs()
    s = CurveSettings(model="toy", benchmark="toy", n_boot=10, methods=("platt", "isotonic"),
                      binary_prompts=())
    monkeypatch.chdir(tmp_path)
    result = compute_curve(s, evaluate=data, fit=[], readings=readings, provenance=prov)
    assert list(tmp_path.iterdir()) == []  # no I/O
    assert result.scores is not None and [m.method for m in result.scores.maps] == [
        "platt", "isotonic"]
    assert len(result.scores.p_cal) == len(data) and result.has_curve
    out = tmp_path / "run"
    out.mkdir()
    with mock.patch("calimon.studies.curve.outputs._plots"):
        summary = write_curve_outputs(out, s, evaluate=data, fit=[], readings=readings,
                                      binary_set=[], binary_readings={}, provenance=prov)
    assert read_curve_json(out) == result and summary == curve_json_doc(result)
    assert json.loads((out / "curve.json").read_text()) == summary
    assert sorted(p.name for p in (out / "calibration").iterdir()) == [
        "isotonic.json", "platt.json"]


def test_the_curve_of_a_result_is_the_computed_one():
    from calimon.numerics.curves import Curve

    rng = np.random.default_rng(0)
    y = np.r_[np.ones(30, bool), np.zeros(30, bool)]
    c = Curve.from_scores(np.clip(rng.normal(0.3 + 0.4 * y, 0.2), 0, 1), y, n_boot=20)
    data = c.to_data()
    assert isinstance(data, CurveData) and to_json(data) == c.to_dict()
    back = Curve.from_data(from_json(CurveData, to_json(data)))
    assert back.to_dict() == c.to_dict() and back.at_far(0.1) == c.at_far(0.1)


def test_a_run_folder_result_reads_after_its_folder_moves(tmp_path):
    src = tmp_path / "a"
    src.mkdir()
    shutil.copy(DATA / "curve-0.1.0.json", src / "curve.json")
    moved = shutil.move(src, tmp_path / "b")
    assert read_curve_json(moved).provenance.dataset_hash


# ------------------------------------------------------------------ the generic codec

@dataclass(frozen=True)
class _Point:
    name: str
    threshold: float = field(metadata=NULL_INF)
    rate: float = math.nan
    note: str | None = field(default=None, metadata=OMIT_NONE)
    at: dict[str, float] = field(default_factory=dict, metadata=prefix("at_"))


@dataclass(frozen=True)
class _Open:
    values: dict = field(default_factory=dict, metadata=REST)


def test_the_codec_writes_what_the_metadata_says_and_reads_it_back():
    p = _Point("a", math.inf, math.nan, None, {"0.1": 0.5})
    assert to_json(p) == {"name": "a", "threshold": None, "rate": None, "at_0.1": 0.5}
    back = from_json(_Point, to_json(p))
    assert back.threshold == math.inf and math.isnan(back.rate) and back.at == {"0.1": 0.5}
    assert from_json(_Point, {"name": "b", "threshold": 1})  # an int reads as a float
    with pytest.raises(InputError, match="threshold.*expected a number, got a boolean"):
        from_json(_Point, {"name": "b", "threshold": True})
    with pytest.raises(InputError, match="missing key"):
        from_json(_Point, {"threshold": 0.5})
    assert to_json(from_json(_Open, {"b": 1, "a": [1, 2]})) == {"b": 1, "a": [1, 2]}


def test_open_records_keep_every_key_in_order_and_type_the_ones_read():
    prov = Provenance({"model": "m", "extra_key": {"x": 1}, "defenses": ["d"]})
    assert prov.model == "m" and prov.defenses == ("d",) and prov.readout is None
    assert list(to_json(prov)) == ["model", "extra_key", "defenses"]
    with pytest.raises(ValueError, match="offline: expected bool"):
        RunSettings({"offline": "yes"})


def test_a_field_added_to_a_part_needs_no_change_to_the_writer_or_reader():
    @dataclass(frozen=True)
    class Row(GroupRow):
        extra: float | None = None

    row = Row("all", 3, 4, 0.5, 0.6, mr_at_far={"0.05": 0.2}, eer=0.3, extra=0.9)
    assert to_json(row)["extra"] == 0.9 and from_json(Row, to_json(row)) == row
    assert CurveResult().format_version == CURVE_JSON_VERSION
