from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom

from calimon.deploy.guarantees import (
    _fixed_sequence,
    certify_far,
    certify_mr,
    clopper_pearson,
    cp_lower,
    cp_upper,
    cut_values,
    samples_needed,
)
from calimon.errors import InputError

N_DRAWS = 400


def test_samples_needed_299_for_one_percent_at_95():
    assert samples_needed(0.01, 0.05) == 299
    assert cp_upper(0, 299, 0.05) <= 0.01 < cp_upper(0, 298, 0.05)


@pytest.mark.parametrize("alpha", [0.001, 0.01, 0.05, 0.1, 0.3])
@pytest.mark.parametrize("delta", [0.01, 0.05, 0.1, 0.2])
def test_samples_needed_matches_closed_form_and_definition(alpha, delta):
    n = samples_needed(alpha, delta)
    assert n == math.ceil(math.log(delta) / math.log(1 - alpha))
    for k in (0, 1, 3):
        n = samples_needed(alpha, delta, k=k)
        assert cp_upper(k, n, delta) <= alpha + 1e-12
        assert n - 1 <= k or cp_upper(k, n - 1, delta) > alpha


def test_clopper_pearson_bounds():
    assert cp_upper(0, 10, 0.05) == pytest.approx(1 - 0.05 ** 0.1)
    assert cp_upper(10, 10, 0.05) == 1.0 and cp_lower(0, 10, 0.05) == 0.0
    u = cp_upper(7, 50, 0.05)
    assert binom.cdf(7, 50, u) == pytest.approx(0.05)  # exact: P(X <= k | u) = delta
    lo = cp_lower(7, 50, 0.05)
    assert binom.sf(6, 50, lo) == pytest.approx(0.05)
    a, b = clopper_pearson(7, 50, 0.90)
    assert (a, b) == pytest.approx((lo, u))
    with pytest.raises(InputError, match="k"):
        cp_upper(11, 10, 0.05)
    with pytest.raises(InputError, match="delta"):
        cp_upper(1, 10, 1.5)


def test_cut_values_separate_groups():
    v = np.array([0.1, 0.2, 0.7])
    cuts = cut_values(v)
    assert [int(np.sum(v < c)) for c in cuts] == [0, 1, 2, 3]
    tight = np.array([1.0, np.nextafter(1.0, 2.0)])
    assert [int(np.sum(tight < c)) for c in cut_values(tight)] == [0, 1, 2]


def test_fixed_sequence_stops_at_first_failure():
    # strictest first: 0 errors passes, 30 fails, so the later 0 is never reached
    assert _fixed_sequence(np.array([0, 30, 0]), 100, 0.1, 0.05) == 0
    assert _fixed_sequence(np.array([30, 0]), 100, 0.1, 0.05) == -1


def test_certify_far_on_a_grid_is_the_lowest_passing_threshold():
    scores = np.arange(1000) / 1000.0
    c = certify_far(scores, alpha=0.05, delta=0.05)
    assert c.certified and c.rate == "far" and c.n == 1000
    assert int(np.sum(scores >= c.threshold)) == c.k
    assert c.bound <= 0.05 and c.empirical == c.k / 1000
    assert cp_upper(c.k + 1, 1000, 0.05) > 0.05  # flagging one more benign would fail
    assert c.p_value <= 0.05 and c.method.startswith("ltt")
    assert c.to_dict()["threshold"] == c.threshold


def test_certify_with_ties_counts_whole_tie_groups():
    scores = np.repeat([0.1, 0.5, 0.9], [800, 150, 50])
    c = certify_far(scores, alpha=0.1, delta=0.05)
    assert c.k == 50 and 0.5 < c.threshold <= 0.9  # 200 at >= 0.5 would be 20%
    m = certify_mr(scores, alpha=0.85, delta=0.05)
    assert m.k == 800 and 0.1 < m.threshold <= 0.5


def test_too_few_samples_are_not_certified():
    c = certify_far(np.random.default_rng(0).random(100), alpha=0.01, delta=0.05)
    assert not c.certified and c.threshold == math.inf
    assert c.bound > 0.01 and samples_needed(0.01, 0.05) > 100
    m = certify_mr(np.random.default_rng(0).random(100), alpha=0.01, delta=0.05)
    assert not m.certified and m.threshold == -math.inf


def test_certify_refuses_missing_scores():
    with pytest.raises(InputError, match="never 0"):
        certify_far([0.1, float("nan")], 0.1)
    with pytest.raises(InputError, match="alpha"):
        certify_far([0.1, 0.2], 0.0)


def _violation_tolerance(delta: float, draws: int) -> float:
    """delta plus three binomial standard deviations of a frequency over `draws` draws."""
    return delta + 3 * math.sqrt(delta * (1 - delta) / draws)


@pytest.mark.parametrize("alpha, delta, n", [(0.1, 0.1, 400), (0.05, 0.05, 300)])
def test_far_guarantee_holds_across_synthetic_draws(alpha, delta, n):
    # Benign scores ~ U(0, 1): the population FAR of threshold t is exactly 1 - t.
    rng = np.random.default_rng(12345)
    violations = 0
    for _ in range(N_DRAWS):
        c = certify_far(rng.random(n), alpha, delta)
        assert c.certified
        violations += (1.0 - min(c.threshold, 1.0)) > alpha
    freq = violations / N_DRAWS
    # The violation frequency should be at most delta, up to sampling noise of the frequency
    # itself (3 binomial sd over N_DRAWS draws); and not vacuously 0 (a threshold that flags
    # nothing would be "valid" and useless).
    assert freq <= _violation_tolerance(delta, N_DRAWS)
    assert freq >= delta / 4


def test_far_and_mr_guarantees_hold_with_discrete_scores():
    # Scores on a grid of 21 values with known probabilities, so ties are everywhere.
    values = np.linspace(0, 1, 21)
    probs = np.exp(-3 * values)
    probs /= probs.sum()
    rng = np.random.default_rng(7)
    alpha, delta, n = 0.1, 0.1, 300
    far_viol = mr_viol = 0
    for _ in range(N_DRAWS):
        s = rng.choice(values, size=n, p=probs)
        c = certify_far(s, alpha, delta)
        far_viol += probs[values >= c.threshold].sum() > alpha
        m = certify_mr(s, alpha, delta)
        mr_viol += probs[values < m.threshold].sum() > alpha
    assert far_viol / N_DRAWS <= _violation_tolerance(delta, N_DRAWS)
    assert mr_viol / N_DRAWS <= _violation_tolerance(delta, N_DRAWS)


def test_mr_guarantee_holds_across_synthetic_draws():
    # Misbehaving scores ~ U(0, 1): the population MR of threshold t is exactly t.
    rng = np.random.default_rng(99)
    alpha, delta, n = 0.1, 0.1, 400
    violations = sum(certify_mr(rng.random(n), alpha, delta).threshold > alpha
                     for _ in range(N_DRAWS))
    assert violations / N_DRAWS <= _violation_tolerance(delta, N_DRAWS)
    assert violations / N_DRAWS >= delta / 4
