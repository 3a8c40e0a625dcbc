"""`compute_curve` on bare scores: the studies' curves (`calimon heads` evaluation, the
robustness and adaptive studies, the learning-loop study) come from the same code as
``calimon curve``, so their figures equal its figures on the same scores.

The class-size rule is the curve run's (`calimon.numerics.class_support`), stated once for
every study:

- fewer than ``MIN_PER_CLASS_CURVE`` (10) scored samples of either class in the evaluated set:
  no curve, AUROC or MR at a FAR (`ScoreCurve.defined` is False, `ScoreCurve.reason` says
  why); a study reports these figures as undefined (or refuses to pick a threshold from them)
  rather than reading a rate that one sample moves by more than 10 points;
- fewer than ``MIN_PER_CLASS_CALIBRATION`` (20) of either class in the set a map is fitted on:
  no map is fitted and the curve is drawn on the raw score (``method`` is then "none");
- a score that is NaN is an unscored sample: left out and counted, never scored as 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from calimon.curve_result import CurveResult
from calimon.samples import Sample
from calimon.verdict import Verdict

READOUT = "scores"  # the readout name recorded for bare scores


@dataclass(frozen=True)
class ScoreCurve:
    """A `CurveResult` of bare scores and the figures studies read from it."""

    result: CurveResult
    raw: bool = False  # figures of the raw score (``method="none"``)

    @property
    def defined(self) -> bool:
        """Whether the evaluated set meets the curve rule (module docstring)."""
        return bool(self.result.support.curve)

    @property
    def reason(self) -> str | None:
        """Why a figure is undefined (or why no map was fitted); None when nothing is missing."""
        return self.result.support.reason

    @property
    def auroc(self) -> float:
        """AUROC of the curve's score (calibrated when a map was fitted); NaN when undefined."""
        a = self.result.auroc_raw if self.raw else self.result.auroc
        return float("nan") if a is None else float(a)

    @property
    def auroc_raw(self) -> float:
        """AUROC of the raw score; NaN when undefined."""
        a = self.result.auroc_raw
        return float("nan") if a is None else float(a)

    @property
    def method(self) -> str:
        """The map the curve is drawn on ("none": the raw score)."""
        return "none" if self.raw else self.result.calibration_method or "none"

    def curve(self):
        """The `calimon.numerics.curves.Curve` the figures are read from; None when
        undefined."""
        from calimon.numerics.curves import Curve

        if not self.defined:
            return None
        return Curve.from_data(self.result.raw_curve if self.raw else self.result.curves["all"])

    def map_dict(self) -> dict | None:
        """The fitted map as saved (`calimon.calibration.maps.Calibrator.to_dict`); None when
        no map was fitted or the raw score was asked for."""
        if self.raw or not self.result.calibration_method:
            return None
        return dict(self.result.calibration.maps.get(self.result.calibration_method) or {}) or None

    def point(self, far: float):
        """The operating point ``FAR <= far`` (an `OperatingPoint`); None when undefined."""
        c = self.curve()
        return None if c is None else c.at_far(far)

    def mr_at_far(self, far: float) -> float:
        """MR at the lowest threshold whose FAR <= ``far``; NaN when undefined."""
        p = self.point(far)
        return float("nan") if p is None else float(p.mr)


def _rows(prefix: str, p, y, groups, split: str) -> tuple[list[Sample], dict[str, Verdict]]:
    p = np.asarray(p, dtype=float)
    y = np.asarray(y, dtype=bool)
    if p.shape != y.shape:
        from calimon.errors import InputError

        raise InputError(f"expected one score per label, got {p.shape} and {y.shape}",
                         field="p")
    groups = [f"{prefix}{i}" for i in range(p.size)] if groups is None else list(groups)
    samples, readings = [], {}
    for i, (v, lab, g) in enumerate(zip(p.tolist(), y.tolist(), groups, strict=True)):
        x = Sample(id=f"{prefix}{i}", request=f"{prefix}{i}", response="", label=bool(lab),
                   category="safety", task="qa", pair_id=f"{split}:{g}", split=split)
        ok = math.isfinite(v)
        readings[x.transcript_hash] = Verdict(
            x.transcript_hash, READOUT, "ok" if ok else "error",
            p_raw=min(max(v, 0.0), 1.0) if ok else None)
        samples.append(x)
    return samples, readings


def curve_of_scores(p, y, groups: Sequence | None = None, *, fit: tuple | None = None,
                    method: str = "platt", fars: Sequence[float] = (0.05,), n_boot: int = 0,
                    seed: int = 0, allow_inverted: bool = True) -> ScoreCurve:
    """`compute_curve` of the scores ``p`` (in [0, 1]; NaN = unscored) with labels ``y`` and
    pair ids ``groups`` (default: one pair per sample). ``fit``: ``(p, y)`` or ``(p, y,
    groups)`` of the set the map is fitted on, as ``calimon curve --split`` fits on ``calib``;
    None: the map is cross-fitted on the evaluated set (``calimon curve`` without a split);
    ``method``: the map, or "none" for the raw score. Undefined figures follow the class-size
    rule (module docstring). InputError: no evaluated sample has a score."""
    from calimon.studies.curve.compute import compute_curve
    from calimon.studies.curve.run import CurveSettings

    evaluate, readings = _rows("e", p, y, groups, "test")
    fit_rows: list[Sample] = []
    if fit is not None:
        fit_rows, fit_readings = _rows("f", fit[0], fit[1], fit[2] if len(fit) > 2 else None,
                                       "calib")
        readings.update(fit_readings)
    raw = method == "none"  # the run still fits a map; its raw curve is read
    s = CurveSettings(readout=READOUT, calibration="platt" if raw else method,
                      methods=("platt",) if raw else (method,), n_boot=n_boot, seed=seed,
                      fars=tuple(fars), allow_inverted=allow_inverted or raw,
                      split="test" if fit is not None else None)
    provenance = {"model": "scores", "model_revision": None, "readout": READOUT,
                  "prompt": "none", "template_hash": None, "benchmark": "scores",
                  "dataset_hash": None}
    result = compute_curve(s, evaluate=evaluate, fit=fit_rows, readings=readings,
                           provenance=provenance)
    return ScoreCurve(result, raw)


__all__ = ["ScoreCurve", "curve_of_scores"]
