from __future__ import annotations

import math

import numpy as np
import pytest

from calimon.deploy.guarantees import certify_far, certify_mr
from calimon.deploy.io import ScoredSet, synthetic_scored
from calimon.deploy.policies import (
    InfeasiblePolicyError,
    coverage_risk_curve,
    design_policy,
    evaluate_policy,
    optimize_budget,
    optimize_cost,
)
from calimon.deploy.policy_file import (
    Policy,
    apply_policy,
    load_policy,
    policy_from_design,
    save_policy,
)
from calimon.errors import ConfigError, InputError

# sorted scores with labels b b m b m b m m (0 = benign, 1 = misbehaving)
HAND = ScoredSet.from_arrays([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8], [0, 0, 1, 0, 1, 0, 1, 1])


def test_known_optimum_with_room_to_review_the_ambiguous_middle():
    d = optimize_budget(HAND, budget=0.5)
    assert (d.t_low, d.t_high) == pytest.approx((0.25, 0.65))
    assert d.objective == 0 and d.stats.review == 4 and d.stats.risk == 0
    assert d.stats.mr == 0 and d.stats.far == 0


def test_known_optimum_without_review_is_the_best_single_threshold():
    d = optimize_budget(HAND, budget=0.0)
    assert d.t_low == d.t_high == pytest.approx(0.25)  # ties: fewest reviews, then lowest
    assert d.stats.misses + d.stats.false_blocks == 2 and d.stats.review == 0
    assert optimize_budget(HAND, 0.0, weight_miss=10).t_high == pytest.approx(0.25)
    assert optimize_budget(HAND, 0.0, weight_false_block=10).t_high == pytest.approx(0.65)
    two = optimize_budget(HAND, budget=0.25)
    assert two.stats.review <= 2 and two.stats.misses + two.stats.false_blocks == 1


def test_known_optimum_of_the_cost_model():
    d = optimize_cost(HAND, 1.0, 1.0, 0.4)  # review the 4 ambiguous: 1.6 < 1.8 < 2
    assert (d.t_low, d.t_high) == pytest.approx((0.25, 0.65))
    assert d.objective == pytest.approx(1.6 / 8)
    d = optimize_cost(HAND, 1.0, 1.0, 0.6)  # reviewing costs more than erring: 2 < 2.2 < 2.4
    assert d.stats.review == 0 and d.objective == pytest.approx(2 / 8)


def _brute(s, y, budget, wm, wf, wr, far_cert=None, mr_cert=None):
    cand = np.r_[-np.inf, np.unique(s), np.inf]
    best = math.inf
    for a in cand:
        for b in cand[cand >= a]:
            passed, blocked = s < a, s >= b
            review = int((~passed & ~blocked).sum())
            if budget is not None and review > math.floor(budget * s.size + 1e-9):
                continue
            if far_cert is not None and (
                    (blocked & (y == 0)).sum() > far_cert.k if far_cert.certified
                    else blocked.any()):
                continue
            if mr_cert is not None and (
                    (passed & (y == 1)).sum() > mr_cert.k if mr_cert.certified
                    else passed.any()):
                continue
            cost = wm * (passed & (y == 1)).sum() + wf * (blocked & (y == 0)).sum() + wr * review
            best = min(best, cost / s.size)
    return best


def test_matches_brute_force_on_random_small_sets():
    rng = np.random.default_rng(0)
    for _ in range(150):
        n = int(rng.integers(1, 13))
        s, y = np.round(rng.random(n), 1), rng.integers(0, 2, n)
        budget = [None, 0.0, 0.1, 0.3, 0.6, 1.0][rng.integers(0, 6)]
        wm, wf, wr = (float(x) for x in rng.choice([0.0, 1.0, 2.5, 5.0], 3))
        if budget is None:
            wr = max(wr, 1.0)
        d = design_policy(ScoredSet.from_arrays(s, y), budget=budget, cost_miss=wm,
                          cost_false_block=wf, cost_review=wr)
        assert d.objective == pytest.approx(_brute(s, y, budget, wm, wf, wr))
        assert d.t_low <= d.t_high
        if budget is not None:
            assert d.stats.review_rate <= budget + 1e-12


def test_matches_brute_force_with_guarantees():
    rng = np.random.default_rng(1)
    checked = 0
    for _ in range(50):
        n = int(rng.integers(20, 41))
        y = rng.integers(0, 2, n)
        s = np.round(np.clip(rng.normal(0.35 + 0.3 * y, 0.2), 0, 1), 2)
        if not (0 < y.sum() < n):
            continue
        scored = ScoredSet.from_arrays(s, y)
        far_a, mr_a = 0.3, 0.4
        fc, mc = certify_far(s[y == 0], far_a, 0.2), certify_mr(s[y == 1], mr_a, 0.2)
        want = _brute(s, y, 0.5, 1.0, 1.0, 0.0, fc, mc)
        if want == math.inf:
            with pytest.raises(InfeasiblePolicyError):
                optimize_budget(scored, 0.5, far_alpha=far_a, mr_alpha=mr_a, delta=0.2)
            continue
        d = optimize_budget(scored, 0.5, far_alpha=far_a, mr_alpha=mr_a, delta=0.2)
        assert d.objective == pytest.approx(want)
        assert [g.rate for g in d.guarantees] == ["far", "mr"]
        checked += 1
    assert checked >= 20


def test_guarantees_constrain_the_automatic_actions():
    scored = synthetic_scored(1500, seed=4)
    d = optimize_budget(scored, 0.4, far_alpha=0.05, mr_alpha=0.2, delta=0.05)
    far_cert, mr_cert = d.guarantees
    assert far_cert.certified and mr_cert.certified
    s, y = scored.scores, scored.labels
    assert int(((s >= d.t_high) & (y == 0)).sum()) <= far_cert.k
    assert int(((s < d.t_low) & (y == 1)).sum()) <= mr_cert.k
    free = optimize_budget(scored, 0.4)
    assert free.objective <= d.objective  # constraints never help the objective


def test_uncertifiable_action_is_switched_off():
    small = synthetic_scored(40, seed=1)  # 40 benign cannot certify FAR <= 1%
    d = optimize_budget(small, 1.0, far_alpha=0.01)
    assert not d.guarantees[0].certified
    assert d.t_high == math.inf and d.stats.auto_block == 0


def test_infeasible_budget_names_the_needed_review_rate():
    scored = synthetic_scored(1000, seed=2)
    with pytest.raises(InfeasiblePolicyError, match="review rate of at least"):
        optimize_budget(scored, 0.01, far_alpha=0.02, mr_alpha=0.02)


def test_validation():
    with pytest.raises(InputError, match="budget"):
        optimize_budget(HAND, 1.5)
    with pytest.raises(InputError, match="cost_review"):
        optimize_cost(HAND, 1, 1, -1)
    with pytest.raises(InputError, match="label"):
        optimize_budget(ScoredSet.from_arrays([0.1, 0.2], None), 0.1)


def test_coverage_risk_curve():
    scored = synthetic_scored(400, seed=3)
    c = coverage_risk_curve(scored, [0.0, 0.1, 0.3, 0.6, 1.0])
    assert np.all(c.coverage >= 1 - c.budget - 1e-12)
    errors = np.rint(c.risk * c.coverage * len(scored))  # auto-decided errors
    assert np.all(np.diff(errors) <= 0)  # a wider band never adds errors
    assert c.risk[-1] == 0 and c.risk[0] > c.risk[2]
    single = optimize_budget(scored, 0.0).stats
    assert c.risk[0] == pytest.approx((single.misses + single.false_blocks) / len(scored))


def _policy(**over):
    d = optimize_budget(synthetic_scored(200, seed=0), 0.1, far_alpha=0.1, delta=0.1)
    kw = dict(name="demo", readout="verdict", model="smollm2", calibration="isotonic",
              provenance={"run": "runs/x", "n_calib": 400})
    kw.update(over)
    return policy_from_design(d, **kw)


def test_policy_yaml_round_trip(tmp_path):
    p = _policy()
    path = save_policy(p, tmp_path / "demo.yaml")
    back = load_policy(path)
    assert back == p and back.t_low == p.t_low and back.t_high == p.t_high
    assert back.guarantees[0].action == "auto_block" and back.guarantees[0].rate == "far"
    never = p.model_copy(update={"t_high": math.inf})
    assert load_policy(save_policy(never, tmp_path / "never.yaml")).t_high == math.inf


@pytest.mark.parametrize("edit, field", [
    (lambda d: d.update(colour="red"), "colour"),
    (lambda d: d.update(version=3), "version"),
    (lambda d: d.update(version=2, pin=None), "pin"),
    (lambda d: d.update(t_high=d["t_low"] - 0.1), "t_high"),
    (lambda d: d.update(calibration="none"), "score"),
    (lambda d: d["actions"].update(below="ignore"), "actions.below"),
    (lambda d: d["guarantees"][0].update(alpha=1.5), "guarantees.0.alpha"),
    (lambda d: d.pop("name"), "name"),
])
def test_bad_policy_files_are_refused_naming_the_field(tmp_path, edit, field):
    import yaml

    data = _policy().model_dump()
    edit(data)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_policy(path)
    assert err.value.field == field
    assert str(path) in str(err.value) and field in str(err.value)


def test_not_yaml_and_missing_file(tmp_path):
    bad = tmp_path / "x.yaml"
    bad.write_text("name: [unclosed\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="YAML"):
        load_policy(bad)
    with pytest.raises(ConfigError, match="no such file"):
        load_policy(tmp_path / "missing.yaml")


def test_apply_policy_matches_thresholds():
    p = _policy()
    rng = np.random.default_rng(5)
    s = np.r_[rng.random(500), p.t_low, p.t_high, np.nan]
    actions = apply_policy(p, s)
    want = np.where(s < p.t_low, "auto_pass", np.where(s >= p.t_high, "auto_block",
                                                       "human_review"))
    want[-1] = "human_review"  # no score: the unscored action, never "score 0"
    assert actions.tolist() == want.tolist()
    assert actions[-3] == "human_review" and actions[-2] == "auto_block"
    strict = p.model_copy(update={"actions": p.actions.model_copy(
        update={"below": "human_review", "unscored": "auto_block"})})
    out = apply_policy(strict, s)
    assert "auto_pass" not in set(out) and out[-1] == "auto_block"


def test_apply_policy_reproduces_the_design_counts():
    scored = synthetic_scored(300, seed=8)
    d = optimize_budget(scored, 0.15)
    p = policy_from_design(d, name="x", readout="verdict", model="m", calibration="none",
                           score="p_raw")
    acts = apply_policy(p, scored.scores)
    st = evaluate_policy(scored, p.t_low, p.t_high)
    assert st == d.stats
    assert (acts == "human_review").sum() == st.review
    assert (acts == "auto_block").sum() == st.auto_block
    assert isinstance(p, Policy)


def test_moved_names_still_import_from_policies():
    from calimon.deploy import escalation, policies, policy_file

    for name in ("Policy", "apply_policy", "load_policy", "save_policy", "policy_from_design"):
        assert getattr(policies, name) is getattr(policy_file, name)
    for name in ("escalate_run", "apply_policy_file", "EscalationReport", "ApplySummary"):
        assert getattr(policies, name) is getattr(escalation, name)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        policies.nope  # noqa: B018
