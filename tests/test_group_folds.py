"""calimon's StratifiedGroupKFold folds are scikit-learn's own (calimon.calibration.group_folds)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.model_selection import StratifiedGroupKFold

from calimon.calibration.group_folds import stratified_group_folds


def _sklearn(y, groups, k, seed):
    folds = np.full(y.shape[0], -1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for i, (_, test) in enumerate(StratifiedGroupKFold(k, shuffle=True, random_state=seed)
                                      .split(np.zeros(y.shape[0]), y, groups)):
            folds[test] = i
    return folds


def test_the_folds_are_scikit_learn_s():
    rng = np.random.default_rng(0)
    cases = 0
    for trial in range(40):
        n = int(rng.integers(6, 300))
        pairs = rng.integers(1, 4)  # one to three samples a group
        groups = np.repeat(np.arange(n), pairs)[:n] if trial % 3 else rng.integers(0, n // 2 + 3, n)
        y = (rng.random(n) < rng.uniform(0.05, 0.6)).astype(np.int64)
        if y.min() == y.max():
            continue
        for k in (2, 3, 5):
            seed = int(rng.integers(0, 1000))
            try:
                want = _sklearn(y, groups, k, seed)
            except ValueError as exc:
                with pytest.raises(ValueError, match=str(exc).split(".")[0][:30]):
                    stratified_group_folds(y, groups, k, seed)
                continue
            assert np.array_equal(stratified_group_folds(y, groups, k, seed), want), (trial, k)
            cases += 1
    assert cases > 80
