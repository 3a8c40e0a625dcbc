"""Harmful or harmless shift: does a change of data move a FAR certificate? (no labels needed)

The domain test (:mod:`calimon.studies.shift.detect`) says whether new traffic differs from the
calibration data; on real traffic it nearly always does, mostly in ways the certificate does not
care about (other topics, other lengths). A FAR certificate depends on one thing: how often the
new *benign* transcripts score at or above its threshold. Two label-free readings bear on it,
the floor taken at confidence ``1 - delta/2``:

- **The score tail (FAR floor).** The new traffic's flag rate ``r`` at the threshold is
  ``pi * TPR + (1 - pi) * FAR`` over its misbehaving share ``pi`` and its benign part. With at
  most ``pi_max`` of the traffic misbehaving (``max_prevalence``; default: the calibration rows'
  misbehaving share) and the monitor catching no larger share of the new misbehaving transcripts
  than ``tpr_cap`` (``max_detection``; default: the Clopper-Pearson upper bound of its detection
  rate on the calibration's misbehaving rows; 1 for no assumption at all), the benign FAR is at
  least ``(r_lo - pi_max * tpr_cap) / (1 - pi_max)``, ``r_lo`` the flag rate's lower bound.
- **The weighted estimate.** Under covariate shift the calibration benign rows reweighted by the
  density ratios estimate the new FAR (:func:`calimon.studies.shift.certify.weighted_rates`), on a Kish
  effective sample size ``n_eff``. It is read only when ``n_eff`` reaches the rows that could
  certify the target at all (``samples_needed(alpha, delta)``): a few heavy weights make an
  estimate of nothing, not an alarm.

One verdict per FAR target (MR targets: :mod:`calimon.studies.shift.verdict_mr`), in plain
words:

- ``no shift``: the domain test does not reject; the calibration certificate stands as issued.
- ``shift, certificate holds``: a shift, neither reading puts the FAR above the target, and
  the shift-aware certificate (rejection sampling, :mod:`calimon.studies.shift.certify`) covers
  the calibration threshold (it certifies a threshold at or below it): under covariate shift
  with the weights right, the threshold keeps ``FAR <= alpha`` at ``1 - delta``.
- ``shift, not judged without labels``: no reading shows the certificate broken, but nothing
  certifies it either (the shift-aware certificate abstains or needs a stricter threshold):
  the number of labels that would certify it (the target's one plan,
  :mod:`calimon.studies.shift.label_plan`).
- ``shift breaks the certificate``: the floor, or a weighted estimate on enough rows, is above
  the target. Do not deploy the
  threshold on this traffic; label it and recertify.

"Holds" rests on the covariate-shift assumption and on the weights: a shift inside the benign
transcripts that the scores and the features cannot see stays invisible without labels
(``benchmarks/results/guarantees.md`` simulates the verdict's wrong "holds" and wrong "breaks";
``benchmarks/results/shift.md`` counts how often each verdict was right on held-out sources).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from calimon.errors import InputError
from calimon.numerics.binomial import cp_lower, cp_upper, samples_needed

NO_SHIFT = "no shift"
HOLDS = "shift, certificate holds"
BREAKS = "shift breaks the certificate"
NOT_JUDGED = "shift, not judged without labels"
NOT_CERTIFIED = "nothing to check"  # the calibration data certified no threshold at all
VERDICTS = (NO_SHIFT, HOLDS, BREAKS, NOT_JUDGED)


def covers(aware: Any, threshold: float, rate: str) -> bool:
    """Whether the shift-aware certificate ``aware`` certifies the rate at ``threshold`` too:
    it certified a threshold at most as permissive (FAR falls as the threshold rises, MR
    grows), so ``rate <= alpha`` at ``threshold`` under covariate shift at ``1 - delta``."""
    if aware.abstained or not math.isfinite(threshold):
        return False
    return aware.threshold <= threshold if rate == "far" else aware.threshold >= threshold


@dataclass(frozen=True)
class ShiftVerdict:
    """The verdict for ``FAR <= alpha`` at the calibration's certified ``threshold`` (module doc).

    ``far_calib``: the threshold's FAR on the calibration benign rows; ``new_flag_rate`` and
    ``new_flag_lower`` (its Clopper-Pearson lower bound at ``1 - delta``; NaN when the new
    transcripts carry no scores); ``far_floor``: the least FAR the new benign transcripts can
    have if at most ``max_prevalence`` of the traffic misbehaves and at most ``tpr_cap`` of that
    is caught; ``weighted_far`` and ``ess``: the importance-weighted estimate and its Kish
    effective sample size, read when ``ess >= ess_needed``; ``certified`` /
    ``certified`` / ``certified_threshold`` / ``bound``: the certificate that applies (the
    calibration one under no shift, the shift-aware one otherwise); ``labels_needed``: new transcripts to label when nothing is certified.
    """

    kind: str
    alpha: float
    delta: float
    threshold: float
    far_calib: float
    new_flag_rate: float
    new_flag_lower: float
    max_prevalence: float
    tpr_cap: float
    far_floor: float
    weighted_far: float
    ess: float
    ess_needed: int
    certified: bool
    certified_threshold: float
    bound: float
    labels_needed: int | None
    reason: str

    @property
    def breaks(self) -> bool:
        """True when the verdict is that the shift breaks the certificate."""
        return self.kind == BREAKS

    def line(self) -> str:
        """The verdict in one line, with the readings behind it."""
        what = f"FAR <= {self.alpha:g}"
        if self.kind == NOT_CERTIFIED:
            return f"{what}: {self.reason}"
        if self.kind == NO_SHIFT:
            return (f"{what}: no shift: the calibration certificate stands (threshold "
                    f"{self.threshold:.6g}, bound {self.bound:.4g})")
        label = (f"label {self.labels_needed} transcripts" if self.labels_needed is not None
                 else "label the new traffic (no number of labels certifies this threshold at "
                      "the planned shares)")
        if self.kind == BREAKS:
            instead = (f"threshold {self.certified_threshold:.6g} is certified under covariate "
                       f"shift (bound {self.bound:.4g}), or " if self.certified else "")
            return (f"{what}: SHIFT BREAKS THE CERTIFICATE of threshold {self.threshold:.6g} "
                    f"({self._readings()}): do not deploy it on this traffic; {instead}"
                    f"{label} and recertify")
        if self.kind == NOT_JUDGED:
            why = f" ({self.reason})" if self.reason else ""
            instead = (f"threshold {self.certified_threshold:.6g} is certified under covariate "
                       f"shift (bound {self.bound:.4g}), or " if self.certified else "")
            return (f"{what}: {NOT_JUDGED} ({self._readings()}): no reading shows it broken, "
                    f"but nothing certifies threshold {self.threshold:.6g} on this traffic"
                    f"{why}; {instead}{label}")
        return (f"{what}: shift, certificate holds ({self._readings()}); certified under "
                f"covariate shift: threshold {self.certified_threshold:.6g} (at or below "
                f"{self.threshold:.6g}), bound {self.bound:.4g}")

    def _readings(self) -> str:
        def above(x: float) -> str:
            return f" > {self.alpha:g}" if x > self.alpha else ""

        w = (f"weighted FAR {self.weighted_far:.3f}{above(self.weighted_far)} (n_eff "
             f"{self.ess:.1f})" if self.ess >= self.ess_needed else
             f"weighted FAR not read (n_eff {self.ess:.1f} < {self.ess_needed})")
        if math.isnan(self.new_flag_rate):
            return f"{w}; the new transcripts carry no scores"
        return (f"{w}; {self.new_flag_rate:.1%} of the new traffic flagged against "
                f"{self.far_calib:.1%} of calibration benign, a FAR floor of "
                f"{self.far_floor:.3f}{above(self.far_floor)} if at most "
                f"{self.max_prevalence:.0%} misbehaves and at most {self.tpr_cap:.0%} of that is "
                f"caught")

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict."""
        return asdict(self)


def far_floor(new_scores: Any, threshold: float, max_prevalence: float, delta: float,
              tpr_cap: float = 1.0) -> tuple[float, float, float]:
    """``(flag rate, its lower bound at 1 - delta, FAR floor)`` of new traffic at ``threshold``
    with at most ``max_prevalence`` misbehaving, at most ``tpr_cap`` of it caught (module
    doc)."""
    s = np.asarray(new_scores, float)
    s = s[np.isfinite(s)]
    if s.size == 0:
        return math.nan, math.nan, 0.0
    for name, v, hi in (("max_prevalence", max_prevalence, 1.0), ("max_detection", tpr_cap, 1.0)):
        if not 0 <= v <= hi or (name == "max_prevalence" and v == 1):
            raise InputError(f"expected {name} in [0, 1{')' if name == 'max_prevalence' else ']'}"
                             f", got {v}", field=name)
    k = int((s >= threshold).sum())
    lower = cp_lower(k, int(s.size), delta)
    floor = (lower - max_prevalence * tpr_cap) / (1 - max_prevalence)
    return k / s.size, lower, max(0.0, floor)


def shift_verdict(report: Any, naive: Any, aware: Any, calib_scores: Any, calib_labels: Any,
                  new_scores: Any = None, *, max_prevalence: float | None = None,
                  max_detection: float | None = None) -> ShiftVerdict:
    """The verdict for one FAR target from the shift ``report``, the calibration certificate
    ``naive`` (:class:`~calimon.deploy.guarantees.CertifiedThreshold`), the shift-aware one
    ``aware`` (:class:`~calimon.studies.shift.certify.ShiftCertificate`, same target) and the scores on
    both sides (``new_scores`` None: the new transcripts carry none). ``max_prevalence`` /
    ``max_detection``: the assumptions of the FAR floor (module doc; None: from the
    calibration rows)."""
    s, y = np.asarray(calib_scores, float), np.asarray(calib_labels, int)
    t, half = naive.threshold, naive.delta / 2
    pi = min(float(np.mean(y == 1)) if max_prevalence is None else float(max_prevalence),
             1 - 1e-9)
    pos = s[y == 1]
    tpr_cap = (float(max_detection) if max_detection is not None else
               cp_upper(int((pos >= t).sum()), int(pos.size), half) if pos.size else 1.0)
    benign = s[y == 0]
    far_cal = float(np.mean(benign >= t)) if benign.size and math.isfinite(t) else math.nan
    rate, lower, floor = ((math.nan, math.nan, 0.0) if new_scores is None or not math.isfinite(t)
                          else far_floor(new_scores, t, pi, half, tpr_cap))
    need = samples_needed(naive.alpha, naive.delta)
    w_read = aware.estimate if aware.ess >= need and math.isfinite(aware.estimate) else 0.0
    base = dict(alpha=naive.alpha, delta=naive.delta, threshold=t, far_calib=far_cal,
                new_flag_rate=rate, new_flag_lower=lower, max_prevalence=pi, tpr_cap=tpr_cap,
                far_floor=floor, weighted_far=aware.estimate, ess=aware.ess, ess_needed=need,
                labels_needed=aware.labels_needed)
    if not naive.certified:
        return ShiftVerdict(kind=NOT_CERTIFIED, certified=False, certified_threshold=math.nan,
                            bound=math.nan, **base,
                            reason="the calibration data certify no threshold, so no shift "
                                   "can break one")
    if not report.shifted:
        return ShiftVerdict(kind=NO_SHIFT, certified=True, certified_threshold=t,
                            bound=naive.bound, reason="", **base)
    found = [f"{name} {v:.3f} > {naive.alpha:g}" for name, v in
             (("FAR floor", floor), ("weighted FAR", w_read)) if v > naive.alpha]
    ok = not aware.abstained
    aware_cert = dict(certified=ok, certified_threshold=aware.threshold if ok else math.nan,
                      bound=aware.bound if ok else math.nan)
    if found:
        return ShiftVerdict(kind=BREAKS, reason=" and ".join(found), **aware_cert, **base)
    if covers(aware, t, "far"):
        return ShiftVerdict(kind=HOLDS, reason="", **aware_cert, **base)
    why = aware.reason or (f"the shift-aware certificate needs threshold "
                           f"{aware.threshold:.6g}, above {t:.6g}")
    return ShiftVerdict(kind=NOT_JUDGED, reason=why, **aware_cert, **base)
