"""The calibration step of a curve run (no I/O): a saved map applied, no map (too few of a
class), maps fitted on the ``calib`` split, or maps cross-fitted within the evaluated set.
Each gives the calibrated scores by method, the `CalibrationReport` curve.json holds, the
``p_cal`` of the ``calib`` rows and the maps to save (`MapFile`)."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from calimon.curve_result import AppliedMap, CalibrationMetrics, CalibrationReport, MapFile
from calimon.numerics.class_support import Support
from calimon.numerics.metrics import calibration_report


@dataclass(frozen=True, eq=False)
class Calibrated:
    """What the calibration step found: each method's calibrated scores of the evaluated rows
    (empty: no map), the report, id -> p_cal of the ``calib`` rows, and the maps to save."""

    by_method: dict[str, np.ndarray]
    report: CalibrationReport
    fit_rows: dict[str, float] = field(default_factory=dict)
    maps: tuple[MapFile, ...] = ()


def metrics(d: dict[str, Any]) -> CalibrationMetrics:
    """`calibration_report`'s dict as `CalibrationMetrics` (NaN as None)."""
    return CalibrationMetrics(**{k: (None if isinstance(v, float) and not math.isfinite(v)
                                     else v) for k, v in d.items()})


def uncalibrated(p_raw: np.ndarray, y: np.ndarray, support: Support) -> CalibrationReport:
    """The report of a run that fits no map (too few of a class)."""
    return CalibrationReport(mode="not fitted", reason=support.reason,
                             metrics_before=metrics(calibration_report(p_raw, y)))


def applied_map(s, saved, p_raw: np.ndarray, y: np.ndarray, fit_p: dict[str, float],
                provenance: dict | None = None) -> Calibrated:
    """Apply ``saved`` (the `StoredMap` of ``s.calibration_map``, never refitted) to the
    evaluated scores and to ``fit_p`` (id -> p_raw of other scored rows). A map fitted for
    another model, prompt or readout than the run's ``provenance`` is refused
    (`calimon.provenance`) unless ``s.force``; what differed is recorded under ``forced``."""
    from calimon.provenance import meet

    forced = meet("calibration map", saved.extra, provenance or {},
                  force=getattr(s, "force", False), path=str(s.calibration_map))
    p_cal = np.clip(saved.predict(p_raw), 0.0, 1.0)
    ids = list(fit_p)
    other = np.clip(saved.predict(np.array([fit_p[i] for i in ids], dtype=float)), 0.0, 1.0) \
        if ids else np.empty(0)
    report = CalibrationReport(
        mode=f"saved map applied, not refitted: {s.calibration_map}",
        map=AppliedMap(str(s.calibration_map), saved.method, saved.fit_set_hash, saved.extra),
        methods=(saved.method,), metrics_before=metrics(calibration_report(p_raw, y)),
        metrics_after={saved.method: metrics(calibration_report(p_cal, y))},
        maps={saved.method: saved.calibrator.to_dict()}, forced=tuple(forced) or None)
    return Calibrated({saved.method: p_cal}, report,
                      {i: float(v) for i, v in zip(ids, other, strict=True)})


def map_extra(provenance: dict) -> dict:
    """What a saved map records of the run that fitted it."""
    return {k: provenance[k] for k in ("model", "model_revision", "prompt", "template_hash",
                                       "readout", "benchmark", "dataset_hash")}


def fit_on_calib(s, fkept: list, fp: np.ndarray, fy: np.ndarray, p_raw: np.ndarray,
                 y: np.ndarray, provenance: dict) -> Calibrated:
    """Each method fitted on the scored ``calib`` rows (``fkept``, ``fp``, ``fy``), applied to
    the evaluated split; ``fit_rows``: the ``calib`` rows' p_cal under ``s.calibration``."""
    from calimon.calibration.crossfit import fit_on_split
    from calimon.calibration.io import fit_set_hash

    fhash = fit_set_hash(fp, fy, [x.id for x in fkept])
    applied, after, maps, files, fit_rows = {}, {}, {}, [], {}
    for m in s.methods:
        cal, applied[m] = fit_on_split(m, fp, fy, p_raw)
        if m == s.calibration:
            fit_rows = {x.id: float(v) for x, v in zip(
                fkept, np.clip(cal.predict(fp), 0.0, 1.0), strict=True)}
        after[m] = calibration_report(applied[m], y)
        maps[m] = cal.to_dict()
        files.append(MapFile(m, maps[m], fhash, after[m], {
            **map_extra(provenance), "fit_split": "calib", "eval_split": s.split}))
    report = CalibrationReport(
        mode=f"fitted on split 'calib' ({len(fkept)} samples), applied to split {s.split!r}",
        methods=tuple(s.methods), metrics_before=metrics(calibration_report(p_raw, y)),
        metrics_after={m: metrics(d) for m, d in after.items()}, maps=maps)
    return Calibrated(applied, report, fit_rows, tuple(files))


def cross_fit(s, kept: list, p_raw: np.ndarray, y: np.ndarray, groups: np.ndarray,
              provenance: dict) -> Calibrated:
    """Each method cross-fitted within the evaluated set (pair-grouped folds, out-of-fold
    scores); the maps saved are those fitted on all of it."""
    from calimon.calibration.crossfit import calibrate
    from calimon.calibration.io import fit_set_hash

    result = calibrate(p_raw, y, groups, methods=s.methods, seed=s.seed)
    fhash = fit_set_hash(p_raw, y, [x.id for x in kept])
    maps = {m: result.maps[m].to_dict() for m in s.methods}
    report = CalibrationReport(
        mode="cross-fitted (pair-grouped, out-of-fold)", methods=tuple(result.methods),
        n_splits=result.n_splits, seed=result.seed, notes=tuple(result.notes),
        metrics_before=metrics(result.metrics_before),
        metrics_after={m: metrics(result.metrics_after[m]) for m in result.methods}, maps=maps)
    files = tuple(MapFile(m, maps[m], fhash, result.metrics_after[m], map_extra(provenance))
                  for m in s.methods)
    return Calibrated({m: np.asarray(result.oof[m]) for m in s.methods}, report, maps=files)


def calibrate_run(s, *, saved, fit: list, fit_set: tuple, fit_p: dict[str, float],
                  cal_support: Support, kept: list, p_raw: np.ndarray, y: np.ndarray,
                  groups: np.ndarray, provenance: dict) -> Calibrated:
    """The calibration step (module docstring); ``fit_set``: the scored ``calib`` rows as
    `calimon.readings.usable` gives them. The warnings the fits raise become the report's
    ``notes``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if saved is not None:
            out = applied_map(s, saved, p_raw, y, fit_p, provenance)
        elif not cal_support.calibration:
            out = Calibrated({}, uncalibrated(p_raw, y, cal_support))
        elif fit:
            out = fit_on_calib(s, *fit_set, p_raw, y, provenance)
        else:
            out = cross_fit(s, kept, p_raw, y, groups, provenance)
    notes = (*(out.report.notes or ()), *(str(w.message) for w in caught))
    return replace(out, report=replace(out.report, notes=notes))
