"""Exact binomial bounds on a rate (Clopper-Pearson) and the sample size a bound needs.

Numerics with no calimon dependency above `calimon.errors`: the deployment guarantees
(`calimon.deploy.guarantees`), the class-support rates (`calimon.numerics.class_support`), sampled
readouts and robustness flips all read their intervals from here.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.special import betaincinv  # the beta quantile; scipy.stats (1.3 s) loads on demand

from calimon.errors import InputError


def check_rate(x: Any, name: str) -> float:
    """``x`` as a float strictly between 0 and 1, else an `InputError` naming ``name``."""
    if isinstance(x, bool) or not isinstance(x, int | float | np.floating) or not 0 < x < 1:
        raise InputError(f"expected a number strictly between 0 and 1, got {x!r}", field=name)
    return float(x)


def _check_counts(k: Any, n: Any) -> tuple[int, int]:
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise InputError(f"expected an integer >= 1, got {n!r}", field="n")
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or not 0 <= k <= n:
        raise InputError(f"expected an integer in [0, n={n}], got {k!r}", field="k")
    return int(k), int(n)


def cp_upper(k: int, n: int, delta: float) -> float:
    """One-sided exact (Clopper-Pearson) upper ``1 - delta`` bound on a rate: ``k`` events in
    ``n`` trials. Equals ``1 - delta ** (1 / n)`` when ``k == 0``; 1 when ``k == n``."""
    k, n = _check_counts(k, n)
    delta = check_rate(delta, "delta")
    if k == n:
        return 1.0
    return float(betaincinv(k + 1, n - k, 1.0 - delta))


def cp_lower(k: int, n: int, delta: float) -> float:
    """One-sided exact (Clopper-Pearson) lower ``1 - delta`` bound; 0 when ``k == 0``."""
    k, n = _check_counts(k, n)
    delta = check_rate(delta, "delta")
    if k == 0:
        return 0.0
    return float(betaincinv(k, n - k + 1, delta))


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Two-sided exact interval at ``level`` (each tail ``(1 - level) / 2``)."""
    tail = (1.0 - check_rate(level, "level")) / 2.0
    return cp_lower(k, n, tail), cp_upper(k, n, tail)


def binom_cdf(k: Any, n: int, p: float) -> Any:
    """``scipy.stats.binom.cdf(k, n, p)`` for counts ``0 <= k`` (an int or an array), ``n >= 1``
    and ``0 < p < 1``: the same Boost function that scipy.stats calls, without importing
    scipy.stats (over a second; tests/test_binomial.py checks the values are its own)."""
    try:
        from scipy.special._ufuncs import _binom_cdf  # where scipy.stats.binom._cdf finds it
    except ImportError:  # a scipy that keeps it elsewhere
        from scipy.stats import binom

        return binom.cdf(k, n, p)
    k = np.floor(np.asarray(k, dtype=float))
    out = np.where(k >= n, 1.0, _binom_cdf(np.minimum(k, n), n, p))
    return out if out.ndim else float(out)


def samples_needed(alpha: float, delta: float, k: int = 0) -> int:
    """Smallest ``n`` such that ``k`` events in ``n`` trials certify ``rate <= alpha`` at
    ``1 - delta`` (one-sided Clopper-Pearson upper bound ``<= alpha``).

    For ``k == 0`` the closed form ``ceil(ln(delta) / ln(1 - alpha))``: zero false alarms in
    299 benign samples certify ``FAR < 1%`` at 95%.
    """
    alpha, delta = check_rate(alpha, "alpha"), check_rate(delta, "delta")
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 0:
        raise InputError(f"expected an integer >= 0, got {k!r}", field="k")
    if k == 0:
        n = math.ceil(math.log(delta) / math.log1p(-alpha))
        # guard the last bit of floating point in the division
        while n > 1 and 1.0 - delta ** (1.0 / (n - 1)) <= alpha:
            n -= 1
        while 1.0 - delta ** (1.0 / n) > alpha:
            n += 1
        return n
    # binom_cdf(k, n, alpha) is decreasing in n: exponential then binary search
    lo, hi = k + 1, k + 1
    while binom_cdf(k, hi, alpha) > delta:
        lo, hi = hi, hi * 2
    while lo < hi:
        mid = (lo + hi) // 2
        if binom_cdf(k, mid, alpha) <= delta:
            hi = mid
        else:
            lo = mid + 1
    return int(lo)
