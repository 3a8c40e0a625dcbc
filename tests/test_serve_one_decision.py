"""A served request's map and action come from one-value paths (`Calibrator.predict_one`,
`apply_policy_one`): they must give the array paths' answers bit for bit, and fail as they fail,
since served decisions are compared with offline ones (`calimon apply-policy`, the review loop)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from calimon.calibration import make_calibrator
from calimon.calibration.crossfit import DEFAULT_METHODS
from calimon.deploy.policy_file import Policy, PolicyActions, apply_policy, apply_policy_one
from calimon.errors import InputError


def _raw(rng, n):
    edges = [0.0, 1.0, 5e-324, 1 - 2 ** -53, 0.5, 1e-300, 1e-12, 1 - 1e-12]
    return np.r_[edges, rng.random(n), rng.beta(0.2, 0.2, n)]


@pytest.mark.parametrize("method", DEFAULT_METHODS)
def test_one_value_equals_the_array_path_bit_for_bit(method):
    rng = np.random.default_rng(7)
    p = rng.beta(2, 2, 400)
    y = (rng.random(400) < p).astype(int)
    cal = make_calibrator(method).fit(p, y)
    for x in _raw(rng, 2000).tolist():
        assert cal.predict_one(x) == float(cal.predict(np.array([x]))[0]), (method, x)
    for bad in (math.nan, math.inf, -0.1, 1.5):
        with pytest.raises(InputError) as want:
            cal.predict(np.array([bad]))
        with pytest.raises(InputError) as got:
            cal.predict_one(bad)
        assert str(got.value) == str(want.value)


def test_an_unfitted_map_fails_as_predict_does():
    with pytest.raises(InputError, match="not fitted"):
        make_calibrator("platt").predict_one(0.5)


def test_one_action_equals_the_array_path():
    rng = np.random.default_rng(3)
    for t_low, t_high in ((0.2, 0.7), (0.4, 0.4), (0.0, 1.0), (-math.inf, math.inf)):
        actions = PolicyActions(unscored="auto_block")  # unscored apart from the band
        policy = Policy.model_construct(t_low=t_low, t_high=t_high, actions=actions)
        scores = [None, math.nan, t_low, t_high, 0.0, 1.0, *rng.random(500).tolist()]
        want = apply_policy(policy, [math.nan if s is None else s for s in scores])
        assert [apply_policy_one(policy, s) for s in scores] == want.tolist(), (t_low, t_high)
