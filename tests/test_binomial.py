"""The binomial CDF and the average ranks that the certificates and AUROC compute without
importing scipy.stats: the values are scipy.stats' own, exactly."""

from __future__ import annotations

import numpy as np
from scipy.stats import binom, rankdata

from calimon.numerics.binomial import binom_cdf, samples_needed
from calimon.numerics.metrics import auroc, average_ranks


def test_binom_cdf_is_scipy_s():
    for n in (1, 2, 7, 40, 368, 1000, 5000):
        k = np.arange(0, n + 3)
        for p in (1e-4, 0.01, 0.05, 0.1, 0.37, 0.5, 0.99):
            assert np.array_equal(binom_cdf(k, n, p), binom.cdf(k, n, p)), (n, p)
            assert binom_cdf(int(k[n // 2]), n, p) == binom.cdf(k[n // 2], n, p)
    assert isinstance(binom_cdf(3, 10, 0.2), float) and binom_cdf(10, 10, 0.2) == 1.0
    assert samples_needed(0.05, 0.05, k=3) == 153  # 3 events in 153 trials certify 5% at 95%
    assert binom.cdf(3, 153, 0.05) <= 0.05 < binom.cdf(3, 152, 0.05)


def test_average_ranks_are_rankdata_s():
    rng = np.random.default_rng(0)
    for x in (rng.normal(size=500), rng.integers(0, 5, size=300).astype(float),
              np.array([0.5]), np.array([2.0, 2.0, 1.0, 2.0]), np.round(rng.random(1000), 2)):
        assert np.array_equal(average_ranks(x), rankdata(x))
    y = np.r_[np.zeros(100), np.ones(100)].astype(int)
    p = np.round(rng.random(200) * 0.5 + 0.25 * y, 1)  # many ties
    from sklearn.metrics import roc_auc_score

    assert abs(auroc(p, y) - roc_auc_score(y, p)) < 1e-12
