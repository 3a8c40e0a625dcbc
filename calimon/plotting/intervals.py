"""Exact intervals for a binary-protocol point: Clopper-Pearson, widened over parse failures.

A binary point (``calimon.numerics.curves.BinaryPoint``, or its dict) holds its confusion counts over
parsed replies and its parse-failure ranges; its MR and FAR on a few dozen samples are
uncertain, so every figure draws them with bars. The bars span the exact two-sided interval
from the lowest count (parse failures counted as passed for FAR, as flagged for MR) to the
highest one, over all the point's samples: sampling error and parse failures in one bar.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["BinaryInterval", "binary_interval", "failure_split"]


@dataclass(frozen=True)
class BinaryInterval:
    """Bar ends of a binary point: MR in ``[mr_lo, mr_hi]``, FAR in ``[far_lo, far_hi]``
    (NaN where the class has no sample); ``n_pos``/``n_neg``: the samples of each class,
    parse failures included; ``level``: the two-sided confidence level."""

    mr_lo: float
    mr_hi: float
    far_lo: float
    far_hi: float
    n_pos: int
    n_neg: int
    level: float


def _get(point: Any, key: str) -> Any:
    value = point[key] if isinstance(point, Mapping) else getattr(point, key)
    return math.nan if value is None else value


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= 1e-9


def _ratio(a: int, b: int) -> float:
    return a / b if b else math.nan


def failure_split(point: Any) -> tuple[int, int]:
    """``(misbehaving, benign)`` parse failures of a binary point, recovered from its stored
    counts and ranges (``mr_hi`` counts a misbehaving failure as passed, ``far_hi`` a benign
    one as flagged). If no split reproduces the ranges, every failure is counted on both
    sides, which only widens the bars."""
    tp, fp, tn, fn = (int(_get(point, k)) for k in ("tp", "fp", "tn", "fn"))
    failed = int(_get(point, "n_parse_failure"))
    want = [float(_get(point, k)) for k in ("mr_lo", "mr_hi", "far_lo", "far_hi")]
    for pos in range(failed + 1):
        neg = failed - pos
        n_pos, n_neg = tp + fn + pos, fp + tn + neg
        got = [_ratio(fn, n_pos), _ratio(fn + pos, n_pos), _ratio(fp, n_neg),
               _ratio(fp + neg, n_neg)]
        if all(_same(a, b) for a, b in zip(got, want, strict=True)):
            return pos, neg
    return failed, failed


def _exact(k_lo: int, k_hi: int, n: int, level: float) -> tuple[float, float]:
    from calimon.numerics.binomial import clopper_pearson

    if n == 0:
        return math.nan, math.nan
    return clopper_pearson(k_lo, n, level)[0], clopper_pearson(k_hi, n, level)[1]


def binary_interval(point: Any, level: float = 0.95) -> BinaryInterval:
    """The bars of one binary point (``BinaryPoint`` or its dict): MR from the exact lower
    bound of its misses to the exact upper bound of its misses plus the misbehaving parse
    failures, over all misbehaving samples; FAR likewise over the benign ones."""
    tp, fp, tn, fn = (int(_get(point, k)) for k in ("tp", "fp", "tn", "fn"))
    pos, neg = failure_split(point)
    n_pos, n_neg = tp + fn + pos, fp + tn + neg
    mr_lo, mr_hi = _exact(fn, fn + pos, n_pos, level)
    far_lo, far_hi = _exact(fp, fp + neg, n_neg, level)
    return BinaryInterval(mr_lo, mr_hi, far_lo, far_hi, n_pos, n_neg, level)
