"""calimon.run_folder: curve.csv reproduces the curve in curve.json exactly."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.metrics import det_curve

from calimon.deploy.io import read_scored_csv
from calimon.errors import InputError
from calimon.numerics.class_support import MIN_PER_CLASS_CALIBRATION
from calimon.report.data import read_rows
from calimon.run_folder import (
    CURVE_COLUMNS,
    CURVE_CSV_VERSION,
    CurveRow,
    format_float,
    read_curve_csv,
    write_curve_csv,
)
from calimon.samples import Sample
from calimon.studies.curve.outputs import write_curve_outputs, write_token_scores
from calimon.studies.curve.run import CurveSettings
from calimon.verdict import Verdict

PROVENANCE = {"model": "toy", "model_revision": "rev0", "model_path": "/nowhere",
              "prompt": "direct", "template_hash": "h", "readout": "verdict", "benchmark": "toy",
              "dataset_hash": "0", "calimon_version": "test", "store": "none", "created": "-"}
# scores with every digit a double can carry, ties, and the ends of [0, 1]
SCORES = st.one_of(st.floats(0.0, 1.0, allow_nan=False),
                   st.sampled_from([0.0, 1.0, 0.5, 0.1234565, 0.12345650000000001]))


def _samples(pairs: list[tuple[float, float]], split: str | None, tag: str):
    samples, readings = [], {}
    for i, (p_bad, p_good) in enumerate(pairs):
        for label, p in ((True, p_bad), (False, p_good)):
            s = Sample(id=f"{tag}{i}-{'m' if label else 'b'}", request=f"q{tag}{i}",
                       response=f"r{label}", label=label, category="spec_gaming", task="code",
                       pair_id=f"{tag}{i}", split=split)
            samples.append(s)
            readings[s.transcript_hash] = Verdict(s.transcript_hash, "verdict", "ok", p_raw=p,
                                                  format_mass=p / 3)
    return samples, readings


def _write_run(out: Path, pairs, calib_pairs) -> dict:
    split = "test" if calib_pairs else None
    evaluate, readings = _samples(pairs, split, "e")
    fit, fit_readings = _samples(calib_pairs, "calib", "c") if calib_pairs else ([], {})
    # random scores rank either way: a map fitted decreasing is kept (recorded), since what
    # is checked here is that curve.csv reproduces curve.json, whatever the map's direction
    s = CurveSettings(model="toy", benchmark="toy", methods=("platt",), n_boot=0,
                      binary_prompts=(), split=split, allow_inverted=True)
    with mock.patch("calimon.studies.curve.outputs._plots"):  # the PNGs play no part here
        return write_curve_outputs(out, s, evaluate=evaluate, fit=fit,
                                   readings=readings | fit_readings, binary_set=[],
                                   binary_readings={}, provenance=PROVENANCE)


def _points(summary: dict) -> list[tuple[float, float, float]]:
    """(threshold, MR, FAR) of every named operating point and every point of the sweep."""
    named = [(p["threshold"], p["mr"], p["far"]) for p in summary["operating_points"]
             if p["threshold"] is not None]
    swept = list(zip(summary["thresholds"], summary["mr"], summary["far"], strict=True))
    return named + [t for t in swept if t[0] is not None]


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
# sized to the class-size rule (calimon.numerics.class_support): a curve and a fitted map on every draw
@given(pairs=st.lists(st.tuples(SCORES, SCORES), min_size=MIN_PER_CLASS_CALIBRATION,
                      max_size=40),
       calib=st.one_of(st.just([]), st.lists(st.tuples(SCORES, SCORES),
                                             min_size=MIN_PER_CLASS_CALIBRATION, max_size=30)))
def test_every_operating_point_of_curve_json_is_reproduced_from_curve_csv(pairs, calib):
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        _write_run(out, pairs, calib)
        summary = json.loads((out / "curve.json").read_text())
        assert summary["files"]["curve.csv"]["version"] == CURVE_CSV_VERSION
        scored = read_scored_csv(out / "curve.csv")
        if calib:
            scored = scored.subset(scored.splits == "test")
        report_rows = [r for r in read_rows(out / "curve.csv") if not calib or r.split == "test"]
        assert [r.p_cal for r in report_rows] == scored.scores.tolist()
        y, p = scored.labels.astype(int), scored.scores
        fpr, fnr, det_t = det_curve(y, p)
        det = {float(t): (f, m) for t, f, m in zip(det_t, fpr, fnr, strict=True)}
        n_pos, n_neg = int(y.sum()), int((1 - y).sum())
        for t, mr, far in _points(summary):
            assert scored.rates(t) == (mr, far), t  # the deployment tools' reader
            # scikit-learn on the same scores: t is one of its thresholds, except where
            # det_curve trims the ends (past the first MR == 0, before the last FAR == 0)
            if min(det) <= t <= max(det):
                f, m = det[t]
                assert (round(f * n_neg), round(m * n_pos)) == (round(far * n_neg),
                                                                round(mr * n_pos)), t
                assert math.isclose(f, far, abs_tol=1e-12) and math.isclose(m, mr,
                                                                            abs_tol=1e-12)
            else:
                assert (mr == 0.0) if t < min(det) else (far == 0.0), t
        for p in summary["operating_points"]:
            if p["threshold"] is not None:
                flag = p_ge = scored.scores >= p["threshold"]
                assert (int((flag & (y == 1)).sum()), int((p_ge & (y == 0)).sum())) == \
                    (p["tp"], p["fp"])


@given(st.lists(st.one_of(st.none(), SCORES), min_size=1, max_size=20))
def test_numbers_round_trip_exactly_and_missing_stays_missing(values):
    with tempfile.TemporaryDirectory() as tmp:
        rows = [CurveRow(id=f"s{i}", pair_id=f"p{i}", label=bool(i % 2), category="c",
                         task="t", split="test", status="ok" if v is not None else
                         "parse_failure", p_raw=v, p_cal=v, format_mass=v, truncated=bool(i % 3))
                for i, v in enumerate(values)]
        path = write_curve_csv(Path(tmp) / "curve.csv", rows)
        assert path.read_text().splitlines()[0] == ",".join(CURVE_COLUMNS)
        assert read_curve_csv(path) == tuple(rows)


def test_format_float_is_repr_and_empty_for_missing():
    assert format_float(0.1 + 0.2) == "0.30000000000000004"
    assert format_float(np.float64(1 / 3)) == repr(1 / 3)
    assert format_float(None) == format_float(math.nan) == ""


def test_token_scores_round_trip(tmp_path):
    from calimon.report.extras import read_token_scores

    s = Sample(id="a", request="q", response="one two", label=True, category="safety",
               task="qa", pair_id="a")
    scores = [0.1 + 0.2, 1 / 3]
    v = Verdict(s.transcript_hash, "probe:x", "ok", p_raw=0.5,
                extra={"token_scores": {"offsets": [[0, 3], [4, 7]], "scores": scores}})
    path = tmp_path / "token_scores.jsonl"
    assert write_token_scores(path, [s], {s.transcript_hash: v}) == 1
    got = read_token_scores(path, {"a": s}, [], explicit=True)
    assert list(got["a"].scores) == scores


def test_reader_errors_name_file_line_and_column(tmp_path):
    path = tmp_path / "curve.csv"
    path.write_text("id,status,p_cal\na,ok,1.5\n")
    with pytest.raises(InputError, match=r"curve.csv:2: field 'p_cal'"):
        read_curve_csv(path)
    path.write_text("id,p_cal\na,0.5\n")
    with pytest.raises(InputError, match=r"curve.csv:1: field 'status'.*calimon curve --out"):
        read_curve_csv(path)
