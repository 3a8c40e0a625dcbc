"""Shift-aware thresholds: importance-weighted FAR / MR and a bound that carries the shift.

**Assumption (covariate shift).** The new transcripts differ from the calibration ones only in
how often each kind of transcript occurs: ``P(label | transcript)`` is the same on both sides.
Then, with density ratios ``w(x) = p_new(x) / p_calib(x)`` (estimated by the domain classifier,
:mod:`calimon.studies.shift.detect`), the new data's FAR at threshold ``t`` is
``E_cal[w 1(s >= t) 1(y = 0)] / E_cal[w 1(y = 0)]`` (self-normalised over the benign calibration
rows; MR likewise over the misbehaving ones). The Kish effective sample size
``n_eff = (sum w)^2 / sum w^2`` over the class used says how many unweighted samples the weighted
ones are worth.

**The bound: rejection sampling** (Park et al., "PAC Prediction Sets Under Covariate Shift",
ICLR 2022). Keep calibration row ``i`` of the class with probability ``w_i / max_j w_j`` (seeded;
the seed is recorded). If the weights are the true density ratios, the kept rows are an i.i.d.
sample of the new data's class-conditional distribution, so the exact i.i.d. machinery applies
unchanged: fixed-sequence Learn-then-Test with Clopper-Pearson bounds
(:func:`calimon.deploy.guarantees.certify_far`) on the kept rows. The guarantee then holds at
``1 - delta`` over the calibration draw and the rejection coins. **The weights are estimated**:
a misspecified or overfitted domain classifier voids the guarantee, and nothing in the data can
check the covariate-shift assumption.

**Abstention.** No certificate is issued (``abstained``, with the reason and how many labels of
the new data would be needed instead) when

- the supports barely overlap: more than ``max_outside`` (default 10%) of the new transcripts
  have ``P(new | x) > 0.99`` (no calibration neighbour to stand for them); or
- the kept rows of the class are fewer than ``samples_needed(alpha, delta)``, the least ``n``
  for which zero errors could certify the rate at all; or
- Learn-then-Test certifies no threshold on the kept rows.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from calimon.deploy.guarantees import certify_far, certify_mr, samples_needed
from calimon.errors import InputError

MAX_OUTSIDE = 0.10
METHOD = "rejection-sampling + ltt-fixed-sequence-clopper-pearson"


def kish_ess(w: Any) -> float:
    """Kish effective sample size ``(sum w)^2 / sum w^2`` (0 for no weight)."""
    w = np.asarray(w, float)
    s2 = float((w ** 2).sum())
    return 0.0 if s2 == 0 else float(w.sum() ** 2 / s2)


def weighted_rates(scores: Any, labels: Any, weights: Any, threshold: float) -> dict[str, float]:
    """Importance-weighted FAR and MR at ``threshold`` (flag iff score >= threshold), with the
    Kish effective sample size of each class; NaN where a class is absent."""
    s, y, w = (np.asarray(a, float) for a in (scores, labels, weights))
    if not (s.shape == y.shape == w.shape) or s.ndim != 1:
        raise InputError("scores, labels and weights must be 1-D and of equal length",
                         field="weights")
    if np.any(w < 0) or not np.all(np.isfinite(w)):
        raise InputError("weights must be finite and >= 0", field="weights")
    flag = s >= threshold
    out = {}
    for name, cls, err in (("far", 0, flag), ("mr", 1, ~flag)):
        m = y == cls
        wm = w[m]
        out[name] = float((wm * err[m]).sum() / wm.sum()) if wm.sum() > 0 else math.nan
        out[f"ess_{'neg' if cls == 0 else 'pos'}"] = kish_ess(wm)
    return out


def rejection_sample(weights: Any, seed: int) -> np.ndarray:
    """Boolean mask: row ``i`` kept with probability ``w_i / max w`` (seeded)."""
    w = np.asarray(weights, float)
    if w.size == 0 or w.max() <= 0:
        return np.zeros(w.size, bool)
    return np.random.default_rng(seed).random(w.size) < w / w.max()


@dataclass(frozen=True)
class ShiftCertificate:
    """A shift-aware certificate for one rate (``far`` or ``mr``), or an abstention.

    ``estimate``: the importance-weighted rate of ``reference`` (the naive threshold) on the new
    data; ``ess``: Kish effective sample size of the class; ``n_kept`` of ``n_class`` rows kept
    by rejection sampling (``seed``). When not abstained: ``threshold`` certified with
    ``k`` errors in ``n_kept`` and Clopper-Pearson ``bound`` (<= alpha). When abstained:
    ``reason``; ``labels_needed``: new transcripts to label instead, from the target's one
    plan (:mod:`calimon.studies.shift.label_plan`; None: not planned, or no number would do),
    ``labels_plan``: what that plan rests on.
    """

    rate: str
    alpha: float
    delta: float
    abstained: bool
    reason: str
    reference: float
    estimate: float
    ess: float
    n_class: int
    n_kept: int
    seed: int
    threshold: float
    bound: float
    k: int
    labels_needed: int | None
    method: str = METHOD
    labels_plan: str = ""

    def message(self) -> str:
        """One line: the certified threshold and bound, or why it abstained and how many labels
        would do instead."""
        what = self.rate.upper()
        if self.abstained:
            plan = f"; {self.labels_plan}" if self.labels_plan else ""
            todo = (f"label {self.labels_needed} transcripts" if self.labels_needed is not None
                    else "no number of labels certifies the calibration threshold at the "
                         "planned shares")
            return (f"cannot certify {what} <= {self.alpha:g} on this data without labels from "
                    f"it; {todo} ({self.reason}{plan})")
        return (f"{what} <= {self.alpha:g} certified on the new data at {1 - self.delta:g} "
                f"under covariate shift: threshold {self.threshold:.6g}, {self.k}/{self.n_kept} "
                f"kept rows, bound {self.bound:.4g}")

    def to_dict(self) -> dict[str, Any]:
        """The fields as a dict."""
        return asdict(self)


def shift_certificate(scores: Any, labels: Any, weights: Any, *, rate: str, alpha: float,
                      delta: float = 0.05, reference: float = math.nan,
                      outside_share: float = 0.0, max_outside: float = MAX_OUTSIDE,
                      seed: int = 0, plan: Any = None) -> ShiftCertificate:
    """Certify ``rate <= alpha`` on the new data from weighted calibration rows (module doc).

    ``scores`` / ``labels`` / ``weights``: calibration rows; ``reference``: a threshold (e.g.
    the naive one) whose weighted rate is reported; ``outside_share``: from the shift report;
    ``plan``: the target's label plan (:class:`~calimon.studies.shift.label_plan.LabelPlan`).
    """
    if rate not in ("far", "mr"):
        raise InputError(f"expected 'far' or 'mr', got {rate!r}", field="rate")
    s, y, w = (np.asarray(a, float) for a in (scores, labels, weights))
    cls = 0 if rate == "far" else 1
    m = y == cls
    if not m.any():
        raise InputError(f"no calibration rows of the class behind {rate}", field="labels")
    est = weighted_rates(s, y, w, reference)[rate] if math.isfinite(reference) else math.nan
    ess = kish_ess(w[m])
    keep = rejection_sample(w[m], seed)
    kept = s[m][keep]
    base = dict(rate=rate, alpha=alpha, delta=delta, reference=float(reference), estimate=est,
                ess=ess, n_class=int(m.sum()), n_kept=int(keep.sum()), seed=seed,
                labels_needed=None if plan is None else plan.labels,
                labels_plan="" if plan is None else plan.basis())
    n_min = samples_needed(alpha, delta)
    reason = ""
    if outside_share > max_outside:
        reason = (f"supports barely overlap: {outside_share:.0%} of the new transcripts have "
                  f"no calibration neighbour (P(new|x) > 0.99; limit {max_outside:.0%})")
    elif kept.size < n_min:
        reason = (f"{kept.size} calibration rows kept after reweighting (n_eff {ess:.1f}), "
                  f"fewer than the {n_min} that could certify {alpha:g} at all")
    else:
        cert = (certify_far if rate == "far" else certify_mr)(kept, alpha, delta)
        if cert.certified:
            return ShiftCertificate(**base, abstained=False, reason="",
                                    threshold=cert.threshold, bound=cert.bound, k=cert.k)
        reason = f"no threshold passes on the {kept.size} kept rows"
    return ShiftCertificate(**base, abstained=True, reason=reason,
                            threshold=math.inf if rate == "far" else -math.inf,
                            bound=math.nan, k=0)
