from __future__ import annotations

import numpy as np
import pytest

from calimon.deploy.cascade import align_stages, design_cascade, evaluate_cascade
from calimon.deploy.guarantees import cut_values
from calimon.deploy.io import ScoredSet
from calimon.deploy.policies import InfeasiblePolicyError
from calimon.errors import InputError


def test_evaluate_hand_example():
    s1 = np.array([0.1, 0.4, 0.5, 0.6, 0.9, 0.95])
    s2 = np.array([np.nan, 0.2, 0.9, 0.7, np.nan, np.nan])  # stage 2 ran only in the band
    y = np.array([0, 0, 1, 0, 1, 0])
    st = evaluate_cascade(s1, s2, y, a=0.3, b=0.8, t2=0.8, cost_stage1=0.5, cost_stage2=10.0)
    # band: 0.4 (s2 0.2, pass), 0.5 (0.9, flag), 0.6 (0.7, pass); above b: 0.9, 0.95 flagged
    assert st.escalated == 3 and st.escalation_rate == 0.5
    assert (st.misses, st.false_alarms) == (0, 1)
    assert st.mr == 0 and st.far == pytest.approx(1 / 4)
    assert st.cost_per_1000 == pytest.approx(1000 * (0.5 + 0.5 * 10.0))
    with pytest.raises(InputError, match="never 0"):
        evaluate_cascade(s1, s2, y, a=0.0, b=1.0, t2=0.8, cost_stage1=0, cost_stage2=1)


def _brute(s1, s2, y, target_far, c1, c2, max_mr):
    c1s, c2s = cut_values(np.unique(s1)), cut_values(np.unique(s2))
    best = None
    for a in c1s:
        for b in c1s[c1s >= a]:
            for t in c2s:
                st = evaluate_cascade(s1, np.where((s1 >= a) & (s1 < b), s2, np.nan), y, a, b,
                                      t, c1, c2)
                if st.far > target_far + 1e-12 or (max_mr is not None and
                                                   st.mr > max_mr + 1e-12):
                    continue
                key = (st.mr, st.cost_per_1000) if max_mr is None else (st.cost_per_1000, st.mr)
                best = key if best is None or key < best else best
    return best


def test_design_matches_brute_force_on_small_sets():
    rng = np.random.default_rng(0)
    for trial in range(25):
        n = int(rng.integers(6, 16))
        y = rng.integers(0, 2, n)
        if not 0 < y.sum() < n:
            continue
        s1 = np.round(rng.random(n) * 0.6 + 0.3 * y, 1)
        s2 = np.round(rng.random(n) * 0.4 + 0.5 * y, 1)
        target = [0.0, 0.2, 0.5][trial % 3]
        max_mr = None if trial % 2 else 0.5
        want = _brute(s1, s2, y, target, 1.0, 20.0, max_mr)
        if want is None:
            with pytest.raises(InfeasiblePolicyError):
                design_cascade(s1, s2, y, target_far=target, cost_stage1=1.0, cost_stage2=20.0,
                               max_mr=max_mr, n_grid=1000)
            continue
        d = design_cascade(s1, s2, y, target_far=target, cost_stage1=1.0, cost_stage2=20.0,
                           max_mr=max_mr, n_grid=1000)
        got = (d.cascade.mr, d.cascade.cost_per_1000) if max_mr is None else \
            (d.cascade.cost_per_1000, d.cascade.mr)
        assert got == pytest.approx(want)
        assert d.cascade.far <= target + 1e-12


def _two_readouts(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    z = rng.normal(size=n)
    s1 = 1 / (1 + np.exp(-(2 * y - 1) - z))  # a weak, cheap readout
    s2 = 1 / (1 + np.exp(-2 * (2 * y - 1) - 0.5 * z - 0.7 * rng.normal(size=n)))  # strong
    return s1, s2, y


def test_cascade_is_cheaper_than_stage2_alone_at_its_miss_rate():
    s1, s2, y = _two_readouts()
    free = design_cascade(s1, s2, y, target_far=0.05, cost_stage1=0.01, cost_stage2=1.0)
    only2, only1 = free.stage2_only, free.stage1_only
    assert only1.escalated == 0 and only1.cost_per_1000 == pytest.approx(10.0)
    assert only2.escalation_rate == 1 and only2.cost_per_1000 == pytest.approx(1000.0)
    assert only2.far <= 0.05 and free.cascade.far <= 0.05
    assert free.cascade.mr <= only2.mr  # stage 2 alone is on the scanned grid
    budget = design_cascade(s1, s2, y, target_far=0.05, cost_stage1=0.01, cost_stage2=1.0,
                            max_mr=2 * only2.mr + 0.01)
    assert budget.cascade.mr <= 2 * only2.mr + 0.01
    assert budget.cascade.cost_per_1000 < 0.8 * only2.cost_per_1000
    assert budget.cascade.mr < only1.mr


def test_fixed_t2_and_validation():
    s1, s2, y = _two_readouts(500)
    d = design_cascade(s1, s2, y, target_far=0.1, cost_stage1=0, cost_stage2=1, t2=0.5)
    assert d.cascade.t2 == 0.5
    with pytest.raises(InputError, match="target_far"):
        design_cascade(s1, s2, y, target_far=2.0, cost_stage1=0, cost_stage2=1)
    with pytest.raises(InputError, match="cost_stage2"):
        design_cascade(s1, s2, y, target_far=0.1, cost_stage1=0, cost_stage2=-1)
    with pytest.raises(InfeasiblePolicyError):
        design_cascade(s1, s2, y, target_far=0.0, cost_stage1=0, cost_stage2=1, max_mr=0.0)


def test_align_stages_joins_by_id():
    a = ScoredSet.from_arrays([0.1, 0.8, 0.5], [0, 1, 0], ids=["x", "y", "z"])
    b = ScoredSet.from_arrays([0.3, 0.2], [1, 0], ids=["y", "x"], score="p_raw")
    s1, s2, y = align_stages(a, b)
    assert s1.tolist() == [0.1, 0.8] and s2.tolist() == [0.2, 0.3] and y.tolist() == [0, 1]
    c = ScoredSet.from_arrays([0.3], [0], ids=["y"])
    with pytest.raises(InputError, match="differs"):
        align_stages(a, c)
