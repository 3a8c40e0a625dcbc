"""Label planning is monotone in alpha: a looser target never asks for more labels of the new
data than a stricter one of the same rate, and says whose plan it takes."""

from __future__ import annotations

import types

import numpy as np

from calimon.studies.shift.check import certify_sides


def _report_and_rows(n: int = 80, seed: int = 1):
    rng = np.random.default_rng(seed)
    y = np.r_[np.zeros(n), np.ones(n)].astype(int)
    s = np.r_[rng.beta(2, 5, n), rng.beta(5, 2, n)]
    rep = types.SimpleNamespace(weights=rng.lognormal(0, 0.5, 2 * n), outside_share=0.0,
                                shifted=True)
    return rep, s, y


def test_a_looser_far_target_never_needs_more_labels():
    # seed 1 at 80 a class: the FAR <= 0.05 plan (its threshold has no false alarm here) asked
    # 119 labels and the FAR <= 0.10 plan 153 before plans were made monotone
    rep, s, y = _report_and_rows()
    strict, loose = certify_sides(rep, s, y, far=(0.05, 0.10), seed=0).aware
    assert strict.abstained and loose.abstained
    assert loose.labels_needed == strict.labels_needed
    assert loose.labels_plan.startswith(f"the {strict.labels_needed} labels planned for FAR <= "
                                        "0.05 certify this looser target too; its own plan asks")
    assert strict.labels_plan == "" and loose.labels_plan in loose.message()
    # the order of the targets does not matter
    loose2, strict2 = certify_sides(rep, s, y, far=(0.10, 0.05), seed=0).aware
    assert (loose2.labels_needed, strict2.labels_needed) == (loose.labels_needed,
                                                             strict.labels_needed)


def test_monotone_over_many_sets_and_rates():
    for n in (60, 80, 100, 150, 200):
        for seed in range(4):
            rep, s, y = _report_and_rows(n, seed)
            aware = certify_sides(rep, s, y, far=(0.02, 0.05, 0.10, 0.2), mr=(0.1, 0.3),
                                  seed=0).aware
            for rate in ("far", "mr"):
                needs = [c.labels_needed for c in aware if c.rate == rate]
                assert needs == sorted(needs, reverse=True), (n, seed, rate, needs)
