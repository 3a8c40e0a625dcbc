"""Pair-grouped cross-fitting of calibration maps.

Every sample gets an out-of-fold calibrated score from a map that never saw its pair
(``groups`` = pair ids): folds come from scikit-learn's ``StratifiedGroupKFold`` (shuffled
with ``seed``; computed by `calimon.calibration.group_folds`, the same folds), so all members of a pair share one fold and the folds keep the label balance.

Each training fold must hold both classes. If a split breaks that, fewer folds are tried
(``n_splits`` down to 2). If no split works (e.g. every positive sits in one pair), the
2-fold split is kept and the samples whose training fold has a single class get that fold's
positive rate (0 or 1) as their score: the only honest answer a map fitted on those samples
could give. Every such fallback is recorded in ``CalibrationResult.notes`` and warned about.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from calimon.calibration.group_folds import stratified_group_folds
from calimon.calibration.maps import Calibrator, make_calibrator
from calimon.errors import InputError
from calimon.numerics.metrics import as_probabilities, calibration_report
from calimon.validation import as_labels

__all__ = ["CalibrationResult", "DEFAULT_METHODS", "calibrate", "crossfit_predict",
           "fit_on_split", "make_folds"]

DEFAULT_METHODS = ("temperature", "platt", "isotonic", "histogram", "beta")


def _check_groups(groups: Any, n: int) -> np.ndarray:
    if groups is None or isinstance(groups, str | bytes):
        raise InputError(f"expected one pair id per sample, got {type(groups).__name__}",
                         field="groups")
    g = list(groups)
    if len(g) != n:
        raise InputError(f"expected {n} pair ids (one per sample), got {len(g)}", field="groups")
    if any(x is None for x in g):
        raise InputError("expected a pair id for every sample, got None", field="groups")
    _, codes = np.unique(np.array([str(x) for x in g], dtype=object), return_inverse=True)
    return codes.astype(np.int64)


def _sgkf_folds(y: np.ndarray, codes: np.ndarray, k: int, seed: int) -> np.ndarray:
    return stratified_group_folds(y, codes, k, seed)  # scikit-learn's, without importing it


def _training_ok(y: np.ndarray, folds: np.ndarray, k: int) -> bool:
    for i in range(k):
        train = y[folds != i]
        if (folds == i).sum() == 0 or train.min() == train.max():
            return False
    return True


def make_folds(y: Any, groups: Any, n_splits: int = 5,
               seed: int = 0) -> tuple[np.ndarray, int, tuple[str, ...]]:
    """Fold index per sample (pairs never split), the number of folds used, and notes."""
    ya = as_labels(y, name="y", dtype=np.int64)
    codes = _check_groups(groups, ya.shape[0])
    if isinstance(n_splits, bool) or not isinstance(n_splits, int) or n_splits < 2:
        raise InputError(f"expected an integer >= 2, got {n_splits!r}", field="n_splits")
    n_groups = int(codes.max()) + 1 if codes.size else 0
    if n_groups < 2:
        raise InputError(f"cross-fitting needs at least 2 distinct pair ids, got {n_groups}",
                         field="groups")
    if ya.min() == ya.max():
        raise InputError(f"calibration needs both classes, got only label {int(ya[0])}",
                         field="y")
    notes: list[str] = []
    for k in range(min(n_splits, n_groups), 1, -1):
        folds = _sgkf_folds(ya, codes, k, seed)
        if _training_ok(ya, folds, k):
            if k < n_splits:
                notes.append(f"used {k} folds instead of {n_splits}: with more, some training "
                             f"fold missed a class (or there were only {n_groups} pairs)")
            return folds, k, tuple(notes)
    folds = _sgkf_folds(ya, codes, 2, seed)
    notes.append("no pair-grouped split gives every training fold both classes; samples "
                 "whose training fold has one class get that fold's positive rate")
    return folds, 2, tuple(notes)


def _oof(method: str, p: np.ndarray, y: np.ndarray, folds: np.ndarray, k: int,
         kwargs: dict[str, Any]) -> np.ndarray:
    out = np.empty_like(p)
    for i in range(k):
        test, train = folds == i, folds != i
        if y[train].min() == y[train].max():
            out[test] = float(y[train][0])
        else:
            out[test] = make_calibrator(method, **kwargs).fit(p[train], y[train]).predict(p[test])
    return out


def crossfit_predict(method: str, p: Any, y: Any, groups: Any, n_splits: int = 5,
                     seed: int = 0, **kw: Any) -> np.ndarray:
    """Out-of-fold calibrated scores: each sample's map was fitted without its pair.

    ``kw`` goes to the calibrator's constructor (e.g. ``n_bins`` for ``"histogram"``).
    """
    pa = as_probabilities(p)
    ya = as_labels(y, n=pa.shape[0], name="y", dtype=np.int64)
    make_calibrator(method, **kw)  # fail early on an unknown method or argument
    folds, k, notes = make_folds(ya, groups, n_splits, seed)
    for note in notes:
        warnings.warn(note, stacklevel=2)
    return _oof(method, pa, ya, folds, k, kw)


def fit_on_split(method: str, p_fit: Any, y_fit: Any, p_apply: Any,
                 **kw: Any) -> tuple[Calibrator, np.ndarray]:
    """Fit ``method`` on the calibration split, apply it to another split.

    Returns the fitted map and the calibrated ``p_apply``.
    """
    cal = make_calibrator(method, **kw).fit(p_fit, y_fit)
    return cal, cal.predict(as_probabilities(p_apply, name="p_apply"))


@dataclass(frozen=True, eq=False)
class CalibrationResult:
    """Cross-fitted calibration of one score by several methods.

    ``oof[m]``: out-of-fold calibrated scores (the honest ones to evaluate);
    ``maps[m]``: the map fitted on all given data (the one to deploy);
    ``metrics_before``: ``calibration_report`` of the raw scores;
    ``metrics_after[m]``: ``calibration_report`` of ``oof[m]``;
    ``folds``: fold index per sample; ``n_splits``: folds used; ``notes``: fallbacks taken.
    """

    methods: tuple[str, ...]
    oof: dict[str, np.ndarray]
    maps: dict[str, Calibrator]
    metrics_before: dict[str, float]
    metrics_after: dict[str, dict[str, float]]
    folds: np.ndarray
    n_splits: int
    seed: int
    notes: tuple[str, ...] = ()

    def best(self, metric: str = "nll") -> str:
        """The method with the lowest out-of-fold ``metric`` (ece, mce, brier or nll)."""
        if metric not in ("ece", "mce", "brier", "nll"):
            raise InputError(f"expected one of ece, mce, brier, nll, got {metric!r}",
                             field="metric")
        return min(self.methods, key=lambda m: self.metrics_after[m][metric])

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe summary (metrics with NaN as None, fitted maps; no per-sample arrays)."""
        def clean(d: dict[str, float]) -> dict[str, Any]:
            return {k: None if isinstance(v, float) and math.isnan(v) else v
                    for k, v in d.items()}
        return {"methods": list(self.methods), "n_splits": self.n_splits, "seed": self.seed,
                "notes": list(self.notes), "metrics_before": clean(self.metrics_before),
                "metrics_after": {m: clean(self.metrics_after[m]) for m in self.methods},
                "maps": {m: self.maps[m].to_dict() for m in self.methods}}


def calibrate(p: Any, y: Any, groups: Any, methods: Sequence[str] = DEFAULT_METHODS,
              n_splits: int = 5, seed: int = 0, *,
              method_kwargs: dict[str, dict[str, Any]] | None = None) -> CalibrationResult:
    """Cross-fit each method (same folds for all), fit it on all data, report before/after."""
    pa = as_probabilities(p)
    ya = as_labels(y, n=pa.shape[0], name="y", dtype=np.int64)
    if isinstance(methods, str) or not methods:
        raise InputError(f"expected a non-empty sequence of method names, got {methods!r}",
                         field="methods")
    if len(set(methods)) != len(methods):
        raise InputError(f"expected distinct method names, got {list(methods)}", field="methods")
    method_kwargs = method_kwargs or {}
    for m in methods:
        make_calibrator(m, **method_kwargs.get(m, {}))
    folds, k, notes = make_folds(ya, groups, n_splits, seed)
    for note in notes:
        warnings.warn(note, stacklevel=2)
    oof, maps, after = {}, {}, {}
    for m in methods:
        kw = method_kwargs.get(m, {})
        oof[m] = _oof(m, pa, ya, folds, k, kw)
        oof[m].flags.writeable = False
        maps[m] = make_calibrator(m, **kw).fit(pa, ya)
        after[m] = calibration_report(oof[m], ya)
    folds.flags.writeable = False
    return CalibrationResult(methods=tuple(methods), oof=oof, maps=maps,
                             metrics_before=calibration_report(pa, ya), metrics_after=after,
                             folds=folds, n_splits=k, seed=seed, notes=notes)
