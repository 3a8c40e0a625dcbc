"""scikit-learn's `StratifiedGroupKFold` (shuffled) splits, the same ones, computed faster.

The shift check refits its domain classifier out of fold on every permutation of the domain
labels, and each refit asks for stratified group folds anew. scikit-learn assigns each group to
a fold in a Python loop that calls ``np.std`` once per group and per candidate fold; on 2,000
transcripts that is most of `calimon apply-policy`'s time (benchmarks/results/
perf-apply-policy.md). The folds come from `calimon.calibration.group_folds` (the candidate
folds of a group scored in one array operation, with scikit-learn's arithmetic and
tie-breaking), which calibration's cross-fitting uses too; tests/test_shift_folds.py checks the
splits against scikit-learn's on many inputs.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from calimon.calibration.group_folds import stratified_group_folds


def stratified_group_splits(y: np.ndarray, groups: np.ndarray, n_splits: int, seed: int
                            ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(train, test)`` row indices of each fold, in fold order, as
    ``StratifiedGroupKFold(n_splits, shuffle=True, random_state=seed).split`` yields them."""
    fold = stratified_group_folds(np.asarray(y), np.asarray(groups), n_splits, seed)
    for i in range(n_splits):
        yield np.flatnonzero(fold != i), np.flatnonzero(fold == i)


__all__ = ["stratified_group_splits"]
