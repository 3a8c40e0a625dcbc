"""calimon's isotonic breakpoints are scikit-learn's own (calimon.calibration.isotonic)."""

from __future__ import annotations

import numpy as np
from sklearn.isotonic import IsotonicRegression

from calimon.calibration.isotonic import isotonic_breakpoints


def test_the_breakpoints_are_scikit_learn_s():
    rng = np.random.default_rng(0)
    for trial in range(120):
        n = int(rng.integers(2, 600))
        p = rng.random(n)
        if trial % 3 == 0:
            p = np.round(p, 1)  # many equal scores
        elif trial % 3 == 1:
            p = p ** 3 + (rng.random(n) < 0.1) * 1e-17  # nearly equal ones too
        y = (rng.random(n) < np.clip(p + rng.normal(0, 0.3, n), 0, 1)).astype(np.int64)
        iso = IsotonicRegression(y_min=0.0, y_max=1.0, increasing=True, out_of_bounds="clip")
        iso.fit(p, y)
        x_thr, y_thr = isotonic_breakpoints(p, y)
        assert np.array_equal(x_thr, iso.X_thresholds_), trial
        assert np.array_equal(y_thr, iso.y_thresholds_), trial
