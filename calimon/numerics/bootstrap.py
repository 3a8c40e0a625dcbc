"""Pair-clustered bootstrap bands for MR / FAR curves.

A resample draws whole groups (pair ids) with replacement, so the misbehaving and the benign
member of a pair always enter a resample together and the same number of times; samples of a
pair are not independent, and an i.i.d. bootstrap would understate the spread.

The band is "vertical": for each resample and each grid value g, the MR at the lowest threshold
whose FAR <= g (the best miss rate a false-alarm budget of g buys); the band is the pair of
quantiles of those MRs across resamples.

Everything is vectorized over resamples: one (resamples x samples) matrix of multiplicities, a
cumulative sum along the score order, and a lookup per resample.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from calimon.errors import InputError
from calimon.validation import TOL, as_groups, as_labels, as_scores

# Cap on the elements of one (resamples x samples) block, to bound memory on large inputs.
_BLOCK = 4_000_000


@dataclass(frozen=True, eq=False)
class Band:
    """Lower / upper quantiles of MR at FAR <= each grid value, over bootstrap resamples.

    ``n_used`` counts the resamples that held both classes (the others are skipped, since their
    MR or FAR is undefined); the quantiles are over those.
    """

    far_grid: np.ndarray
    mr_lo: np.ndarray
    mr_hi: np.ndarray
    level: float
    n_boot: int
    n_used: int


def resample_weights(groups: Any, n_boot: int, seed: int = 0) -> np.ndarray:
    """(n_boot, n) multiplicity of each sample in each resample of whole groups.

    ``groups`` holds one hashable id per sample; a None id is a group of its own. Deterministic
    given ``seed``.
    """
    codes = as_groups(groups, len(groups))
    return _weights(codes, _check_n_boot(n_boot), np.random.default_rng(seed))


def _weights(codes: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    n_groups = int(codes.max()) + 1 if codes.size else 0
    draws = rng.integers(0, n_groups, size=(n_boot, n_groups))
    offsets = (np.arange(n_boot) * n_groups)[:, None]
    per_group = np.bincount((draws + offsets).ravel(), minlength=n_boot * n_groups)
    return per_group.reshape(n_boot, n_groups)[:, codes]


def _check_n_boot(n_boot: Any) -> int:
    if not (isinstance(n_boot, int | np.integer) and not isinstance(n_boot, bool)
            and n_boot >= 1):
        raise InputError(f"expected an integer >= 1, got {n_boot!r}", field="n_boot")
    return int(n_boot)


def _grid(far_grid: Any) -> np.ndarray:
    if far_grid is None:
        return np.linspace(0.0, 1.0, 101)
    g = as_scores(far_grid, "far_grid")
    if g.size == 0 or g.min() < 0 or g.max() > 1 or np.any(np.diff(g) <= 0):
        raise InputError("expected a non-empty, strictly increasing grid of values in [0, 1]",
                         field="far_grid")
    return g


def bootstrap_band(scores: Any, labels: Any, groups: Any = None, far_grid: Any = None,
                   n_boot: int = 200, level: float = 0.95, seed: int = 0) -> Band:
    """Pair-clustered bootstrap band of MR on a FAR grid (default: 101 points in [0, 1]).

    ``groups``: one pair id per sample; None treats every sample as its own group (an i.i.d.
    bootstrap). ``level``: central coverage, e.g. 0.95 gives the 2.5% and 97.5% quantiles.
    """
    s = as_scores(scores)
    y = as_labels(labels, s.size)
    if s.size == 0:
        raise InputError("expected at least one score, got none", field="scores")
    codes = np.arange(s.size) if groups is None else as_groups(groups, s.size)
    n_boot = _check_n_boot(n_boot)
    if not (isinstance(level, float | int) and 0 < level < 1):
        raise InputError(f"expected a number in (0, 1), got {level!r}", field="level")
    grid = _grid(far_grid)

    order = np.argsort(-s, kind="stable")
    s, y, codes = s[order], y[order], codes[order]
    ends = np.r_[np.flatnonzero(np.diff(s)), s.size - 1]
    rng = np.random.default_rng(seed)
    mr_at = np.full((n_boot, grid.size), np.nan)
    step = max(1, _BLOCK // s.size)
    for start in range(0, n_boot, step):
        w = _weights(codes, min(step, n_boot - start), rng)
        tp = np.cumsum(w * y, axis=1)[:, ends]
        fp = np.cumsum(w, axis=1)[:, ends] - tp
        n_pos, n_neg = tp[:, -1], fp[:, -1]
        for r in np.flatnonzero((n_pos > 0) & (n_neg > 0)):
            far = np.r_[0.0, fp[r] / n_neg[r]]
            mr = np.r_[1.0, 1.0 - tp[r] / n_pos[r]]
            mr_at[start + r] = mr[np.searchsorted(far, grid + TOL, side="right") - 1]

    used = ~np.isnan(mr_at[:, 0])
    n_used = int(used.sum())
    if n_used:
        lo, hi = np.quantile(mr_at[used], [(1 - level) / 2, (1 + level) / 2], axis=0)
    else:
        lo = hi = np.full(grid.size, math.nan)
    return Band(_ro(grid), _ro(lo), _ro(hi), float(level), n_boot, n_used)


def _ro(a: np.ndarray) -> np.ndarray:
    a = np.array(a, dtype=float)
    a.flags.writeable = False
    return a
