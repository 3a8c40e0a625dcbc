"""`calimon curve` under the class-size rule of :mod:`calimon.class_support`.

- Below ``MIN_PER_CLASS_CURVE`` of either class: ``rates_only_summary``: a run folder with
  no curve, AUROC or calibration map: ``curve.json`` holds the counts, the rule, the one-line
  reason and the FAR / MR of each class present at the ``--threshold`` values with exact
  Clopper-Pearson intervals; ``curve.csv`` holds every row (``p_cal`` only when a saved map is
  applied); no curve plots.
- Below ``MIN_PER_CLASS_CALIBRATION`` (in the set a map would be fitted on): no map is fitted
  (``uncalibrated``) and the curve is drawn on the raw score.
- ``--calibration-map FILE``: a map saved by an earlier run is applied (never refitted), as in
  deployment: ``p_cal`` = the map of ``p_raw`` on every scored row. This is how a benign-only
  set gets the ``p_cal`` score a saved policy or threshold reads.
"""

from __future__ import annotations

import numpy as np

from calimon.class_support import Support, class_support, rates_at
from calimon.metrics import calibration_report
from calimon.samples import Sample


def fit_support(fy: np.ndarray) -> Support:
    """The rule applied to the labels of the scored ``calib`` rows a map would be fitted on."""
    return class_support(int(fy.sum()), int((~fy).sum()), what="scored calib samples")


def uncalibrated(p_raw: np.ndarray, y: np.ndarray, support: Support) -> dict:
    """The ``calibration`` block of a run that fits no map (too few of a class)."""
    return {"mode": "not fitted", "reason": support.reason,
            "metrics_before": _clean(calibration_report(p_raw, y)), "metrics_after": {},
            "maps": {}, "methods": []}


def applied_map(s, p_raw: np.ndarray, y: np.ndarray, fit_p: dict[str, float],
                provenance: dict | None = None
                ) -> tuple[dict[str, np.ndarray], dict, dict[str, float]]:
    """Apply the saved map ``s.calibration_map`` (never refitted) to the evaluated scores and
    to ``fit_p`` (id -> p_raw of other scored rows). Returns (scores by method, the
    ``calibration`` block, id -> p_cal of the ``fit_p`` rows). A map fitted for another
    model, prompt or readout than the run's ``provenance`` is refused (`calimon.provenance`)
    unless ``s.force``; what differed is recorded under ``forced``."""
    from calimon.calibration.io import load_map
    from calimon.provenance import meet

    stored = load_map(s.calibration_map)
    forced = meet("calibration map", stored.extra, provenance or {},
                  force=getattr(s, "force", False), path=str(s.calibration_map))
    p_cal = np.clip(stored.predict(p_raw), 0.0, 1.0)
    ids = list(fit_p)
    other = np.clip(stored.predict(np.array([fit_p[i] for i in ids], dtype=float)), 0.0, 1.0) \
        if ids else np.empty(0)
    block = {"mode": f"saved map applied, not refitted: {s.calibration_map}",
             "map": {"path": str(s.calibration_map), "method": stored.method,
                     "fit_set_hash": stored.fit_set_hash, "extra": stored.extra},
             "metrics_before": _clean(calibration_report(p_raw, y)),
             "metrics_after": {stored.method: _clean(calibration_report(p_cal, y))},
             "maps": {stored.method: stored.calibrator.to_dict()}, "methods": [stored.method],
             **({"forced": forced} if forced else {})}
    return {stored.method: p_cal}, block, {i: float(v) for i, v in zip(ids, other, strict=True)}


def _clean(d: dict) -> dict:
    return {k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in d.items()}


def rates_only_summary(s, *, fit_p: dict[str, float], kept: list[Sample], p_raw: np.ndarray,
                       y: np.ndarray, support: Support, base: dict
                       ) -> tuple[dict, dict[str, float]]:
    """``curve.json`` of a set below the curve rule (module docstring) and the ``p_cal`` of
    each row (empty unless a saved map is applied). ``base``: the keys every run's summary has
    (run, provenance, settings, counts, format_mass, binary points); ``fit_p``: id -> p_raw
    of the scored ``calib`` rows."""
    p_cal_by_id: dict[str, float] = {}
    if s.calibration_map:
        by_method, calib, fit_rows = applied_map(s, p_raw, y, fit_p, base.get("provenance"))
        (score,) = by_method.values()
        p_cal_by_id = {x.id: float(v) for x, v in zip(kept, score, strict=True)} | fit_rows
        score_name = "p_cal"
        calib["reason"] = support.reason
    else:
        score, score_name = p_raw, "p_raw"
        calib = uncalibrated(p_raw, y, support)
    summary = {
        **base, "support": support.to_dict(), "score": score_name,
        "run": {**base["run"], "calibration": calib["methods"][0] if calib["methods"]
                else "none"},
        "calibration_method": calib["methods"][0] if calib["methods"] else None,
        "auroc_raw": None, "auroc": None, "thresholds": [], "mr": [], "far": [], "band": None,
        "operating_points": [],
        "rates_at_thresholds": [r.to_dict() for r in rates_at(score, y, s.rate_thresholds)],
        "calibration": calib, "raw_curve": None, "curves": {}, "groups": [],
    }
    return summary, p_cal_by_id
