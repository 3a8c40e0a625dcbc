"""Calibration and ranking metrics for binary misbehavior scores.

Every function takes ``p`` (probabilities of misbehavior, 1-D, finite, in [0, 1]) and ``y``
(0/1 labels, booleans accepted, same length) and validates both; bad input raises
:class:`calimon.errors.InputError` naming the argument. Pure numpy; no plotting here
(see :mod:`calimon.plotting.reliability`).

Binning (``ece``, ``mce``, ``reliability_bins``): bin ``i`` is ``[e_i, e_{i+1})``, the last
bin also holds ``e_n = 1``. ``strategy="uniform"`` uses ``n_bins`` equal-width bins over
[0, 1]; ``strategy="quantile"`` puts the inner edges at the empirical quantiles of ``p``
(first and last edge forced to 0 and 1, as netcal does), so repeated values can leave bins
empty. Both conventions match ``netcal.metrics.ECE`` / ``MCE`` with ``equal_intervals`` True
or False.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from calimon.errors import InputError
from calimon.validation import as_labels as _labels

__all__ = [
    "ReliabilityBins",
    "as_probabilities",
    "auprc",
    "auroc",
    "average_ranks",
    "brier",
    "calibration_report",
    "ece",
    "mce",
    "nll",
    "reliability_bins",
]

STRATEGIES = ("uniform", "quantile")


def as_probabilities(p: Any, name: str = "p") -> np.ndarray:
    """Return ``p`` as a 1-D float64 array of finite values in [0, 1], or raise InputError."""
    try:
        arr = np.asarray(p, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InputError(f"expected a 1-D array of probabilities, got {type(p).__name__} "
                         f"that is not numeric ({exc})", field=name) from None
    if arr.ndim != 1:
        raise InputError(f"expected a 1-D array of probabilities, got shape {arr.shape}",
                         field=name)
    bad = ~np.isfinite(arr)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(f"expected finite probabilities, got {int(bad.sum())} NaN/inf "
                         f"value(s) (first: {arr[i]} at index {i})", field=name)
    out = (arr < 0.0) | (arr > 1.0)
    if out.any():
        i = int(np.flatnonzero(out)[0])
        raise InputError(f"expected probabilities in [0, 1], got {int(out.sum())} value(s) "
                         f"outside (first: {arr[i]!r} at index {i})", field=name)
    return arr


def _check(p: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
    pa = as_probabilities(p)
    ya = _labels(y, n=pa.shape[0], name="y", dtype=np.int64)
    if pa.shape[0] == 0:
        raise InputError("expected at least one sample, got an empty array", field="p")
    return pa, ya


def _check_bins(n_bins: Any, strategy: Any) -> None:
    if isinstance(n_bins, bool) or not isinstance(n_bins, int | np.integer) or n_bins < 1:
        raise InputError(f"expected a positive integer, got {n_bins!r}", field="n_bins")
    if strategy not in STRATEGIES:
        raise InputError(f"expected one of {', '.join(STRATEGIES)}, got {strategy!r}",
                         field="strategy")


def bin_edges(p: np.ndarray, n_bins: int, strategy: str) -> np.ndarray:
    """Edges (length ``n_bins + 1``, from 0 to 1) for the given binning strategy."""
    if strategy == "uniform":
        return np.linspace(0.0, 1.0, n_bins + 1)
    edges = np.quantile(p, np.linspace(0.0, 1.0, n_bins + 1))
    edges[0], edges[-1] = 0.0, 1.0
    return edges


def assign_bins(p: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Bin index of each value: ``[e_i, e_{i+1})``, last bin closed; values outside are clipped."""
    idx = np.searchsorted(edges, p, side="right") - 1
    return np.clip(idx, 0, len(edges) - 2)


@dataclass(frozen=True, eq=False)
class ReliabilityBins:
    """Per-bin statistics of a reliability diagram.

    ``edges`` has ``n_bins + 1`` entries; ``counts``, ``mean_confidence`` (mean ``p`` in the
    bin) and ``accuracy`` (fraction of positives in the bin) have ``n_bins``. Empty bins have
    count 0 and NaN confidence and accuracy.
    """

    edges: np.ndarray
    counts: np.ndarray
    mean_confidence: np.ndarray
    accuracy: np.ndarray
    strategy: str

    @property
    def n_bins(self) -> int:
        """Number of bins."""
        return int(self.counts.shape[0])

    @property
    def gaps(self) -> np.ndarray:
        """``|accuracy - mean_confidence|`` per bin (NaN for empty bins)."""
        return np.abs(self.accuracy - self.mean_confidence)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable form; NaN becomes None."""
        def clean(a: np.ndarray) -> list:
            return [None if np.isnan(v) else float(v) for v in a]
        return {"strategy": self.strategy, "edges": [float(e) for e in self.edges],
                "counts": [int(c) for c in self.counts],
                "mean_confidence": clean(self.mean_confidence), "accuracy": clean(self.accuracy)}


def reliability_bins(p: Any, y: Any, n_bins: int = 15,
                     strategy: str = "uniform") -> ReliabilityBins:
    """Bin ``p`` and report count, mean confidence and fraction positive per bin."""
    pa, ya = _check(p, y)
    _check_bins(n_bins, strategy)
    edges = bin_edges(pa, n_bins, strategy)
    idx = assign_bins(pa, edges)
    counts = np.bincount(idx, minlength=n_bins)
    sum_p = np.bincount(idx, weights=pa, minlength=n_bins)
    sum_y = np.bincount(idx, weights=ya, minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        conf = np.where(counts > 0, sum_p / counts, np.nan)
        acc = np.where(counts > 0, sum_y / counts, np.nan)
    for a in (edges, counts, conf, acc):
        a.flags.writeable = False
    return ReliabilityBins(edges=edges, counts=counts, mean_confidence=conf, accuracy=acc,
                           strategy=strategy)


def ece(p: Any, y: Any, n_bins: int = 15, strategy: str = "uniform") -> float:
    """Expected calibration error: ``sum_b (n_b / n) * |acc_b - conf_b|`` over non-empty bins.

    ``conf_b`` is the mean of ``p`` in bin ``b`` and ``acc_b`` the fraction of positives in it;
    binning as described in the module docstring (equal width over [0, 1] by default).
    """
    rb = reliability_bins(p, y, n_bins, strategy)
    filled = rb.counts > 0
    return float(np.sum(rb.counts[filled] * rb.gaps[filled]) / rb.counts.sum())


def mce(p: Any, y: Any, n_bins: int = 15, strategy: str = "uniform") -> float:
    """Maximum calibration error: ``max_b |acc_b - conf_b|`` over non-empty bins (see ``ece``)."""
    rb = reliability_bins(p, y, n_bins, strategy)
    return float(np.max(rb.gaps[rb.counts > 0]))


def brier(p: Any, y: Any) -> float:
    """Brier score: mean squared difference between ``p`` and the 0/1 label."""
    pa, ya = _check(p, y)
    return float(np.mean((pa - ya) ** 2))


def nll(p: Any, y: Any, eps: float = 1e-12) -> float:
    """Binary log-loss (mean negative log-likelihood, natural log); ``p`` clipped to [eps, 1-eps]."""
    pa, ya = _check(p, y)
    if not 0.0 < eps < 0.5:
        raise InputError(f"expected 0 < eps < 0.5, got {eps!r}", field="eps")
    pc = np.clip(pa, eps, 1.0 - eps)
    return float(-np.mean(np.where(ya == 1, np.log(pc), np.log1p(-pc))))


def average_ranks(a: np.ndarray) -> np.ndarray:
    """1-based ranks of ``a``, tied values sharing their average rank (``scipy.stats.rankdata``'s
    default, without importing scipy.stats: over a second on a command's start)."""
    order = np.argsort(a, kind="mergesort")
    ordered = a[order]
    new_group = np.r_[True, ordered[1:] != ordered[:-1]]
    starts = np.flatnonzero(np.r_[new_group, True])
    mean_rank = (starts[:-1] + starts[1:] + 1) / 2.0  # ranks starts+1 .. next start, averaged
    ranks = np.empty(a.shape[0], dtype=float)
    ranks[order] = mean_rank[np.cumsum(new_group) - 1]
    return ranks


def auroc(p: Any, y: Any) -> float:
    """Area under the ROC curve (Mann-Whitney U / (n_pos * n_neg), ties count 0.5).

    Equals ``sklearn.metrics.roc_auc_score``. Returns NaN when only one class is present.
    """
    pa, ya = _check(p, y)
    n_pos = int(ya.sum())
    n_neg = ya.shape[0] - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = average_ranks(pa)  # average ranks give ties half credit
    u = ranks[ya == 1].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))


def auprc(p: Any, y: Any) -> float:
    """Average precision: ``sum_k (R_k - R_{k-1}) * P_k`` over distinct thresholds, high to low.

    Equals ``sklearn.metrics.average_precision_score`` (no interpolation). Returns NaN when
    only one class is present.
    """
    pa, ya = _check(p, y)
    n_pos = int(ya.sum())
    if n_pos == 0 or n_pos == ya.shape[0]:
        return float("nan")
    order = np.argsort(-pa, kind="mergesort")
    ps, ys = pa[order], ya[order]
    last = np.r_[np.flatnonzero(np.diff(ps) != 0), ps.shape[0] - 1]  # end of each tie group
    tps = np.cumsum(ys)[last]
    precision = tps / (last + 1.0)
    recall = tps / n_pos
    return float(np.sum(np.diff(recall, prepend=0.0) * precision))


def calibration_report(p: Any, y: Any, n_bins: int = 15) -> dict[str, float]:
    """ECE, MCE (equal-width bins), Brier, NLL, AUROC, AUPRC, plus ``n`` and ``n_pos`` (ints)."""
    pa, ya = _check(p, y)
    return {
        "ece": ece(pa, ya, n_bins), "mce": mce(pa, ya, n_bins), "brier": brier(pa, ya),
        "nll": nll(pa, ya), "auroc": auroc(pa, ya), "auprc": auprc(pa, ya),
        "n": int(pa.shape[0]), "n_pos": int(ya.sum()),
    }
