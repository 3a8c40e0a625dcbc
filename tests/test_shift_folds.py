"""The shift check's stratified group folds are scikit-learn's `StratifiedGroupKFold` folds,
computed faster (`calimon.studies.shift.folds`): the same (train, test) indices on pairs, odd
groups, imbalanced domains, permuted labels, every fold count and several seeds."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.model_selection import StratifiedGroupKFold

from calimon.studies.shift.folds import stratified_group_splits


def _cases():
    rng = np.random.default_rng(7)
    for n, n_groups, share in ((40, 20, 0.5), (300, 150, 0.4), (2000, 1000, 0.6),
                               (501, 90, 0.1), (64, 64, 0.5), (30, 7, 0.3)):
        g = rng.integers(0, n_groups, n)
        g[:n_groups] = np.arange(n_groups)  # every group present
        d = (rng.random(n) < share).astype(int)
        d[:2], d[2:4] = 0, 1
        yield n, np.asarray([f"p{x}\x00{y}" for x, y in zip(g, d, strict=True)], dtype=object), d


@pytest.mark.parametrize(("n", "groups", "d"), [
    pytest.param(*c, marks=pytest.mark.slow) if c[0] > 1000 else c for c in _cases()])
def test_the_folds_are_scikit_learns(n, groups, d):
    rng = np.random.default_rng(n)
    # scikit-learn takes a second or more on the larger ones: fewer fold counts and seeds
    combos = ((5, 0),) if n > 1000 else ((2, 0), (3, 1), (5, 12345))
    for labels in (d, rng.permutation(d)):
        for k, seed in combos:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                want = list(StratifiedGroupKFold(k, shuffle=True, random_state=seed).split(
                    np.zeros((n, 1)), labels, groups))
            got = list(stratified_group_splits(labels, groups, k, seed))
            assert len(got) == len(want) == k
            for (a_tr, a_te), (b_tr, b_te) in zip(got, want, strict=True):
                assert np.array_equal(a_te, b_te) and np.array_equal(a_tr, b_tr)


def test_more_folds_than_groups_or_class_members_is_refused_as_scikit_learn_refuses_it():
    from sklearn.model_selection import StratifiedGroupKFold

    for y, groups in (([0, 1, 0, 1, 0, 1], ["a", "a", "b", "b", "a", "b"]),  # 2 groups
                      ([0, 1, 0, 1], ["a", "a", "b", "c"])):  # 2 of each class
        y, groups = np.array(y), np.array(groups)
        with pytest.raises(ValueError) as want:
            list(StratifiedGroupKFold(3, shuffle=True, random_state=0)
                 .split(np.zeros(len(y)), y, groups))
        with pytest.raises(ValueError) as got:
            list(stratified_group_splits(y, groups, 3, 0))
        assert str(got.value) == str(want.value)
