"""The files of a curve run: curve.json, curve.csv, curve.png, curves_by_group.png,
reliability.png, calibration/<method>.json and, for a token-head readout (probe:NAME),
token_scores.jsonl (the per-token scores the HTML report draws as a heat map).

The numbers come from `calimon.studies.curve.compute.compute_curve` (no I/O); this module loads the
saved map a run applies and writes what the result holds."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from calimon.curve_result import CurveResult
from calimon.errors import InvertedMapError
from calimon.run_folder import CurveRow, curve_json_doc, write_curve_csv, write_curve_json
from calimon.samples import Sample
from calimon.verdict import Verdict


def write_curve_outputs(out: Path, s, *, evaluate: list[Sample], fit: list[Sample],
                        readings: dict[str, Verdict], binary_set: list[Sample],
                        binary_readings: dict[str, dict[str, Verdict]], provenance: dict,
                        timing: dict | None = None, binary_checks: list | None = None) -> dict:
    """`write_curve_run`, returning curve.json's object instead of the typed result."""
    return curve_json_doc(write_curve_run(
        out, s, evaluate=evaluate, fit=fit, readings=readings, binary_set=binary_set,
        binary_readings=binary_readings, provenance=provenance, timing=timing,
        binary_checks=binary_checks))


def write_curve_run(out: Path, s, *, evaluate: list[Sample], fit: list[Sample],
                    readings: dict[str, Verdict], binary_set: list[Sample],
                    binary_readings: dict[str, dict[str, Verdict]], provenance: dict,
                    timing: dict | None = None, binary_checks: list | None = None
                    ) -> CurveResult:
    """Compute a curve run's result (`compute_curve`, the arguments are its own) and write its
    files into ``out``; returns the result. InputError: none scored; InvertedMapError: an
    inverted map without ``s.allow_inverted`` (the maps an earlier run left in ``out`` are
    removed, as no map of this run is saved)."""
    from calimon.studies.curve.compute import check_scored, compute_curve

    check_scored(evaluate, readings)
    saved = None
    if s.calibration_map:
        from calimon.calibration.io import load_map

        saved = load_map(s.calibration_map)
    try:
        result = compute_curve(s, evaluate=evaluate, fit=fit, readings=readings,
                               provenance=provenance, binary_set=binary_set,
                               binary_readings=binary_readings, timing=timing,
                               binary_checks=binary_checks or (), saved_map=saved)
    except InvertedMapError:
        if not s.calibration_map:
            shutil.rmtree(out / "calibration", ignore_errors=True)
        raise
    write_run_files(out, result, evaluate=evaluate, fit=fit, readings=readings)
    return result


def write_run_files(out: Path, result: CurveResult, *, evaluate: list[Sample],
                    fit: list[Sample], readings: dict[str, Verdict]) -> None:
    """Write a computed result's files into ``out`` (module docstring): its maps, curve.json,
    curve.csv (the evaluated rows, then the calib rows), token scores and plots (a run below
    the curve rule has none: plots an earlier run left are removed)."""
    from calimon.calibration.io import save_map
    from calimon.calibration.maps import calibrator_from_dict

    scores = result.scores
    if scores is None:
        raise ValueError("a result read from curve.json has no scores to write")
    if scores.maps:
        (out / "calibration").mkdir(exist_ok=True)
    for m in scores.maps:
        save_map(calibrator_from_dict(dict(m.params)), out / "calibration" / f"{m.method}.json",
                 fit_hash=m.fit_hash, metrics=dict(m.metrics), extra=dict(m.extra))
    write_curve_json(out / "curve.json", result)
    # the calib rows too (p_cal = the deployed map, fitted on them), so that the deployment
    # tools can certify on calib and report on the evaluated split from one file
    _write_csv(out / "curve.csv", [*evaluate, *fit], readings, dict(scores.p_cal))
    write_token_scores(out / "token_scores.jsonl", evaluate, readings)
    if result.has_curve:
        _plots(out, result)
        return
    for stale in ("curve.png", "curves_by_group.png", "reliability.png"):
        (out / stale).unlink(missing_ok=True)  # left by an earlier run into the same folder


def write_token_scores(path: Path, samples: list[Sample], readings: dict[str, Verdict]) -> int:
    """One ``{"id", "offsets", "scores"}`` line per sample whose reading carries a token head's
    per-token scores (``Verdict.extra["token_scores"]``); the file the report reads. Writes
    nothing (and leaves an existing file alone) when no reading has any. Returns the count."""
    lines = []
    for x in samples:
        v = readings.get(x.transcript_hash)
        tok = v.extra.get("token_scores") if v is not None else None
        if isinstance(tok, dict) and tok.get("offsets"):
            lines.append(json.dumps({"id": x.id, "offsets": tok["offsets"],
                                     "scores": tok["scores"]}, allow_nan=False) + "\n")
    if lines:
        path.write_text("".join(lines), encoding="utf-8")
    return len(lines)


def _write_csv(path: Path, samples: list[Sample], readings: dict[str, Verdict],
               p_cal: dict[str, float]) -> None:
    def row(x: Sample) -> CurveRow:
        v = readings.get(x.transcript_hash)
        return CurveRow(id=x.id, pair_id=x.pair_id, label=x.label, category=x.category,
                        task=x.task, split=x.split or "", status=v.status if v else "missing",
                        p_raw=v.p_raw if v is not None and v.scored else None,
                        p_cal=p_cal.get(x.id), format_mass=v.format_mass if v else None,
                        truncated=bool(v and v.truncation), source=x.source or "")

    write_curve_csv(path, (row(x) for x in samples))


def _plots(out: Path, result: CurveResult) -> None:
    from calimon.numerics.curves import Curve
    from calimon.plotting.curve import plot_curve_grid, plot_curves
    from calimon.plotting.reliability import plot_reliability

    st, scores = result.settings, result.scores
    title = f"{st.model} · {st.prompt}/{st.readout} · {st.benchmark}"
    curves = {k: Curve.from_data(c) for k, c in result.curves.items()}
    plot_curves(out / "curve.png", {"all (calibrated)": curves["all"]},
                binary_points=list(result.binary_points),
                operating_points=list(result.operating_points), title=title)
    plot_curve_grid(out / "curves_by_group.png", curves, title=title)
    plot_reliability(out / "reliability.png", np.array(scores.p_raw),
                     {m: np.array(v) for m, v in scores.by_method.items()},
                     np.array(scores.labels, dtype=bool), title=title,
                     chosen=result.calibration_method or st.values.get("calibration"))
