"""scikit-learn's `StratifiedGroupKFold` (shuffled) folds, the same ones, computed faster.

The shift check refits its domain classifier out of fold on every permutation of the domain
labels, and each refit asks for stratified group folds anew. scikit-learn assigns each group to
a fold in a Python loop that calls ``np.std`` once per group and per candidate fold; on 2,000
transcripts that is most of `calimon apply-policy`'s time (benchmarks/results/
perf-apply-policy.md). Here the candidate folds of a group are scored in one array operation,
with the same arithmetic (``np.std`` over the same axis length, so the same rounding) and the
same tie-breaking (``np.isclose``, then the smaller fold), so the folds are identical;
tests/test_shift_folds.py checks them against scikit-learn's on many inputs.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np


def _isclose(a: float, b: float) -> bool:
    """``np.isclose(a, b)`` for two floats (rtol 1e-5, atol 1e-8; infinities equal only to
    themselves)."""
    if not np.isfinite(b) or not np.isfinite(a):
        return bool(a == b)
    return abs(a - b) <= 1e-8 + 1e-5 * abs(b)


def _best_fold(per_fold: np.ndarray, y_cnt: np.ndarray, counts: np.ndarray) -> int:
    """The fold scikit-learn's ``_find_best_fold`` picks for a group of class ``counts``: the
    one whose class shares across folds spread least once the group is in it (ties: the fold
    holding fewer samples)."""
    k = per_fold.shape[0]
    tried = np.repeat(per_fold[None, :, :], k, axis=0)
    tried[np.arange(k), np.arange(k)] += counts
    evals = np.mean(np.std(tried / y_cnt.reshape(1, 1, -1), axis=1), axis=1)
    sizes = per_fold.sum(axis=1)
    best, low, fewest = 0, np.inf, np.inf
    for i in range(k):
        e, n = float(evals[i]), float(sizes[i])
        if e < low or (_isclose(e, low) and n < fewest):
            best, low, fewest = i, e, n
    return best


def stratified_group_folds(y: np.ndarray, groups: np.ndarray, n_splits: int, seed: int
                           ) -> np.ndarray:
    """The fold (0 .. ``n_splits - 1``) of each row, as
    ``StratifiedGroupKFold(n_splits, shuffle=True, random_state=seed)`` assigns them."""
    _, y_inv, y_cnt = np.unique(np.asarray(y), return_inverse=True, return_counts=True)
    _, g_inv, g_cnt = np.unique(groups, return_inverse=True, return_counts=True)
    n_groups = len(g_cnt)
    if n_splits > n_groups:
        raise ValueError(f"Cannot have number of splits n_splits={n_splits} greater than the "
                         f"number of groups: {n_groups}.")
    per_group = np.zeros((n_groups, len(y_cnt)))
    np.add.at(per_group, (g_inv, y_inv), 1)
    perm = np.arange(n_groups)
    np.random.RandomState(seed).shuffle(perm)
    per_group = per_group[perm]
    inv_perm = np.empty_like(perm)
    inv_perm[perm] = np.arange(perm.size)
    g_inv = inv_perm[g_inv]
    order = np.argsort(-np.std(per_group, axis=1), kind="stable")
    per_fold = np.zeros((n_splits, len(y_cnt)))
    fold_of_group = np.empty(n_groups, dtype=int)
    for gi in order:
        best = _best_fold(per_fold, y_cnt, per_group[gi])
        per_fold[best] += per_group[gi]
        fold_of_group[gi] = best
    return fold_of_group[g_inv]


def stratified_group_splits(y: np.ndarray, groups: np.ndarray, n_splits: int, seed: int
                            ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(train, test)`` row indices of each fold, in fold order, as
    ``StratifiedGroupKFold(n_splits, shuffle=True, random_state=seed).split`` yields them."""
    fold = stratified_group_folds(y, groups, n_splits, seed)
    for i in range(n_splits):
        yield np.flatnonzero(fold != i), np.flatnonzero(fold == i)


__all__ = ["stratified_group_folds", "stratified_group_splits"]
