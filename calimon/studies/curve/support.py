"""`calimon curve` under the class-size rule of :mod:`calimon.numerics.class_support`.

- Below ``MIN_PER_CLASS_CURVE`` of either class: ``rates_only``: a run folder with no curve,
  AUROC or calibration map: ``curve.json`` holds the counts, the rule, the one-line reason and
  the FAR / MR of each class present at the ``--threshold`` values with exact Clopper-Pearson
  intervals; ``curve.csv`` holds every row (``p_cal`` only when a saved map is applied); no
  curve plots.
- Below ``MIN_PER_CLASS_CALIBRATION`` (in the set a map would be fitted on): no map is fitted
  (`calimon.studies.curve.maps.uncalibrated`) and the curve is drawn on the raw score.
- ``--calibration-map FILE``: a map saved by an earlier run is applied (never refitted), as in
  deployment: ``p_cal`` = the map of ``p_raw`` on every scored row. This is how a benign-only
  set gets the ``p_cal`` score a saved policy or threshold reads.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from calimon.curve_result import CurveResult, CurveScores
from calimon.numerics.class_support import Support, class_support, rates_at
from calimon.samples import Sample
from calimon.studies.curve.maps import applied_map, uncalibrated


def fit_support(fy: np.ndarray) -> Support:
    """The rule applied to the labels of the scored ``calib`` rows a map would be fitted on."""
    return class_support(int(fy.sum()), int((~fy).sum()), what="scored calib samples")


def rates_only(s, saved_map, *, fit_p: dict[str, float], kept: list[Sample],
               p_raw: np.ndarray, y: np.ndarray, support: Support, base: dict[str, Any]
               ) -> CurveResult:
    """The result of a set below the curve rule (module docstring), ``p_cal`` of each row
    only when ``saved_map`` (the `StoredMap` of ``s.calibration_map``) is applied. ``base``:
    the parts every run's result has (run, provenance, settings, counts, format mass, binary
    points); ``fit_p``: id -> p_raw of the scored ``calib`` rows."""
    p_cal_by_id: dict[str, float] = {}
    if saved_map is not None:
        cal = applied_map(s, saved_map, p_raw, y, fit_p, base["provenance"].as_dict())
        (score,) = cal.by_method.values()
        p_cal_by_id = {x.id: float(v) for x, v in zip(kept, score, strict=True)} | cal.fit_rows
        score_name, report = "p_cal", replace(cal.report, reason=support.reason)
    else:
        score, score_name = p_raw, "p_raw"
        report = uncalibrated(p_raw, y, support)
    method = report.methods[0] if report.methods else None
    return CurveResult(
        **{**base, "run": replace(base["run"], calibration=method or "none")},
        support=support, score=score_name, calibration_method=method,
        rates_at_thresholds=tuple(rates_at(score, y, s.rate_thresholds)), calibration=report,
        scores=CurveScores(p_cal=p_cal_by_id, p_raw=tuple(map(float, p_raw)),
                           labels=tuple(map(bool, y)), by_method={}))


__all__ = ["fit_support", "rates_only"]
