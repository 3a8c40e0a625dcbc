"""Scikit-learn's ``StratifiedGroupKFold(n_splits=k, shuffle=True, random_state=seed)`` folds,
computed as it computes them (the same shuffle, order and greedy choice of fold, one group at a
time) but without importing scikit-learn (three seconds of a `calimon curve` on recorded
scores), and with each group's choice of fold vectorized over the folds. tests/test_group_folds.py
checks the folds are scikit-learn's own on many random inputs."""

from __future__ import annotations

import numpy as np


def stratified_group_folds(y: np.ndarray, groups: np.ndarray, k: int, seed: int) -> np.ndarray:
    """The fold (0 to k - 1) of each sample: the test fold ``StratifiedGroupKFold`` puts it in.
    ``y``: class labels; ``groups``: group codes (int); ValueError where scikit-learn raises
    one (``k`` above every class's count, or above the number of groups)."""
    _, y_inv, y_cnt = np.unique(y, return_inverse=True, return_counts=True)
    if np.all(k > y_cnt):
        raise ValueError(f"n_splits={k} cannot be greater than the number of members in each "
                         "class.")
    _, g_inv, g_cnt = np.unique(groups, return_inverse=True, return_counts=True)
    n_groups = g_cnt.size
    if k > n_groups:
        raise ValueError(f"Cannot have number of splits n_splits={k} greater than the number "
                         f"of groups: {n_groups}.")
    counts = np.zeros((n_groups, y_cnt.size))
    np.add.at(counts, (g_inv.ravel(), y_inv.ravel()), 1)
    perm = np.arange(n_groups)
    np.random.RandomState(seed).shuffle(perm)
    counts = counts[perm]
    inv = np.empty_like(perm)
    inv[perm] = np.arange(perm.size)
    g_inv = inv[g_inv.ravel()]
    per_fold = np.zeros((k, y_cnt.size))
    fold_of = np.empty(n_groups, dtype=np.int64)
    scale = y_cnt.reshape(1, 1, -1)
    eye = np.eye(k)[:, :, None]
    for g in np.argsort(-np.std(counts, axis=1), kind="stable"):
        best = _best_fold(per_fold, scale, eye * counts[g])
        per_fold[best] += counts[g]
        fold_of[g] = best
    return fold_of[g_inv]


def _best_fold(per_fold: np.ndarray, scale: np.ndarray, added: np.ndarray) -> int:
    """The fold a group joins: the lowest mean over classes of the spread of the folds' class
    shares with the group in it, the emptier fold among near ties (``np.isclose``'s test, on
    finite floats), the first among equals."""
    evals = np.mean(np.std((per_fold[None] + added) / scale, axis=1), axis=1).tolist()
    sizes = per_fold.sum(axis=1).tolist()
    best, low, size = 0, evals[0], sizes[0]
    for i in range(1, len(evals)):
        e = evals[i]
        if e < low or (abs(e - low) <= 1e-08 + 1e-05 * abs(low) and sizes[i] < size):
            best, low, size = i, e, sizes[i]
    return best


__all__ = ["stratified_group_folds"]
