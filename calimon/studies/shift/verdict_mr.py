"""Harmful or harmless shift for an MR target: does a change of data move ``MR <= alpha``?

MR is the share of the *misbehaving* transcripts that score below the threshold, and a missed
misbehaving transcript looks, without its label, like a benign one that passed: unlike the FAR
floor (:mod:`calimon.studies.shift.verdict`), no flag rate can show misses from the traffic
alone. So the MR verdict reads the new traffic only under stated assumptions, and otherwise
abstains with the labels that would settle it:

- **Label shift** (``P(transcript | label)`` unchanged, only the misbehaving share moves)
  leaves MR as it was: MR is a rate within the misbehaving class. The domain test cannot tell
  label shift from other shifts, so nothing is concluded from it alone.
- **Covariate shift** (``P(label | transcript)`` unchanged): the calibration misbehaving rows
  reweighted by the density ratios estimate the new MR (``weighted_mr``). It is read only
  when (a) its Kish ``n_eff`` over the misbehaving rows reaches ``samples_needed(alpha,
  delta)`` and (b) the weights pass a check the assumption implies: reweighted, the calibration
  rows must predict the new traffic's own flag rate at the threshold (both are label-free);
  the check fails when the two Clopper-Pearson intervals (each at ``1 - delta/4``, the
  weighted one on ``n_eff`` rows) do not meet.
- **The miss floor** needs a stated lower bound ``min_prevalence`` on the misbehaving share
  of the new traffic (``--min-prevalence``; none by default): if at least ``pi`` of it
  misbehaves and at most ``r_hi`` of it is flagged (the flag rate's upper bound at
  ``1 - delta/2``), at least ``pi - r_hi`` of it is missed misbehaviour, so
  ``MR >= 1 - r_hi / pi``.

Verdicts: ``no shift`` (the domain test does not reject); ``shift breaks the certificate``
(the miss floor or a read weighted MR above the target); ``shift, certificate holds`` (the
weighted MR read and at most the target, the floor too, and the shift-aware certificate
covers the calibration threshold: it certifies a threshold at or above it, so MR <= alpha
there under covariate shift at ``1 - delta``); otherwise ``shift, not judged without
labels``, with the labels of the target's plan (:mod:`calimon.studies.shift.label_plan`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from calimon.errors import InputError
from calimon.numerics.binomial import cp_lower, cp_upper, samples_needed
from calimon.studies.shift.certify import kish_ess
from calimon.studies.shift.verdict import (
    BREAKS,
    HOLDS,
    NO_SHIFT,
    NOT_CERTIFIED,
    NOT_JUDGED,
    covers,
)


@dataclass(frozen=True)
class WeightsCheck:
    """The covariate-shift check of the weights at ``threshold``: the flag rate the weighted
    calibration rows predict (``predicted``, on ``n_eff`` rows) against the new traffic's own
    (``observed``); ``passed`` None when the new transcripts carry no scores."""

    predicted: float
    observed: float
    n_eff: float
    passed: bool | None


def check_weights(calib_scores: Any, weights: Any, new_scores: Any, threshold: float,
                  delta: float) -> WeightsCheck:
    """Does the reweighted calibration predict the new traffic's flag rate? (module doc)"""
    s, w = np.asarray(calib_scores, float), np.asarray(weights, float)
    flag = s >= threshold
    pred = float((w * flag).sum() / w.sum()) if w.sum() > 0 else math.nan
    ne = kish_ess(w)
    if new_scores is None or not math.isfinite(pred):
        return WeightsCheck(pred, math.nan, ne, None)
    x = np.asarray(new_scores, float)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return WeightsCheck(pred, math.nan, ne, None)
    k, n = int((x >= threshold).sum()), int(x.size)
    m = max(1, math.floor(ne))
    kw = min(m, round(pred * m))
    q = delta / 4
    meet = (cp_lower(k, n, q) <= cp_upper(kw, m, q)) and (cp_lower(kw, m, q) <= cp_upper(k, n, q))
    return WeightsCheck(pred, k / n, ne, bool(meet))


@dataclass(frozen=True)
class MrVerdict:
    """The verdict for ``MR <= alpha`` at the calibration's certified ``threshold`` (module
    doc): ``mr_calib`` on the calibration misbehaving rows; ``new_flag_rate`` and its upper
    bound ``new_flag_upper`` (NaN without new scores); ``min_prevalence`` (None: no floor) and
    ``mr_floor``; ``weighted_mr`` on ``ess`` rows, read when ``weighted_read``; the weights
    check (``flag_predicted``, ``weights_check``: None when not run); the certificate that
    applies (``certified``, ``certified_threshold``, ``bound``) and ``labels_needed``."""

    kind: str
    alpha: float
    delta: float
    threshold: float
    mr_calib: float
    new_flag_rate: float
    new_flag_upper: float
    min_prevalence: float | None
    mr_floor: float
    weighted_mr: float
    ess: float
    ess_needed: int
    flag_predicted: float
    weights_check: bool | None
    weighted_read: bool
    certified: bool
    certified_threshold: float
    bound: float
    labels_needed: int | None
    reason: str
    rate: str = "mr"

    @property
    def breaks(self) -> bool:
        """True when the verdict is that the shift breaks the certificate."""
        return self.kind == BREAKS

    def line(self) -> str:
        """The verdict in one line, with the readings behind it."""
        what = f"MR <= {self.alpha:g}"
        if self.kind in (NOT_CERTIFIED, NO_SHIFT):
            return (f"{what}: {self.reason}" if self.kind == NOT_CERTIFIED else
                    f"{what}: no shift: the calibration certificate stands (threshold "
                    f"{self.threshold:.6g}, bound {self.bound:.4g})")
        labels = (f"label {self.labels_needed} transcripts" if self.labels_needed is not None
                  else "label the new traffic (no number of labels certifies this threshold at "
                       "the planned shares)")
        if self.kind == BREAKS:
            return (f"{what}: SHIFT BREAKS THE CERTIFICATE of threshold {self.threshold:.6g} "
                    f"({self._readings()}): do not deploy it on this traffic; {labels} and "
                    f"recertify")
        if self.kind == HOLDS:
            return (f"{what}: shift, certificate holds under covariate shift "
                    f"({self._readings()}); certified under covariate shift: threshold "
                    f"{self.certified_threshold:.6g} (at or above {self.threshold:.6g}), bound "
                    f"{self.bound:.4g}")
        return f"{what}: {NOT_JUDGED} ({self._readings()}; {self.reason}): {labels}"

    def _readings(self) -> str:
        def above(x: float) -> str:
            return f" > {self.alpha:g}" if x > self.alpha else ""

        if self.weighted_read:
            w = f"weighted MR {self.weighted_mr:.3f}{above(self.weighted_mr)} (n_eff {self.ess:.1f})"
        elif self.ess < self.ess_needed:
            w = f"weighted MR not read (n_eff {self.ess:.1f} < {self.ess_needed})"
        elif self.weights_check is False:
            w = (f"weighted MR not read: the weights predict {self.flag_predicted:.1%} of the "
                 f"new traffic flagged, it has {self.new_flag_rate:.1%} (covariate shift "
                 f"contradicted)")
        else:
            w = "weighted MR not read (the weights cannot be checked without new scores)"
        if self.min_prevalence is None:
            return f"{w}; no miss floor (no lower bound on the misbehaving share stated)"
        return (f"{w}; {self.new_flag_rate:.1%} of the new traffic flagged, a miss floor of "
                f"{self.mr_floor:.3f}{above(self.mr_floor)} if at least "
                f"{self.min_prevalence:.0%} misbehaves")

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict."""
        return asdict(self)


def mr_floor(new_scores: Any, threshold: float, min_prevalence: float,
             delta: float) -> tuple[float, float, float]:
    """``(flag rate, its upper bound at 1 - delta, miss floor 1 - upper / min_prevalence)``
    of new traffic at ``threshold`` with at least ``min_prevalence`` misbehaving."""
    if not 0 < min_prevalence <= 1:
        raise InputError(f"expected min_prevalence in (0, 1], got {min_prevalence}",
                         field="min_prevalence")
    s = np.asarray(new_scores, float)
    s = s[np.isfinite(s)]
    if s.size == 0:
        return math.nan, math.nan, 0.0
    k = int((s >= threshold).sum())
    upper = cp_upper(k, int(s.size), delta)
    return k / s.size, upper, max(0.0, 1 - upper / min_prevalence)


def mr_verdict(report: Any, naive: Any, aware: Any, calib_scores: Any, calib_labels: Any,
               new_scores: Any = None, *, min_prevalence: float | None = None) -> MrVerdict:
    """The verdict for one MR target from the shift ``report`` (its ``shifted`` and
    ``weights``), the calibration certificate ``naive``, the shift-aware one ``aware`` (same
    target; its ``labels_needed`` is the plan) and the scores on both sides, on the certified
    scale (``new_scores`` None: the new transcripts carry none)."""
    s, y = np.asarray(calib_scores, float), np.asarray(calib_labels, int)
    t, half = naive.threshold, naive.delta / 2
    pos = s[y == 1]
    mr_cal = float(np.mean(pos < t)) if pos.size else math.nan
    rate = upper = math.nan
    floor = 0.0
    if new_scores is not None and math.isfinite(t):
        x = np.asarray(new_scores, float)
        x = x[np.isfinite(x)]
        rate = float(np.mean(x >= t)) if x.size else math.nan
        if min_prevalence is not None:
            rate, upper, floor = mr_floor(x, t, min_prevalence, half)
    wc = (check_weights(s, report.weights, new_scores, t, naive.delta) if math.isfinite(t)
          else WeightsCheck(math.nan, math.nan, 0.0, None))
    need = samples_needed(naive.alpha, naive.delta)
    read = (aware.ess >= need and math.isfinite(aware.estimate) and wc.passed is True)
    base = dict(alpha=naive.alpha, delta=naive.delta, threshold=t, mr_calib=mr_cal,
                new_flag_rate=rate, new_flag_upper=upper, min_prevalence=min_prevalence,
                mr_floor=floor, weighted_mr=aware.estimate, ess=aware.ess, ess_needed=need,
                flag_predicted=wc.predicted, weights_check=wc.passed, weighted_read=read,
                labels_needed=aware.labels_needed)
    if not naive.certified:
        return MrVerdict(kind=NOT_CERTIFIED, certified=False, certified_threshold=math.nan,
                         bound=math.nan, **base, reason="the calibration data certify no "
                                                        "threshold, so no shift can break one")
    if not report.shifted:
        return MrVerdict(kind=NO_SHIFT, certified=True, certified_threshold=t,
                         bound=naive.bound, reason="", **base)
    ok = not aware.abstained
    cert = dict(certified=ok, certified_threshold=aware.threshold if ok else math.nan,
                bound=aware.bound if ok else math.nan)
    found = [f"{name} {v:.3f} > {naive.alpha:g}" for name, v in
             (("miss floor", floor), ("weighted MR", aware.estimate if read else 0.0))
             if v > naive.alpha]
    if found:
        return MrVerdict(kind=BREAKS, reason=" and ".join(found), **cert, **base)
    if read and covers(aware, t, "mr"):
        return MrVerdict(kind=HOLDS, reason=aware.reason, **cert, **base)
    why = ("the shift-aware certificate does not cover the threshold" if read else
           "no label-free reading bears on MR here")
    return MrVerdict(kind=NOT_JUDGED, reason=why, certified=False,
                     certified_threshold=math.nan, bound=math.nan, **base)


def weights_read(rate: str, aware_ess: float, alpha: float, delta: float, check: Any) -> bool:
    """Whether the verdict of ``rate`` reads the weighted estimate (module doc; FAR: the n_eff
    rule alone, :mod:`calimon.studies.shift.verdict`), the rule the label plan follows."""
    enough = aware_ess >= samples_needed(alpha, delta)
    return enough if rate == "far" else enough and check is not None and check.passed is True
