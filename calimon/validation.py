"""Checks of the arrays every numeric layer reads (scores, labels, cluster ids) and the
tolerance of rate comparisons; shared by curves, bootstrap, metrics and calibration."""

from __future__ import annotations

from typing import Any

import numpy as np

from calimon.errors import InputError

# Rates are ratios of counts; a user's alpha of 0.05 and a FAR of 1/20 may differ in the last bit.
TOL = 1e-12


def as_scores(scores: Any, name: str = "scores") -> np.ndarray:
    """1-D float array of scores in [0, 1]; NaN / None (a missing score) is refused, never 0."""
    try:
        arr = np.asarray(scores, dtype=float)
    except (TypeError, ValueError) as exc:
        raise InputError(f"expected a sequence of numbers, got {type(scores).__name__} "
                         f"({exc})", field=name) from None
    if arr.ndim != 1:
        raise InputError(f"expected a 1-D sequence, got shape {arr.shape}", field=name)
    nan = np.flatnonzero(np.isnan(arr))
    if nan.size:
        raise InputError(
            f"expected finite scores, got {nan.size} missing (NaN/None) at indices "
            f"{nan[:10].tolist()}{'...' if nan.size > 10 else ''}; a missing score is never "
            f"treated as 0: drop those samples explicitly and report the count", field=name)
    out = np.flatnonzero((arr < 0) | (arr > 1))
    if out.size:
        raise InputError(f"expected scores in [0, 1], got {out.size} value(s) outside (first: "
                         f"{arr[out[0]]!r} at index {int(out[0])})", field=name)
    return arr


def as_labels(labels: Any, n: int | None = None, name: str = "labels",
              dtype: Any = bool) -> np.ndarray:
    """The one label check: a 1-D array of ``dtype`` (bool: True = misbehavior; ``np.int64``
    gives 0/1) from bools or 0/1, of length ``n`` when given; None (unknown) and any other
    value are refused, naming the item."""
    if isinstance(labels, np.ndarray) and labels.dtype == bool and labels.ndim == 1:
        out = labels
    elif (isinstance(labels, np.ndarray) and labels.ndim == 1 and labels.dtype.kind in "iuf"
          and bool(((labels == 0) | (labels == 1)).all())):
        out = labels == 1  # 0/1 numbers: the item-by-item check below would pass each
    else:
        if isinstance(labels, np.ndarray) and labels.ndim != 1:
            raise InputError(f"expected a 1-D array of labels, got shape {labels.shape}",
                             field=name)
        seq = labels.tolist() if isinstance(labels, np.ndarray) else list(labels)
        out = np.empty(len(seq), dtype=bool)
        for i, v in enumerate(seq):
            if v is None:
                raise InputError(f"item {i}: label is None (unknown); drop unlabelled samples "
                                 f"before building a curve", field=name)
            if isinstance(v, bool | np.bool_) or (isinstance(v, int | float) and v in (0, 1)):
                out[i] = bool(v)
            else:
                raise InputError(f"item {i}: expected True/False or 0/1, got {v!r}", field=name)
    if n is not None and out.shape[0] != n:
        raise InputError(f"expected {n} labels (one per score), got {out.shape[0]}", field=name)
    return out if dtype is bool else out.astype(dtype)


def as_groups(groups: Any, n: int, name: str = "groups") -> np.ndarray:
    """Integer cluster codes from any hashable ids; a None id is a cluster of its own."""
    seq = list(groups) if not isinstance(groups, np.ndarray) else groups.tolist()
    if len(seq) != n:
        raise InputError(f"expected {n} group ids (one per score), got {len(seq)}", field=name)
    codes: dict[Any, int] = {}
    out = np.empty(n, dtype=np.int64)
    for i, g in enumerate(seq):
        key = ("__calimon_singleton__", i) if g is None else g
        try:
            out[i] = codes.setdefault(key, len(codes))
        except TypeError:
            raise InputError(f"item {i}: group id must be hashable, got {type(g).__name__}",
                             field=name) from None
    return out
