"""The confidence sequences of calimon.numerics.confseq."""

import numpy as np
import pytest

from calimon.numerics.binomial import clopper_pearson
from calimon.numerics.confseq import JEFFREYS, Prior, cs_count_lower, cs_count_upper
from calimon.studies.shift.live import count_upper


def test_the_bound_grows_with_the_count_seen_and_brackets_it():
    """Nondecreasing in k (so counting an unknown item at its worst keeps it valid), at least
    the count seen plus nothing, at most N minus the other kind seen."""
    N, m = 300, 60
    ups = [cs_count_upper(k, m, N, 0.05) for k in range(m + 1)]
    los = [cs_count_lower(k, m, N, 0.05) for k in range(m + 1)]
    assert all(a <= b for a, b in zip(ups, ups[1:], strict=False))
    assert all(a <= b for a, b in zip(los, los[1:], strict=False))
    for k, (lo, hi) in enumerate(zip(los, ups, strict=True)):
        assert k <= lo <= hi <= N - (m - k)


def test_it_is_wider_than_the_fixed_n_bound_at_one_look_and_exact_at_the_census():
    for k, m in ((3, 100), (10, 200), (0, 50)):
        assert cs_count_upper(k, m, 1000, 0.05) >= count_upper(k, m, 1000, 0.05)
    assert cs_count_upper(7, 500, 500, 0.05) == 7 == cs_count_lower(7, 500, 500, 0.05)
    assert cs_count_upper(0, 0, 500, 0.05) == 500 and cs_count_lower(0, 0, 500, 0.05) == 0


def test_it_holds_at_every_sample_size_at_once():
    """Read after every item up to the whole population, each one-sided bound excludes the
    truth in at most delta of the draws (delta 0.1, 300 draws: the count's 95% Clopper-Pearson
    lower limit must stay under delta); a prior mixture is as valid as the default."""
    rng = np.random.default_rng(3)
    N, K, delta, runs = 200, 30, 0.1, 300
    for prior in (JEFFREYS, Prior(((1.0, 20.0), (5.0, 5.0)))):
        above = below = 0
        for _ in range(runs):
            x = np.zeros(N, int)
            x[:K] = 1
            rng.shuffle(x)
            seen = [int(v) for v in np.cumsum(x)]
            below += any(cs_count_upper(seen[m - 1], m, N, delta, prior) < K
                         for m in range(1, N + 1))
            above += any(cs_count_lower(seen[m - 1], m, N, delta, prior) > K
                         for m in range(1, N + 1))
        for wrong in (above, below):
            assert clopper_pearson(wrong, runs)[0] <= delta, (prior, above, below)
        assert above + below > 0  # the bounds are not trivially wide


def test_bad_counts_are_refused():
    with pytest.raises(ValueError, match="0 <= k <= m <= N"):
        cs_count_upper(5, 3, 10, 0.05)
