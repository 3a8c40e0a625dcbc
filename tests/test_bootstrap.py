from __future__ import annotations

import numpy as np
import pytest

from calimon.errors import InputError
from calimon.numerics.bootstrap import bootstrap_band, resample_weights
from calimon.numerics.curves import Curve


def _pairs(n_pairs: int, seed: int = 0, gap: float = 0.2):
    """Pair k = (misbehaving, benign) with ids k; positives score higher on average."""
    rng = np.random.default_rng(seed)
    s = np.clip(np.r_[rng.normal(0.5 + gap, 0.2, n_pairs), rng.normal(0.5, 0.2, n_pairs)], 0, 1)
    y = np.r_[np.ones(n_pairs, bool), np.zeros(n_pairs, bool)]
    return s, y, np.r_[np.arange(n_pairs), np.arange(n_pairs)]


def test_resample_keeps_groups_whole():
    groups = ["a", "a", "b", "c", "c", "c", None, None]
    w = resample_weights(groups, n_boot=300, seed=1)
    assert w.shape == (300, 8)
    assert np.all(w[:, 0] == w[:, 1]) and np.all(w[:, 3] == w[:, 4]) and np.all(w[:, 4] == w[:, 5])
    assert np.any(w[:, 6] != w[:, 7])          # a None id is a group of its own
    per_group = w[:, [0, 2, 3, 6, 7]]
    assert np.all(per_group.sum(axis=1) == 5)  # 5 groups drawn with replacement
    assert np.any(w[:, 0] != w[:, 2])


def test_resample_is_deterministic_given_seed():
    g = np.arange(50) // 2
    np.testing.assert_array_equal(resample_weights(g, 20, seed=3), resample_weights(g, 20, seed=3))
    assert np.any(resample_weights(g, 20, seed=3) != resample_weights(g, 20, seed=4))


def test_band_respects_pairs():
    # Within a pair both members share one score; across pairs scores differ. A resample of whole
    # pairs adds a pair's positive and negative at the same threshold equally often, so on every
    # resample MR = 1 - FAR at every threshold, hence MR at FAR <= g is >= 1 - g. An i.i.d.
    # bootstrap of the same samples breaks the symmetry and dips below 1 - g.
    n_pairs = 30
    shared = np.linspace(0.05, 0.95, n_pairs)
    s = np.r_[shared, shared]
    y = np.r_[np.ones(n_pairs, bool), np.zeros(n_pairs, bool)]
    pairs = np.r_[np.arange(n_pairs), np.arange(n_pairs)]
    clustered = bootstrap_band(s, y, pairs, n_boot=200, seed=0)
    assert np.all(clustered.mr_lo >= 1 - clustered.far_grid - 1e-9)
    iid = bootstrap_band(s, y, None, n_boot=200, seed=0)
    assert np.any(iid.mr_lo < 1 - iid.far_grid - 0.05)


def test_band_mostly_contains_the_point_estimate_and_is_ordered():
    s, y, g = _pairs(200)
    c = Curve.from_scores(s, y, g, n_boot=200, seed=0)
    b = c.band
    point = np.array([c.at_far(float(x)).mr for x in b.far_grid])
    inside = (b.mr_lo - 1e-12 <= point) & (point <= b.mr_hi + 1e-12)
    assert inside.mean() >= 0.9
    assert np.all(b.mr_lo <= b.mr_hi)
    assert np.all(np.diff(b.mr_lo) <= 1e-12) and np.all(np.diff(b.mr_hi) <= 1e-12)
    assert b.mr_lo[0] <= b.mr_hi[0] <= 1 and b.mr_lo[-1] == 0 and b.n_used == 200
    assert b.far_grid.size == 101 and b.far_grid[0] == 0 and b.far_grid[-1] == 1


def test_band_narrows_with_lower_level_and_with_more_data():
    s, y, g = _pairs(100)
    wide = bootstrap_band(s, y, g, level=0.95, seed=2)
    narrow = bootstrap_band(s, y, g, level=0.5, seed=2)
    assert np.all(narrow.mr_lo >= wide.mr_lo) and np.all(narrow.mr_hi <= wide.mr_hi)
    s4, y4, g4 = _pairs(1600)
    big = bootstrap_band(s4, y4, g4, seed=2)
    mid = slice(10, 90)
    assert np.mean((big.mr_hi - big.mr_lo)[mid]) < np.mean((wide.mr_hi - wide.mr_lo)[mid])


def test_band_is_deterministic_given_seed():
    s, y, g = _pairs(60)
    a, b = bootstrap_band(s, y, g, seed=7), bootstrap_band(s, y, g, seed=7)
    np.testing.assert_array_equal(a.mr_lo, b.mr_lo)
    np.testing.assert_array_equal(a.mr_hi, b.mr_hi)
    other = bootstrap_band(s, y, g, seed=8)
    assert np.any(other.mr_lo != a.mr_lo) or np.any(other.mr_hi != a.mr_hi)


def test_band_chunking_does_not_change_the_result(monkeypatch):
    import calimon.numerics.bootstrap as bs

    s, y, g = _pairs(40)
    whole = bootstrap_band(s, y, g, n_boot=50, seed=5)
    monkeypatch.setattr(bs, "_BLOCK", 7 * s.size)   # 7 resamples per block
    chunked = bootstrap_band(s, y, g, n_boot=50, seed=5)
    np.testing.assert_array_equal(whole.mr_lo, chunked.mr_lo)
    np.testing.assert_array_equal(whole.mr_hi, chunked.mr_hi)


def test_resamples_missing_a_class_are_skipped_and_counted():
    s = [0.9, 0.1, 0.2, 0.3, 0.4, 0.5]
    y = [1, 0, 0, 0, 0, 0]
    b = bootstrap_band(s, y, None, n_boot=200, seed=0)
    assert 0 < b.n_used < 200 and b.n_boot == 200
    assert np.all(b.mr_lo == 0)               # the lone positive is always on top


def test_custom_grid():
    s, y, g = _pairs(50)
    b = bootstrap_band(s, y, g, far_grid=[0.0, 0.05, 0.1], n_boot=30)
    assert b.far_grid.tolist() == [0.0, 0.05, 0.1] and b.mr_lo.shape == (3,)


@pytest.mark.parametrize("kwargs, match", [
    ({"n_boot": 0}, "n_boot"),
    ({"n_boot": 2.5}, "n_boot"),
    ({"level": 1.0}, "level"),
    ({"far_grid": [0.2, 0.1]}, "far_grid"),
    ({"far_grid": [0.1, 1.5]}, "far_grid"),
    ({"groups": [1, 2]}, "groups"),
    ({"groups": [[1], [2], [3], [4]]}, "hashable"),
])
def test_bad_arguments_are_refused(kwargs, match):
    args = {"scores": [0.1, 0.2, 0.3, 0.4], "labels": [0, 1, 0, 1], **kwargs}
    with pytest.raises(InputError, match=match):
        bootstrap_band(**args)


def test_nan_scores_are_refused():
    with pytest.raises(InputError, match="missing"):
        bootstrap_band([0.1, float("nan")], [0, 1], [0, 0])
