from __future__ import annotations

import math

import numpy as np
import pytest

from calimon.deploy.io import ScoredSet
from calimon.deploy.prevalence import at_prevalence, prevalence_report, reweight_to_prevalence
from calimon.errors import InputError


def test_counts_per_10000():
    r = at_prevalence(mr=0.2, far=0.05, base_rate=0.01)
    assert r.true_alerts == pytest.approx(80.0)
    assert r.false_alerts == pytest.approx(495.0)
    assert r.alerts == pytest.approx(575.0)
    assert r.misses == pytest.approx(20.0)
    assert r.precision == pytest.approx(80 / 575)
    assert math.isnan(at_prevalence(1.0, 0.0, 0.5).precision)


def test_report_from_scored_set_uses_the_threshold():
    s = ScoredSet.from_arrays([0.1, 0.6, 0.4, 0.9], [0, 0, 1, 1])
    r = prevalence_report(s, 0.5, base_rate=0.1, per=1000)
    assert (r.mr, r.far) == (0.5, 0.5)
    assert r.alerts == pytest.approx(1000 * (0.1 * 0.5 + 0.9 * 0.5))


def test_reweight_closed_form():
    p = np.array([0.0, 0.1, 0.5, 0.9, 1.0])
    out = reweight_to_prevalence(p, train_prevalence=0.5, target_prevalence=0.01)
    r = 0.01 / 0.99
    np.testing.assert_allclose(out, p * r / (p * r + 1 - p))
    assert out[2] == pytest.approx(0.01)  # p = prior at 50% maps to the new prior
    np.testing.assert_allclose(reweight_to_prevalence(out, 0.01, 0.5), p, atol=1e-12)
    np.testing.assert_allclose(reweight_to_prevalence(p, 0.3, 0.3), p)


def test_reweight_matches_bayes_on_gaussian_scores():
    # Exact posteriors of two unit Gaussians at base rates 0.5 and 0.05.
    x = np.linspace(-3, 3, 13)
    lr = np.exp(x)  # N(0.5, 1) vs N(-0.5, 1): likelihood ratio e^x

    def post(pi):
        return pi * lr / (pi * lr + 1 - pi)

    np.testing.assert_allclose(reweight_to_prevalence(post(0.5), 0.5, 0.05), post(0.05))


def test_validation_names_the_argument():
    with pytest.raises(InputError, match="base_rate"):
        at_prevalence(0.1, 0.1, 1.5)
    with pytest.raises(InputError, match="target_prevalence"):
        reweight_to_prevalence([0.5], 0.5, 0.0)
    with pytest.raises(InputError, match="field 'p'"):
        reweight_to_prevalence([float("nan")], 0.5, 0.1)
