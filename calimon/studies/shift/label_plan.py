"""One label plan per target: how many transcripts of the new traffic to label so that
``rate <= alpha`` is certified on it, the same number wherever calimon asks for labels
(`calimon shift`, `thresholds --new`, `apply-policy`, `recertify` and the review planner of
`calimon serve --review`).

Labels of new traffic are read the way the review queue reads them
(:mod:`calimon.studies.shift.live`): the traffic decided by the threshold alone (``auto_block``:
score >= threshold, ``auto_pass``: the rest), a uniform sample of each stratum in draw order,
FAR and MR bounded through each stratum's benign count. So the plan is
:func:`calimon.studies.shift.live_plan.plan` on that traffic before any label, with the benign
share of each stratum planned from the calibration rows on the same side of the threshold,
smoothed as ``(b + 1) / (n + 2)``:

- **weighted** by the shift check's density ratios when the weighted estimate is read (the
  class's n_eff reaches ``samples_needed(alpha, delta)``, the rule of the verdict); otherwise
  **unweighted**, and the plan says so: a plan never rests on an estimate its verdict did not
  read;
- the stratum sizes are the new traffic's own counts on the certified scale (its scores at the
  threshold); without scores they are predicted as the calibration rows' flag share (weighted
  likewise) times the number of new transcripts.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from calimon.errors import InputError
from calimon.studies.shift.live import Decided, stratum_counts
from calimon.studies.shift.live_plan import Target, plan

BLOCK, PASS = "auto_block", "auto_pass"


@dataclass(frozen=True)
class LabelPlan:
    """The plan for ``rate <= alpha`` at ``1 - delta`` at ``threshold`` on the new traffic:
    ``labels`` to give (None: no number would certify it at the planned shares; ``breaks``:
    the planned rate is above the target there), the stratum ``sizes`` and planned benign
    ``shares`` it rests on, whether the shares are ``weighted`` and whether the sizes were
    ``predicted`` (the new transcripts carry no scores)."""

    rate: str
    alpha: float
    delta: float
    threshold: float
    labels: int | None
    sizes: dict[str, int] = field(default_factory=dict)
    shares: dict[str, float] = field(default_factory=dict)
    weighted: bool = False
    predicted: bool = False
    breaks: bool = False

    def basis(self) -> str:
        """What the plan rests on, in words."""
        if not math.isfinite(self.threshold):
            return "no threshold was certified to plan labels for"
        how = ("the importance-weighted calibration rows" if self.weighted else
               "the calibration rows, unweighted (the weighted estimate is not read)")
        sizes = (" (predicted from the calibration flag share)" if self.predicted else "")
        return (f"planned on the new traffic's {self.sizes.get(BLOCK, 0)} flagged and "
                f"{self.sizes.get(PASS, 0)} passed transcripts{sizes}, benign shares "
                f"{self.shares.get(BLOCK, math.nan):.3f} / {self.shares.get(PASS, math.nan):.3f} "
                f"from {how}")

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict, with the basis in words."""
        return {**asdict(self), "basis": self.basis()}


def decided_traffic(flagged: Any) -> list[Decided]:
    """The new traffic as the review queue would see it before any label: one decision per
    transcript, ``auto_block`` where ``flagged``, else ``auto_pass``, all kept."""
    f = np.asarray(flagged, bool)
    return [Decided(f"t{i:07d}", BLOCK if x else PASS, (i + 0.5) / max(f.size, 1))
            for i, x in enumerate(f)]


def planned_shares(scores: Any, labels: Any, threshold: float,
                   weights: Any = None) -> tuple[dict[str, float], float]:
    """``({auto_block: share, auto_pass: share}, flag share)``: the benign share of the
    calibration rows at or above ``threshold`` and below it, smoothed ``(b + 1) / (n + 2)``
    on counts scaled so the weights sum to the rows' number, and the share of rows flagged."""
    s, y = np.asarray(scores, float), np.asarray(labels, int)
    w = np.ones(s.size) if weights is None else np.asarray(weights, float)
    if w.shape != s.shape or y.shape != s.shape:
        raise InputError("scores, labels and weights must be of equal length", field="weights")
    w = w * (s.size / w.sum()) if w.sum() > 0 else np.ones(s.size)
    flag = s >= threshold
    out = {}
    for action, m in ((BLOCK, flag), (PASS, ~flag)):
        out[action] = float((w[m & (y == 0)].sum() + 1) / (w[m].sum() + 2))
    return out, float(w[flag].sum() / s.size) if s.size else 0.0


def plan_labels(rate: str, alpha: float, delta: float, *, threshold: float, calib_scores: Any,
                calib_labels: Any, weights: Any = None, new_scores: Any = None,
                n_new: int | None = None) -> LabelPlan:
    """The plan of ``rate <= alpha`` at ``threshold`` (module doc). ``weights``: the density
    ratios of the calibration rows when the weighted estimate is read, else None;
    ``new_scores``: the new traffic's scores on the certified scale (None: none, then
    ``n_new`` transcripts with predicted strata)."""
    if rate not in ("far", "mr"):
        raise InputError(f"expected 'far' or 'mr', got {rate!r}", field="rate")
    base = dict(rate=rate, alpha=alpha, delta=delta, threshold=float(threshold))
    if not math.isfinite(threshold):
        return LabelPlan(**base, labels=None)
    shares, flag_share = planned_shares(calib_scores, calib_labels, threshold, weights)
    s = None if new_scores is None else np.asarray(new_scores, float)
    if s is not None:
        flagged = s[np.isfinite(s)] >= threshold
    elif n_new:
        k = round(flag_share * n_new)
        flagged = np.r_[np.ones(k, bool), np.zeros(n_new - k, bool)]
    else:
        raise InputError("a label plan needs the new traffic's scores or its size",
                         field="new_scores")
    counts = stratum_counts(decided_traffic(flagged))
    p = plan(counts, Target(rate, alpha, delta), shares=shares)
    sizes = {BLOCK: int(flagged.sum()), PASS: int((~flagged).sum())}
    return LabelPlan(**base, labels=None if p.breaks else p.labels, sizes=sizes, shares=shares,
                     weighted=weights is not None, predicted=s is None,
                     breaks=p.breaks)
