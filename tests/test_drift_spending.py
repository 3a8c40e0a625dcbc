"""The drift watch controls its false alarms over time (calimon.review.drift): check k is judged
at alpha * 6 / (pi^2 k^2), so under exchangeable traffic the chance of any alarm over all its
checks is at most alpha; the permutation test stops early on unchanged traffic."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from calimon.review.drift import (
    ALPHA,
    MAX_PERMUTATIONS,
    first_alarm,
    permutations_for,
    spent_alpha,
)
from calimon.studies.shift.detect import two_sample_test
from calimon.studies.shift.features import build_view


def _rolling_p_values(rng, checks=30, calib=300, window=500, every=100):
    """p-values of the watch's checks on one run of exchangeable traffic: a fixed calibration
    set against rolling windows of one stream (each window shares 80% with the last); the
    exact two-sided z-test of the means of N(0, 1) data."""
    cal = rng.normal(size=calib)
    stream = np.r_[0.0, np.cumsum(rng.normal(size=window + every * (checks - 1)))]
    starts = np.arange(checks) * every
    means = (stream[starts + window] - stream[starts]) / window
    z = (means - cal.mean()) / math.sqrt(1 / calib + 1 / window)
    return 2 * norm.sf(np.abs(z))


def test_exchangeable_windows_raise_a_false_alarm_at_most_at_the_stated_rate():
    rng = np.random.default_rng(0)
    runs = [_rolling_p_values(rng) for _ in range(2000)]
    spent = np.mean([first_alarm(p) is not None for p in runs])
    per_window = np.mean([min(p) <= ALPHA for p in runs])  # the rule the watch had before
    se = math.sqrt(ALPHA * (1 - ALPHA) / len(runs))
    assert spent <= ALPHA + 2 * se, spent
    assert per_window > 3 * ALPHA, per_window  # 30 overlapping checks at 0.05 each


def test_spending_sums_to_alpha_and_the_permutations_can_reach_each_level():
    assert sum(spent_alpha(k) for k in range(1, 200_000)) == pytest.approx(ALPHA, rel=1e-4)
    for k in (1, 3, 10):
        b = permutations_for(k, 200)
        assert b >= 200 and 1 / (b + 1) <= spent_alpha(k)
    assert permutations_for(13, 200) > MAX_PERMUTATIONS  # the watch says it is spent there
    assert first_alarm([0.5, 0.01, 1e-9]) == 3 and first_alarm([0.02]) == 1


def test_the_permutation_test_stops_early_on_unchanged_traffic():
    rng = np.random.default_rng(0)
    words = "one two three four five six seven eight".split()

    def side(n, w):
        return {"request": [" ".join(rng.choice(w, 8)) for _ in range(n)],
                "response": [" ".join(rng.choice(w, 20)) for _ in range(n)],
                "score": rng.random(n)}

    same = two_sample_test(build_view(side(120, words), side(120, words)), permutations=400,
                           stop_hits=5)
    assert same.permutations < 400 and same.p_value == pytest.approx(5 / same.permutations)
    other = "nine ten eleven twelve thirteen fourteen fifteen sixteen".split()
    moved = two_sample_test(build_view(side(120, words), side(120, other)), permutations=60,
                            stop_hits=5, alpha_test=0.02)
    assert moved.permutations == 60 and moved.p_value == pytest.approx(1 / 61) and moved.shifted
