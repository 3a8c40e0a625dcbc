"""Pair-clustered bootstrap intervals for MR, FAR, AUROC and ECE, overall and per group.

A resample draws whole pairs (``pair_id``) with replacement, within the group being measured,
so the two members of a pair enter together; they are not independent and an i.i.d. bootstrap
would give intervals that are too narrow. Intervals are percentile intervals over the resamples
in which the statistic is defined (MR needs a misbehaving sample, FAR a benign one, AUROC and
ECE both classes for AUROC); ``Interval.n_used`` says how many that was.

AUROC and ECE are those of :mod:`calimon.numerics.metrics` (ECE with equal-width bins).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from calimon.deploy.io import ScoredSet
from calimon.errors import InputError

GROUP_COLUMNS = {"category": "categories", "task": "tasks", "split": "splits"}
_BLOCK = 200  # resamples per block of the (resamples x samples) weight matrix


@dataclass(frozen=True)
class Interval:
    """Point estimate on the data and a percentile bootstrap interval [low, high]."""

    estimate: float
    low: float
    high: float
    n_used: int


@dataclass(frozen=True)
class IntervalTable:
    """Intervals of one group (``"all"`` or ``"category=safety"``, ``"task=code"``, ...)."""

    group: str
    n: int
    n_pairs: int
    n_pos: int
    n_neg: int
    threshold: float
    level: float
    n_boot: int
    mr: Interval
    far: Interval
    auroc: Interval
    ece: Interval

    def to_dict(self) -> dict[str, Any]:
        """The fields as a dict."""
        return asdict(self)


def _interval(estimate: float, values: np.ndarray, level: float) -> Interval:
    ok = values[~np.isnan(values)]
    if ok.size == 0:
        return Interval(float(estimate), math.nan, math.nan, 0)
    lo, hi = np.quantile(ok, [(1 - level) / 2, (1 + level) / 2])
    return Interval(float(estimate), float(lo), float(hi), int(ok.size))


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.maximum(den, 1), np.nan)


def _table(scored: ScoredSet, name: str, threshold: float, n_boot: int, level: float,
           seed: int, ece_bins: int) -> IntervalTable:
    from calimon.numerics import metrics
    from calimon.numerics.bootstrap import resample_weights

    s, y = scored.scores, scored.labels.astype(np.int64)
    pos, neg = y == 1, y == 0
    flag = s >= threshold
    both = bool(pos.any() and neg.any())
    est_mr = float(np.mean(~flag[pos])) if pos.any() else math.nan
    est_far = float(np.mean(flag[neg])) if neg.any() else math.nan
    est_auc = metrics.auroc(s, y) if both else math.nan
    est_ece = metrics.ece(s, y, n_bins=ece_bins)
    mr, far = np.full(n_boot, np.nan), np.full(n_boot, np.nan)
    auc, ece = np.full(n_boot, np.nan), np.full(n_boot, np.nan)
    rng_seeds = np.random.SeedSequence(seed).spawn((n_boot + _BLOCK - 1) // _BLOCK)
    for b, start in enumerate(range(0, n_boot, _BLOCK)):
        m = min(_BLOCK, n_boot - start)
        w = resample_weights(scored.pair_ids.tolist(), m,
                             seed=int(rng_seeds[b].generate_state(1)[0]))
        mr[start:start + m] = _ratio((w * (pos & ~flag)).sum(1), (w * pos).sum(1))
        far[start:start + m] = _ratio((w * (neg & flag)).sum(1), (w * neg).sum(1))
        for r in range(m):
            idx = np.repeat(np.arange(s.size), w[r])
            ece[start + r] = metrics.ece(s[idx], y[idx], n_bins=ece_bins)
            if both and 0 < y[idx].sum() < idx.size:
                auc[start + r] = metrics.auroc(s[idx], y[idx])
    return IntervalTable(
        group=name, n=len(scored), n_pairs=int(np.unique(scored.pair_ids.astype(str)).size),
        n_pos=int(pos.sum()), n_neg=int(neg.sum()), threshold=float(threshold),
        level=float(level), n_boot=n_boot, mr=_interval(est_mr, mr, level),
        far=_interval(est_far, far, level), auroc=_interval(est_auc, auc, level),
        ece=_interval(est_ece, ece, level))


def bootstrap_intervals(scored: ScoredSet, threshold: float,
                        groups_by: Sequence[str] = ("category", "task"), n_boot: int = 1000,
                        level: float = 0.95, seed: int = 0,
                        ece_bins: int = 15) -> dict[str, IntervalTable]:
    """Intervals for MR and FAR at ``threshold`` (flag iff score >= threshold), AUROC and ECE.

    Keys: ``"all"``, then ``"<column>=<value>"`` for each column in ``groups_by``
    (``category``, ``task`` or ``split``) and each value present, in sorted order. Each group
    is resampled by pairs on its own; ``seed`` makes the result deterministic.
    """
    scored.require_labels("bootstrap_intervals")
    if isinstance(n_boot, bool) or not isinstance(n_boot, int | np.integer) or n_boot < 1:
        raise InputError(f"expected an integer >= 1, got {n_boot!r}", field="n_boot")
    if not (isinstance(level, int | float) and 0 < level < 1):
        raise InputError(f"expected a number in (0, 1), got {level!r}", field="level")
    if not (isinstance(threshold, int | float | np.floating) and not math.isnan(threshold)):
        raise InputError(f"expected a number, got {threshold!r}", field="threshold")
    unknown = [g for g in groups_by if g not in GROUP_COLUMNS]
    if unknown:
        raise InputError(f"expected columns among {sorted(GROUP_COLUMNS)}, got {unknown}",
                         field="groups_by")
    out = {"all": _table(scored, "all", threshold, int(n_boot), level, seed, ece_bins)}
    for g in groups_by:
        col = getattr(scored, GROUP_COLUMNS[g]).astype(str)
        for value in sorted(set(col.tolist())):
            name = f"{g}={value}"
            out[name] = _table(scored.subset(col == value), name, threshold, int(n_boot),
                               level, seed, ece_bins)
    return out
