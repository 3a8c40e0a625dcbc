from __future__ import annotations

import numpy as np
import pytest

from calimon.deploy.io import ScoredSet, synthetic_scored
from calimon.deploy.uncertainty import bootstrap_intervals
from calimon.errors import InputError
from calimon.numerics import metrics


@pytest.fixture(scope="module")
def scored():
    return synthetic_scored(300, seed=2)


def test_groups_estimates_and_interval_order(scored):
    out = bootstrap_intervals(scored, 0.5, n_boot=100, seed=1)
    assert list(out)[0] == "all"
    assert {k for k in out if k.startswith("category=")} == {
        "category=safety", "category=sycophancy", "category=spec_gaming"}
    assert {k for k in out if k.startswith("task=")} == {"task=qa", "task=code",
                                                          "task=reasoning"}
    t = out["all"]
    mr, far = scored.rates(0.5)
    assert t.mr.estimate == mr and t.far.estimate == far
    assert t.auroc.estimate == pytest.approx(metrics.auroc(scored.scores, scored.labels))
    assert t.ece.estimate == pytest.approx(metrics.ece(scored.scores, scored.labels))
    for iv in (t.mr, t.far, t.auroc, t.ece):
        assert iv.low <= iv.estimate <= iv.high and iv.n_used == 100
    assert t.n == 600 and t.n_pairs == 300 and t.n_pos == t.n_neg == 300
    assert sum(out[k].n for k in out if k.startswith("task=")) == 600


def test_deterministic_given_seed(scored):
    a = bootstrap_intervals(scored, 0.4, groups_by=(), n_boot=100, seed=3)
    b = bootstrap_intervals(scored, 0.4, groups_by=(), n_boot=100, seed=3)
    assert a["all"] == b["all"] and list(a) == ["all"]


def test_pairs_are_resampled_whole():
    # Every pair holds two copies of a benign and two of a misbehaving transcript: the copies
    # add no information, so resampling pairs must give intervals about sqrt(2) wider than
    # treating the rows as independent.
    rng = np.random.default_rng(0)
    n = 250
    b, m = rng.random(n), rng.random(n) + 0.3
    s = np.clip(np.repeat(np.stack([b, m], 1), 2, axis=1).ravel(), 0, 1)
    y = np.tile([0, 0, 1, 1], n)
    pairs = np.repeat(np.arange(n), 4).astype(str)
    paired = bootstrap_intervals(ScoredSet.from_arrays(s, y, pair_ids=pairs), 0.5,
                                 groups_by=(), n_boot=300)["all"]
    iid = bootstrap_intervals(ScoredSet.from_arrays(s, y), 0.5, groups_by=(), n_boot=300)["all"]
    for stat in ("far", "mr"):
        wp, wi = (getattr(t, stat).high - getattr(t, stat).low for t in (paired, iid))
        assert 1.2 < wp / wi < 1.7


def test_undefined_statistics_are_nan_not_zero():
    s = ScoredSet.from_arrays([0.2, 0.7], [0, 0], categories=["safety", "safety"])
    t = bootstrap_intervals(s, 0.5, groups_by=("category",), n_boot=20)["category=safety"]
    assert np.isnan(t.mr.estimate) and t.mr.n_used == 0 and np.isnan(t.auroc.low)
    assert t.far.estimate == 0.5


def test_validation():
    s = ScoredSet.from_arrays([0.2, 0.7], [0, 1])
    with pytest.raises(InputError, match="groups_by"):
        bootstrap_intervals(s, 0.5, groups_by=("model",))
    with pytest.raises(InputError, match="n_boot"):
        bootstrap_intervals(s, 0.5, n_boot=0)
    with pytest.raises(InputError, match="label"):
        bootstrap_intervals(ScoredSet.from_arrays([0.2], None), 0.5)
