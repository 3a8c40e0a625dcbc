"""How many samples of each class a result needs, and what is estimable below that.

The rule (one place; ``calimon curve``, ``calimon apply-policy`` and the docs read it here):

- **A curve** (the MR/FAR sweep, its bands and operating points, AUROC, per-group AUROC) needs
  at least ``MIN_PER_CLASS_CURVE`` = 10 scored samples of *each* class. MR moves in steps of
  ``1 / n_pos`` and FAR in steps of ``1 / n_neg``; below 10 a single sample moves a rate by more
  than 10 points and the exact two-sided 95% interval around any point of the axis is wider than
  0.3 (10 samples, 0 events: [0, 0.31]; 5 events: [0.19, 0.81]). AUROC averages over
  ``n_pos * n_neg`` pairs, each rare sample weighing ``1 / n_rare``: with one misbehaving
  transcript it is the rank of that one transcript among the benign ones, not a property of the
  monitor.
- **A calibration map** (cross-fitted out-of-fold, or fitted on a ``calib`` split) needs at
  least ``MIN_PER_CLASS_CALIBRATION`` = 20 of each class in the set it is fitted on.
  Cross-fitting uses 5 pair-grouped folds: with 20 per class every training fold keeps at
  least 16 of each and every held-out fold about 4 of each. With fewer, a 2- (Platt) or
  3-parameter (beta) fit on a nearly separable training fold runs to 0/1, and isotonic or
  histogram maps have bins holding a single sample of the rare class.

Below the curve rule, what is still estimable is a **rate at a threshold fixed in advance**:
the FAR over the benign samples (and the MR over the misbehaving ones) with an exact
Clopper-Pearson interval (``rates_at``). Its width is set by that class's own count only, so
440 benign transcripts give a FAR interval of a few points whatever the number of misbehaving
ones. That is the honest measure of a monitor's false alarms on clean traffic.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from calimon.curve_result import RateAt, Support
from calimon.errors import InputError

MIN_PER_CLASS_CURVE = 10
MIN_PER_CLASS_CALIBRATION = 20
RATE_LEVEL = 0.95  # two-sided level of the Clopper-Pearson intervals of ``rates_at``


def _counts(n_pos: int, n_neg: int) -> str:
    return f"{n_pos} misbehaving and {n_neg} benign"


def class_support(n_pos: int, n_neg: int, *, what: str = "scored samples") -> Support:
    """Apply the rule (module docstring) to the class counts of one set."""
    for v, name in ((n_pos, "n_pos"), (n_neg, "n_neg")):
        if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 0:
            raise InputError(f"expected an integer >= 0, got {v!r}", field=name)
    rare = min(n_pos, n_neg)
    curve = rare >= MIN_PER_CLASS_CURVE
    calibration = rare >= MIN_PER_CLASS_CALIBRATION
    reason = None
    if not curve:
        reason = (f"{_counts(n_pos, n_neg)} {what}: no curve, AUROC or calibration map, which "
                  f"need at least {MIN_PER_CLASS_CURVE} (curve) and "
                  f"{MIN_PER_CLASS_CALIBRATION} (calibration) of each class; shown instead: "
                  f"the rate of each class present at fixed thresholds, with exact intervals")
    elif not calibration:
        reason = (f"{_counts(n_pos, n_neg)} {what}: no calibration map, which needs at least "
                  f"{MIN_PER_CLASS_CALIBRATION} of each class; the curve is drawn on the raw "
                  f"score")
    return Support(int(n_pos), int(n_neg), curve, calibration, reason,
                   MIN_PER_CLASS_CURVE, MIN_PER_CLASS_CALIBRATION)


def rate_interval(rate: str, threshold: float, k: int, n: int,
                  level: float = RATE_LEVEL) -> RateAt:
    """``k`` errors in ``n`` samples of one class, with their exact interval."""
    from calimon.numerics.binomial import clopper_pearson

    low, high = clopper_pearson(int(k), int(n), level)
    return RateAt(rate, float(threshold), int(k), int(n), k / n, low, high, float(level))


def rates_at(scores: Any, labels: Any, thresholds: Any,
             level: float = RATE_LEVEL) -> list[RateAt]:
    """FAR (over the benign samples) and MR (over the misbehaving ones) at each threshold, for
    each class present, with exact Clopper-Pearson intervals; a class with no sample is left out
    (its rate is undefined, never 0). ``labels``: True/1 misbehaving, False/0 benign."""
    s = np.asarray(scores, dtype=float)
    y = np.asarray(labels, dtype=bool)
    if s.ndim != 1 or y.shape != s.shape or not np.all(np.isfinite(s)):
        raise InputError("expected finite scores and one label per score", field="scores")
    out = []
    for t in thresholds:
        if not isinstance(t, int | float | np.floating) or math.isnan(t):
            raise InputError(f"expected a number, got {t!r}", field="thresholds")
        flag = s >= t
        if (~y).any():
            out.append(rate_interval("far", t, int(np.sum(flag & ~y)), int(np.sum(~y)), level))
        if y.any():
            out.append(rate_interval("mr", t, int(np.sum(~flag & y)), int(np.sum(y)), level))
    return out


def policy_rates(actions: Any, labels: Any, t_low: float, t_high: float,
                 level: float = RATE_LEVEL) -> list[RateAt]:
    """What an escalation policy realized on scored rows, with exact intervals: ``far`` =
    benign auto-blocked (at ``t_high``), ``mr`` = misbehaving auto-passed (at ``t_low``), for
    each class present; on rows without a label, ``block_rate`` = auto-blocked (the FAR, if that
    traffic is known to be benign). ``labels``: 1, 0 or -1 (unknown) per row."""
    a = np.asarray(actions, dtype=object)
    y = np.asarray(labels)
    out = []
    for rate, cls, action, t in (("far", 0, "auto_block", t_high), ("mr", 1, "auto_pass", t_low),
                                 ("block_rate", -1, "auto_block", t_high)):
        rows = y == cls
        if rows.any():
            out.append(rate_interval(rate, t, int(np.sum(a[rows] == action)), int(rows.sum()),
                                     level))
    return out
