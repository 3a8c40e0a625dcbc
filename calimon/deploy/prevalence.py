"""From a paired benchmark (about 50% misbehavior) to deployment traffic with a given base rate.

MR and FAR are rates *within* a class, so they do not depend on the base rate ``pi``; what a
deployment sees does. Per ``per`` transcripts (default 10,000)::

    true alerts   = per * pi * (1 - MR)
    false alerts  = per * (1 - pi) * FAR
    alerts        = true alerts + false alerts
    misses        = per * pi * MR
    precision     = true alerts / alerts          (NaN when nothing is flagged)

Calibrated probabilities carry the benchmark's prior. Under label shift (the class-conditional
score distributions stay the same, only the mix changes), Bayes' rule moves them to another base
rate by multiplying the odds: ``odds' = odds * [pi_t / (1 - pi_t)] / [pi_s / (1 - pi_s)]``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from calimon.deploy.io import ScoredSet
from calimon.errors import InputError


def _rate(x: Any, name: str, *, open_interval: bool = False) -> float:
    ok = isinstance(x, int | float | np.floating) and not isinstance(x, bool) and (
        0 < x < 1 if open_interval else 0 <= x <= 1)
    if not ok:
        where = "strictly between 0 and 1" if open_interval else "in [0, 1]"
        raise InputError(f"expected a number {where}, got {x!r}", field=name)
    return float(x)


@dataclass(frozen=True)
class PrevalenceReport:
    """Expected counts per ``per`` transcripts at an operating point and a base rate."""

    base_rate: float
    mr: float
    far: float
    per: int
    precision: float
    alerts: float
    true_alerts: float
    false_alerts: float
    misses: float

    def to_dict(self) -> dict[str, Any]:
        """The fields as a dict."""
        return asdict(self)


def at_prevalence(mr: float, far: float, base_rate: float, per: int = 10_000) -> PrevalenceReport:
    """Precision, expected alerts and misses per ``per`` transcripts (formulas: module doc)."""
    mr, far = _rate(mr, "mr"), _rate(far, "far")
    pi = _rate(base_rate, "base_rate")
    if isinstance(per, bool) or not isinstance(per, int) or per < 1:
        raise InputError(f"expected an integer >= 1, got {per!r}", field="per")
    true_alerts = per * pi * (1.0 - mr)
    false_alerts = per * (1.0 - pi) * far
    alerts = true_alerts + false_alerts
    precision = true_alerts / alerts if alerts > 0 else math.nan
    return PrevalenceReport(base_rate=pi, mr=mr, far=far, per=per, precision=precision,
                            alerts=alerts, true_alerts=true_alerts, false_alerts=false_alerts,
                            misses=per * pi * mr)


def prevalence_report(scored: ScoredSet, threshold: float, base_rate: float,
                      per: int = 10_000) -> PrevalenceReport:
    """:func:`at_prevalence` at the MR and FAR that ``threshold`` reaches on ``scored``."""
    mr, far = scored.rates(threshold)
    if math.isnan(mr) or math.isnan(far):
        raise InputError("needs both benign and misbehaving rows to measure MR and FAR",
                         path=scored.path, field="label")
    return at_prevalence(mr, far, base_rate, per)


def reweight_to_prevalence(p: Any, train_prevalence: float, target_prevalence: float) -> np.ndarray:
    """Move calibrated probabilities from the base rate they were fitted at to another one.

    ``p' = p r / (p r + 1 - p)`` with ``r = [pi_t / (1 - pi_t)] / [pi_s / (1 - pi_s)]``
    (prior shift on the odds); 0 and 1 stay 0 and 1. Assumes label shift only.
    """
    arr = np.asarray(p, dtype=float)
    if not np.all(np.isfinite(arr)) or np.any((arr < 0) | (arr > 1)):
        raise InputError("expected probabilities in [0, 1] (no NaN)", field="p")
    src = _rate(train_prevalence, "train_prevalence", open_interval=True)
    dst = _rate(target_prevalence, "target_prevalence", open_interval=True)
    r = (dst / (1.0 - dst)) / (src / (1.0 - src))
    return arr * r / (arr * r + (1.0 - arr))
