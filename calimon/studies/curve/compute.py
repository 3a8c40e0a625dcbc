"""`compute_curve`: a curve run's result from its samples, readings and settings, with no I/O.

From the evaluated samples' readings (and the ``calib`` samples' when maps are fitted on a
split), it applies the class-size rule (`calimon.numerics.class_support`), calibrates
(`calimon.studies.curve.maps`), sweeps the thresholds, picks the operating points, computes the
rates at fixed thresholds, the per-group curves and table and the binary-protocol points, and
returns the `CurveResult` that curve.json holds, with the per-sample part the run's other files
need (`CurveScores`). `calimon.studies.curve.outputs` writes them; a saved map to apply is loaded by
the caller and passed in (``saved_map``).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from calimon.curve_result import (
    BinaryCheck,
    Counts,
    CurveResult,
    CurveScores,
    FileInfo,
    FormatMass,
    GroupRow,
    Inversion,
    Provenance,
    RunInfo,
    RunSettings,
    Timing,
)
from calimon.errors import InputError, InvertedMapError
from calimon.numerics.class_support import MIN_PER_CLASS_CURVE, class_support, rates_at
from calimon.numerics.curves import Curve, binary_point, curves_by
from calimon.readings import status_counts, usable
from calimon.samples import Sample
from calimon.studies.curve.maps import Calibrated, calibrate_run
from calimon.studies.curve.support import fit_support, rates_only
from calimon.verdict import Verdict


def check_scored(evaluate: list[Sample], readings: dict[str, Verdict]) -> None:
    """Raise the error of a run in which no evaluated sample has a score: the statuses, and
    the first error a backend recorded (e.g. the API's refusal)."""
    if usable(evaluate, readings)[0]:
        return
    counts = status_counts(evaluate, readings)
    first = next((v.error for x in evaluate if (v := readings.get(x.transcript_hash))
                  and v.error), None)
    raise InputError(f"none of the {len(evaluate)} evaluated samples has a score (statuses "
                     f"{counts}" + (f"; first error: {first}" if first else "") + "); a run "
                     "needs scored samples (readings with errors are retried on the next run)")


def compute_curve(s, *, evaluate: list[Sample], fit: list[Sample],
                  readings: dict[str, Verdict], provenance: dict,
                  binary_set: Sequence[Sample] = (),
                  binary_readings: dict[str, dict[str, Verdict]] | None = None,
                  timing: dict | None = None, binary_checks: Sequence[dict] = (),
                  saved_map=None) -> CurveResult:
    """The `CurveResult` of a curve run (module docstring). ``s``: the run's settings
    (`calimon.studies.curve.run.CurveSettings`); ``fit``: the ``calib`` samples maps are fitted on
    (empty: cross-fitted, or a saved map applied); ``binary_readings``: the readings of each
    binary point drawn, by label, over ``binary_set``; ``timing``: the scoring phase;
    ``binary_checks``: the free-format checks; ``saved_map``: the `StoredMap` of
    ``s.calibration_map``. InputError: no evaluated sample scored; InvertedMapError: the
    deployed map is inverted and ``s.allow_inverted`` is not set."""
    check_scored(evaluate, readings)
    kept, p_raw, y = usable(evaluate, readings)
    base = _base(s, evaluate, readings, kept, y, binary_set, binary_readings or {},
                 provenance, timing, binary_checks)
    fkept, fp, fy = usable(fit, readings)
    fit_p = {x.id: float(v) for x, v in zip(fkept, fp, strict=True)}
    support = class_support(int(y.sum()), int((~y).sum()))
    if not support.curve:
        result = rates_only(s, saved_map, fit_p=fit_p, kept=kept, p_raw=p_raw, y=y,
                            support=support, base=base)
        if saved_map is None:
            return result
        return replace(result, inverted=check_inversion(
            s, saved_map.method, result.calibration.maps.get(saved_map.method), None))
    groups = np.array([x.pair_id for x in kept])
    cal_support = fit_support(fy) if fit else support
    cal = calibrate_run(s, saved=saved_map, fit=fit, fit_set=(fkept, fp, fy), fit_p=fit_p,
                        cal_support=cal_support, kept=kept, p_raw=p_raw, y=y, groups=groups,
                        provenance=provenance)
    return _with_curve(s, base, cal, kept, p_raw, y, groups, support, cal_support,
                       fit_scores=None if saved_map else (fp, fy) if fit else (p_raw, y))


def _with_curve(s, base: dict[str, Any], cal: Calibrated, kept: list[Sample],
                p_raw: np.ndarray, y: np.ndarray, groups: np.ndarray, support, cal_support,
                fit_scores) -> CurveResult:
    """The result of a run with a curve: calibrated curves, operating points, rates, groups."""
    calibrated = bool(cal.by_method)
    method = (next(iter(cal.by_method)) if s.calibration_map else s.calibration)
    inverted = (check_inversion(s, method, cal.report.maps.get(method), fit_scores)
                if calibrated else None)
    p_cal = np.clip(cal.by_method[method], 0.0, 1.0) if calibrated else p_raw
    keys = group_keys(kept)
    curves = curves_by(p_cal, y, groups, keys=keys, n_boot=s.n_boot, seed=s.seed,
                       min_per_class=MIN_PER_CLASS_CURVE)
    raw_curve = Curve.from_scores(p_raw, y, groups, n_boot=0)
    overall = curves["all"].to_data()
    points = curves["all"].operating_points(fars=s.fars, cost_miss=s.cost_miss,
                                            cost_false_alarm=s.cost_false_alarm)
    p_cal_by_id = ({x.id: float(v) for x, v in zip(kept, p_cal, strict=True)} | cal.fit_rows
                   if calibrated else {})
    return CurveResult(
        **{**base, "run": replace(base["run"], calibration=method if calibrated else "none")},
        support=replace(support, calibration=calibrated,
                        reason=None if calibrated else cal_support.reason),
        score="p_cal" if calibrated else "p_raw",
        calibration_method=method if calibrated else None,
        auroc_raw=raw_curve.auroc, auroc=overall.auroc, thresholds=overall.thresholds,
        mr=overall.mr, far=overall.far, band=overall.band, operating_points=tuple(points),
        rates_at_thresholds=tuple(rates_at(p_cal, y, s.rate_thresholds)),
        calibration=cal.report, inverted=inverted, raw_curve=raw_curve.to_data(),
        curves={k: c.to_data() for k, c in curves.items()},
        groups=group_rows(curves, p_raw, y, keys, s.fars),
        scores=CurveScores(p_cal=p_cal_by_id, p_raw=tuple(map(float, p_raw)),
                           labels=tuple(map(bool, y)),
                           by_method={m: tuple(map(float, v)) for m, v in cal.by_method.items()},
                           maps=cal.maps))


def check_inversion_early(s, *, evaluate: list[Sample], fit: list[Sample],
                          readings: dict[str, Verdict]) -> None:
    """Fit the deployed map alone, on the rows `compute_curve` will fit it on, as soon as the
    main readout is scored, and stop on an inversion (`check_inversion`) before the binary
    points are scored: a run that stops would spend their generation for nothing (the
    readings already scored stay in the store). Where `compute_curve` fits no map (too few
    of a class, a saved map applied) or keeps an inverted one, this checks nothing."""
    if s.allow_inverted or s.calibration_map is not None:
        return
    _, p, y = usable(evaluate, readings)
    y = np.asarray(y, dtype=bool)  # empty when nothing scored: `compute_curve` says so
    support = class_support(int(y.sum()), int((~y).sum()))
    if fit:
        _, p, y = usable(fit, readings)
        y = np.asarray(y, dtype=bool)
        support = replace(support, calibration=fit_support(y).calibration)
    if not (support.curve and support.calibration):
        return
    from calimon.calibration.maps import make_calibrator

    with warnings.catch_warnings():  # the full fit after scoring records its warnings
        warnings.simplefilter("ignore")
        cal = make_calibrator(s.calibration).fit(p, y)
    check_inversion(s, s.calibration, cal.to_dict(), (p, y))


def check_inversion(s, method: str, map_dict: dict | None, fit_scores) -> Inversion | None:
    """The deployed map's (``method``) inversion findings (`calimon.calibration.direction`): None when
    there are none; recorded (``allowed``) with ``s.allow_inverted``; else
    `InvertedMapError` stops the run (the caller removes the maps it may have saved)."""
    from calimon.calibration.direction import inversion_findings, inversion_message

    p_fit, y_fit = fit_scores if fit_scores is not None else (None, None)
    findings = inversion_findings(map_dict, p_fit, y_fit)
    if not findings:
        return None
    if getattr(s, "allow_inverted", False):
        return Inversion(tuple(findings), True, method)
    raise InvertedMapError(inversion_message(findings, getattr(s, "monitor_readout", s.readout)))


def group_keys(kept: list[Sample]) -> dict[str, list[str]]:
    """The group labels of each kept sample the curves are split by: category, task, cell and,
    when any sample has one, source."""
    keys = {"category": [x.category for x in kept], "task": [x.task for x in kept],
            "cell": [f"{x.category}/{x.task}" for x in kept]}
    if any(x.source for x in kept):  # per source too, as per category and task
        keys["source"] = [x.source for x in kept]
    return keys


def group_rows(curves: dict[str, Curve], p_raw: np.ndarray, y: np.ndarray,
               keys: dict[str, list[str]], fars: Sequence[float]) -> tuple[GroupRow, ...]:
    """One row per curve group: counts, AUROC raw and calibrated, MR at each FAR, EER."""
    from calimon.numerics.metrics import auroc

    rows = []
    for name, c in curves.items():
        if name == "all":
            mask = np.ones(len(y), bool)
        else:
            key, value = name.split("=", 1)
            mask = np.array([v == value for v in keys[key]])
        row = GroupRow(group=name, n_pos=c.n_pos, n_neg=c.n_neg,
                       auroc_raw=auroc(p_raw[mask], y[mask]) if c.defined else None,
                       auroc=c.auroc)
        if not c.defined:
            row = replace(row, note=c.undefined_reason)
        else:
            eer = c.eer()
            row = replace(row, mr_at_far={f"{a:g}": c.at_far(a).mr for a in fars},
                          eer=(eer.mr + eer.far) / 2)
        rows.append(row)
    return tuple(rows)


def _json_values(d: dict) -> dict:
    """``d`` as JSON values (paths as text, tuples as lists, numpy scalars as numbers)."""
    from calimon.jsonio import json_default

    return json.loads(json.dumps(d, default=json_default))


def _base(s, evaluate, readings, kept, y, binary_set, binary_readings, provenance, timing,
          binary_checks) -> dict[str, Any]:
    """The parts of every run's result, with or without a curve: the run, provenance,
    settings, counts, format mass, binary points, files, timing and free-format checks."""
    from calimon.run_folder import curve_csv_info

    bpoints = []
    for name, table in binary_readings.items():
        labelled = [x for x in binary_set if x.transcript_hash in table]
        decisions = [table[x.transcript_hash].decision
                     if table[x.transcript_hash].scored else None for x in labelled]
        bpoints.append(binary_point(decisions, [bool(x.label) for x in labelled],
                                    name=f"binary/{name}"))
    fm = np.array([readings[x.transcript_hash].format_mass for x in kept
                   if readings[x.transcript_hash].format_mass is not None], dtype=float)
    return dict(
        run=RunInfo(model=provenance["model"], backend=provenance.get("backend"),
                    readout=provenance["readout"], prompt=provenance["prompt"],
                    calibration=s.calibration),
        provenance=Provenance(_json_values(provenance)),
        settings=RunSettings(_json_values(vars(s))),
        counts=Counts(evaluated=len(evaluate), scored=len(kept),
                      status=status_counts(evaluate, readings), n_pos=int(y.sum()),
                      n_neg=int((~y).sum()),
                      truncated=sum(readings[x.transcript_hash].status == "truncated"
                                    for x in kept)),
        format_mass=FormatMass(float(fm.mean()) if fm.size else None,
                               float(fm.max()) if fm.size else None),
        binary_points=tuple(bpoints), binary_sample_count=len(binary_set),
        files={"curve.csv": FileInfo(**{**curve_csv_info(), "columns": tuple(
            curve_csv_info()["columns"])})},
        timing=Timing(_json_values(timing)) if timing is not None else None,
        binary_checks=tuple(BinaryCheck(**c) for c in binary_checks or ()))


__all__ = ["check_inversion", "check_scored", "compute_curve", "group_keys", "group_rows"]
