"""MR under shift (calimon.studies.shift.verdict_mr): the three-way verdict for MR targets, its
assumptions checked (n_eff, the weights against the new flag rate, a stated least prevalence),
or no verdict without labels, with the target's label plan."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from scipy.stats import norm

from calimon.studies.shift.check import certify_sides
from calimon.studies.shift.verdict import BREAKS, HOLDS
from calimon.studies.shift.verdict_mr import NOT_JUDGED, check_weights, mr_floor

CODE_CAL, CODE_NEW = 0.2, 0.8


def _mix(rng, n, code_share, code_pos_mu):
    """Chat and code transcripts, half misbehaving; logistic scores ``z = mu + N(0, 1)``:
    benign chat -2, benign code -1, misbehaving chat 1.5, misbehaving code ``code_pos_mu``."""
    code = rng.random(n) < code_share
    y = (rng.random(n) < 0.5).astype(int)
    mu = np.where(y == 1, np.where(code, code_pos_mu, 1.5), np.where(code, -1.0, -2.0))
    return 1 / (1 + np.exp(-(mu + rng.normal(size=n)))), y, code


def _true_mr(t, code_pos_mu):
    z = np.log(t / (1 - t))
    return (1 - CODE_NEW) * norm.cdf(z - 1.5) + CODE_NEW * norm.cdf(z - code_pos_mu)


def _verdict(code_pos_mu, *, weights="true", alpha=0.3, min_prevalence=None, seed=0):
    rng = np.random.default_rng(seed)
    s, y, code = _mix(rng, 2000, CODE_CAL, code_pos_mu)
    new, _, _ = _mix(rng, 1000, CODE_NEW, code_pos_mu)
    ratio = {"true": (CODE_NEW / CODE_CAL, (1 - CODE_NEW) / (1 - CODE_CAL)),
             "inverted": ((1 - CODE_NEW) / (1 - CODE_CAL), CODE_NEW / CODE_CAL)}[weights]
    w = np.where(code, *ratio)
    rep = SimpleNamespace(shifted=True, weights=w, outside_share=0.0, n_new=new.size)
    res = certify_sides(rep, s, y, mr=(alpha,), new_scores=new, min_prevalence=min_prevalence)
    (v,), (plan,) = res.verdicts, res.plans
    return v, plan, _true_mr(v.threshold, code_pos_mu)


def test_a_shift_that_leaves_misbehaving_scores_alone_holds():
    v, plan, true_mr = _verdict(1.5)
    assert true_mr <= 0.3
    assert v.weighted_read and v.weights_check and abs(v.weighted_mr - true_mr) < 0.05
    assert plan.weighted  # the plan rests on the weights the verdict read
    # no alarm; "holds" needs the shift-aware certificate to cover the threshold, and its
    # kept rows certify a stricter one here
    assert v.kind == NOT_JUDGED and "does not cover the threshold" in v.reason
    assert v.line().startswith("MR <= 0.3: shift, not judged without labels")


def test_holds_where_the_shift_aware_certificate_covers_the_threshold():
    from types import SimpleNamespace

    from calimon.deploy.guarantees import certify_mr
    from calimon.studies.shift.verdict_mr import mr_verdict

    rng = np.random.default_rng(2)
    s = np.r_[rng.random(300) * 0.6, 0.4 + rng.random(300) * 0.6]
    y = np.r_[np.zeros(300, int), np.ones(300, int)]
    naive = certify_mr(s[y == 1], 0.3, 0.05)
    rep = SimpleNamespace(shifted=True, weights=np.ones(600))
    for aware_t, kind in ((naive.threshold + 0.01, HOLDS), (naive.threshold - 0.01, NOT_JUDGED)):
        aware = SimpleNamespace(estimate=0.2, ess=300.0, labels_needed=50, abstained=False,
                                reason="", threshold=aware_t, bound=0.25)
        v = mr_verdict(rep, naive, aware, s, y, s)
        assert v.weighted_read and v.kind == kind, (aware_t, v.reason)
        if kind == HOLDS:
            assert v.line().startswith("MR <= 0.3: shift, certificate holds under covariate")


def test_a_shift_to_transcripts_the_monitor_misses_breaks_the_certificate():
    v, plan, true_mr = _verdict(-0.5)
    assert v.kind == BREAKS and true_mr > 0.3
    assert "weighted MR" in v.reason and v.weighted_mr > 0.3
    assert v.line().startswith("MR <= 0.3: SHIFT BREAKS THE CERTIFICATE")


def test_weights_the_new_flag_rate_contradicts_are_not_read():
    # the same harmful shift, but density ratios that point the wrong way: reweighted, the
    # calibration rows predict a flag rate the new traffic does not have
    v, plan, true_mr = _verdict(-0.5, weights="inverted")
    assert v.weights_check is False and not v.weighted_read and v.kind == NOT_JUDGED
    assert "covariate shift contradicted" in v.line()
    assert not plan.weighted and v.labels_needed == plan.labels
    assert v.line().endswith(f"label {plan.labels} transcripts") or plan.labels is None


def test_a_stated_least_prevalence_gives_a_miss_floor():
    v, _, true_mr = _verdict(-0.5, weights="inverted", min_prevalence=0.5)
    rate, upper, floor = mr_floor([0.9] * 20 + [0.1] * 80, 0.5, 0.5, 0.025)
    assert rate == 0.2 and floor == pytest.approx(1 - upper / 0.5)
    assert v.kind == BREAKS and "miss floor" in v.reason and v.mr_floor > 0.3
    with pytest.raises(Exception, match="min_prevalence"):
        mr_floor([0.5], 0.5, 0.0, 0.05)


def test_too_few_effective_rows_give_no_verdict_and_a_plan():
    rng = np.random.default_rng(1)
    s, y, _ = _mix(rng, 400, CODE_CAL, 1.5)
    w = np.full(400, 1e-3)
    w[np.flatnonzero(y == 1)[0]] = 1.0  # one misbehaving row carries the weight
    rep = SimpleNamespace(shifted=True, weights=w, outside_share=0.0, n_new=300)
    (v,) = certify_sides(rep, s, y, mr=(0.3,), new_scores=rng.random(300)).verdicts
    assert v.kind == NOT_JUDGED and not v.weighted_read and v.labels_needed is not None
    assert f"weighted MR not read (n_eff {v.ess:.1f} < {v.ess_needed})" in v.line()


def test_check_weights_without_new_scores_is_not_run():
    c = check_weights([0.2, 0.8], [1.0, 1.0], None, 0.5, 0.05)
    assert c.passed is None and c.predicted == 0.5
