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
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from calimon.deploy.guarantees import (
    certify_far,
    certify_mr,
    cp_upper,
    samples_needed,
    threshold_text,
)
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


def labels_needed(alpha: float, delta: float, planned_rate: float = 0.0,
                  class_share: float = 1.0) -> int:
    """Transcripts of the new data to label so that a threshold whose rate there is
    ``planned_rate`` certifies ``rate <= alpha`` at ``1 - delta``: the least ``n`` of the class
    with ``cp_upper(floor(planned_rate * n), n, delta) <= alpha``, divided by the share of that
    class in the traffic (``class_share``), rounded up. ``planned_rate`` must be below
    ``alpha``."""
    if not 0 <= planned_rate < alpha:
        raise InputError(f"the planned rate must be in [0, alpha={alpha}), got {planned_rate}",
                         field="planned_rate")
    if not 0 < class_share <= 1:
        raise InputError(f"expected a class share in (0, 1], got {class_share}",
                         field="class_share")
    n = samples_needed(alpha, delta)
    while cp_upper(math.floor(planned_rate * n), n, delta) > alpha:
        n = max(n + 1, int(n * 1.05))
    lo = max(samples_needed(alpha, delta), int(n / 1.05))
    while lo < n and cp_upper(math.floor(planned_rate * lo), lo, delta) > alpha:
        lo += 1
    return math.ceil(lo / class_share)


@dataclass(frozen=True)
class ShiftCertificate:
    """A shift-aware certificate for one rate (``far`` or ``mr``), or an abstention.

    ``estimate``: the importance-weighted rate of ``reference`` (the naive threshold) on the new
    data; ``ess``: Kish effective sample size of the class; ``n_kept`` of ``n_class`` rows kept
    by rejection sampling (``seed``). When not abstained: ``threshold`` certified with
    ``k`` errors in ``n_kept`` and Clopper-Pearson ``bound`` (<= alpha). When abstained:
    ``reason`` and ``labels_needed`` (new transcripts to label instead; see
    :func:`labels_needed`).
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
    labels_needed: int
    method: str = METHOD
    labels_plan: str = ""  # when the labels are those planned for a stricter target

    def message(self) -> str:
        """One line: the certified threshold and bound, or why it abstained and how many labels
        would do instead."""
        what = self.rate.upper()
        if self.abstained:
            plan = f"; {self.labels_plan}" if self.labels_plan else ""
            return (f"cannot certify {what} <= {self.alpha:g} on this data without labels from "
                    f"it; label {self.labels_needed} transcripts ({self.reason}{plan})")
        return (f"{what} <= {self.alpha:g} certified on the new data at {1 - self.delta:g} "
                f"under covariate shift: threshold {threshold_text(self.threshold)}, {self.k}/{self.n_kept} "
                f"kept rows, bound {self.bound:.4g}")

    def to_dict(self) -> dict[str, Any]:
        """The fields as a dict."""
        return asdict(self)


def shift_certificate(scores: Any, labels: Any, weights: Any, *, rate: str, alpha: float,
                      delta: float = 0.05, reference: float = math.nan,
                      outside_share: float = 0.0, max_outside: float = MAX_OUTSIDE,
                      seed: int = 0) -> ShiftCertificate:
    """Certify ``rate <= alpha`` on the new data from weighted calibration rows (module doc).

    ``scores`` / ``labels`` / ``weights``: calibration rows; ``reference``: a threshold (e.g.
    the naive one) whose weighted rate is reported; ``outside_share``: from the shift report.
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
    share = float(np.average(y == cls, weights=w)) if w.sum() > 0 else 0.5
    planned = est if math.isfinite(est) and est < alpha / 2 else alpha / 2
    need = labels_needed(alpha, delta, planned, max(share, 1e-3))
    base = dict(rate=rate, alpha=alpha, delta=delta, reference=float(reference), estimate=est,
                ess=ess, n_class=int(m.sum()), n_kept=int(keep.sum()), seed=seed,
                labels_needed=need)
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


def monotone_plans(certificates: Sequence[ShiftCertificate]) -> list[ShiftCertificate]:
    """The certificates (input order) with label plans that never grow as a target loosens:
    labels that certify ``rate <= a`` also certify ``rate <= b`` for ``b > a`` (the same
    threshold), so a looser target of the same rate and delta gets the smaller plan, and says
    whose plan it is (``labels_plan``). Each target's own plan assumes its own threshold,
    whose rate on the new data may sit closer to its target than a stricter one's does."""
    out = list(certificates)
    order = sorted(range(len(out)), key=lambda i: (out[i].rate, out[i].delta, out[i].alpha))
    best: dict[tuple[str, float], ShiftCertificate] = {}
    for i in order:
        c = out[i]
        prev = best.get((c.rate, c.delta))
        if prev is not None and prev.alpha < c.alpha and prev.labels_needed < c.labels_needed:
            out[i] = replace(c, labels_needed=prev.labels_needed, labels_plan=(
                f"the {prev.labels_needed} labels planned for {c.rate.upper()} <= "
                f"{prev.alpha:g} certify this looser target too; its own plan asks "
                f"{c.labels_needed}"))
        if prev is None or out[i].labels_needed < prev.labels_needed:
            best[(c.rate, c.delta)] = out[i]
    return out
