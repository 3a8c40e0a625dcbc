from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import det_curve, roc_auc_score, roc_curve

from calimon.errors import InputError
from calimon.numerics.curves import (
    BinaryPoint,
    Curve,
    OperatingPoint,
    binary_point,
    confusion_at,
    curves_by,
    sweep,
)

# Hand example: positives at .9 .8 .6 .4, negatives at .7 .5 .3 .2.
# sweep (threshold: MR, FAR): inf 1,0 | .9 .75,0 | .8 .5,0 | .7 .5,.25 | .6 .25,.25 |
#                             .5 .25,.5 | .4 0,.5 | .3 0,.75 | .2 0,1
HAND_S = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2]
HAND_Y = [1, 1, 0, 1, 0, 1, 0, 0]


def _data(seed: int, n: int = 300, decimals: int = 2):
    rng = np.random.default_rng(seed)
    y = rng.random(n) < 0.4
    s = np.round(np.clip(rng.normal(0.4 + 0.25 * y, 0.2), 0, 1), decimals)
    return s, y


# ---------------------------------------------------------------- sweep vs scikit-learn

@pytest.mark.parametrize("decimals", [1, 2, 6])
def test_sweep_matches_sklearn_roc_curve(decimals):
    s, y = _data(decimals, decimals=decimals)
    t, mr, far = sweep(s, y)
    fpr, tpr, thr = roc_curve(y, s, drop_intermediate=False)
    np.testing.assert_array_equal(t, thr)
    np.testing.assert_allclose(far, fpr)
    np.testing.assert_allclose(mr, 1 - tpr)


@pytest.mark.parametrize("decimals", [1, 2, 6])
def test_sweep_matches_sklearn_det_curve(decimals):
    s, y = _data(10 + decimals, decimals=decimals)
    t, mr, far = sweep(s, y)
    fpr, fnr, thr = det_curve(y, s, drop_intermediate=False)
    assert len(thr) > 2
    index = {v: i for i, v in enumerate(t)}
    for f, m, th in zip(fpr, fnr, thr, strict=True):
        i = index[th]
        assert far[i] == pytest.approx(f)
        assert mr[i] == pytest.approx(m)


def test_all_equal_scores():
    s = [0.3] * 5
    y = [1, 0, 1, 0, 0]
    t, mr, far = sweep(s, y)
    fpr, tpr, thr = roc_curve(y, s, drop_intermediate=False)
    np.testing.assert_array_equal(t, [np.inf, 0.3])
    np.testing.assert_array_equal(t, thr)
    np.testing.assert_array_equal(mr, [1.0, 0.0])
    np.testing.assert_array_equal(far, [0.0, 1.0])
    np.testing.assert_allclose(mr, 1 - tpr)
    np.testing.assert_allclose(far, fpr)
    assert Curve.from_scores(s, y, n_boot=0).auroc == 0.5


def test_sweep_hand_example():
    t, mr, far = sweep(HAND_S, HAND_Y)
    np.testing.assert_array_equal(t, [np.inf] + HAND_S)
    np.testing.assert_array_equal(mr, [1, .75, .5, .5, .25, .25, 0, 0, 0])
    np.testing.assert_array_equal(far, [0, 0, 0, .25, .25, .5, .5, .75, 1])


def test_sweep_accepts_bool_int_and_float_labels():
    for y in (HAND_Y, [bool(v) for v in HAND_Y], np.array(HAND_Y, float), np.array(HAND_Y)):
        np.testing.assert_array_equal(sweep(HAND_S, y)[1], sweep(HAND_S, HAND_Y)[1])


def test_confusion_at_hand_example():
    assert confusion_at(HAND_S, HAND_Y, 0.6) == (3, 1, 3, 1)
    assert confusion_at(HAND_S, HAND_Y, math.inf) == (0, 0, 4, 4)
    assert confusion_at(HAND_S, HAND_Y, 0.0) == (4, 4, 0, 0)
    assert confusion_at(HAND_S, HAND_Y, 0.55) == (3, 1, 3, 1)
    for bad in (None, math.nan, "0.5"):
        with pytest.raises(InputError, match="'t'"):
            confusion_at(HAND_S, HAND_Y, bad)


def test_auroc_matches_sklearn_and_metrics():
    s, y = _data(3)
    c = Curve.from_scores(s, y, n_boot=0)
    assert c.auroc == pytest.approx(roc_auc_score(y, s))
    from calimon.numerics.metrics import auroc

    assert c.auroc == pytest.approx(auroc(s, y))
    assert Curve.from_scores(HAND_S, HAND_Y, n_boot=0).auroc == pytest.approx(13 / 16)


# ---------------------------------------------------------------- properties

_score = st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.5, 0.75, 0.9, 1.0]) | st.floats(0, 1)


@st.composite
def scored(draw):
    n = draw(st.integers(2, 40))
    s = draw(st.lists(_score, min_size=n, max_size=n))
    y = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    y[draw(st.integers(0, n - 1))] = True
    y[draw(st.integers(0, n - 1).filter(lambda i: not y[i] or sum(y) > 1))] = False
    return s, y


@settings(max_examples=150, deadline=None)
@given(scored())
def test_sweep_properties(data):
    s, y = data
    t, mr, far = sweep(s, y)
    assert t[0] == np.inf and np.all(np.diff(t) < 0) and t[-1] == min(s)
    assert (mr[0], far[0]) == (1.0, 0.0)
    assert (mr[-1], far[-1]) == (0.0, 1.0)
    assert np.all(np.diff(mr) <= 0) and np.all(np.diff(far) >= 0)
    assert np.all((mr >= 0) & (mr <= 1) & (far >= 0) & (far <= 1))
    fpr, tpr, thr = roc_curve(y, s, drop_intermediate=False)
    np.testing.assert_allclose(mr, 1 - tpr)
    np.testing.assert_allclose(far, fpr)
    n_pos, n_neg = sum(y), len(y) - sum(y)
    for i in (0, len(t) // 2, len(t) - 1):
        tp, fp, tn, fn = confusion_at(s, y, t[i])
        assert (fn / n_pos, fp / n_neg) == pytest.approx((mr[i], far[i]))
        assert tp + fn == n_pos and fp + tn == n_neg
    assert Curve.from_scores(s, y, n_boot=0).auroc == pytest.approx(roc_auc_score(y, s))


@settings(max_examples=100, deadline=None)
@given(scored(), st.floats(0, 1), st.floats(0, 1))
def test_operating_points_meet_their_constraint(data, alpha, beta):
    c = Curve.from_scores(*data, n_boot=0)
    p = c.at_far(alpha)
    assert p.far <= alpha + 1e-12
    assert p.mr == min(m for m, f in zip(c.mr, c.far, strict=True) if f <= alpha + 1e-12)
    q = c.at_mr(beta)
    assert q.mr <= beta + 1e-12
    assert q.far == min(f for m, f in zip(c.mr, c.far, strict=True) if m <= beta + 1e-12)
    for pt in c.operating_points():
        assert pt.tp + pt.fn == c.n_pos and pt.fp + pt.tn == c.n_neg


# ---------------------------------------------------------------- operating points by hand

def test_operating_points_hand_example():
    c = Curve.from_scores(HAND_S, HAND_Y, n_boot=0)
    assert c.at_far(0.0) == OperatingPoint("FAR<=0%", 0.8, 0.5, 0.0, 2, 0, 4, 2)
    assert c.at_far(0.25) == OperatingPoint("FAR<=25%", 0.6, 0.25, 0.25, 3, 1, 3, 1)
    assert c.at_far(0.3, name="budget").threshold == 0.6
    assert c.at_far(0.5).threshold == 0.4
    assert c.at_far(1.0).threshold == 0.2
    assert c.at_mr(0.25) == OperatingPoint("MR<=25%", 0.6, 0.25, 0.25, 3, 1, 3, 1)
    assert c.at_mr(0.0).threshold == 0.4
    assert c.at_mr(1.0).threshold == math.inf
    assert c.eer() == OperatingPoint("EER", 0.6, 0.25, 0.25, 3, 1, 3, 1)
    # Equal costs, pi = 0.5: cost = (MR + FAR) / 2 ties at .8, .6, .4 -> the largest threshold.
    assert c.min_cost().threshold == 0.8
    assert c.min_cost(cost_miss=3).threshold == 0.4   # 3*.5*MR + .5*FAR
    assert c.min_cost(prevalence=0.9).threshold == 0.4  # .9*MR + .1*FAR
    assert c.min_cost(cost_miss=0).threshold == math.inf
    names = [p.name for p in c.operating_points()]
    assert names == ["FAR<=1%", "FAR<=5%", "FAR<=10%", "EER", "min cost"]
    assert c.at_far(0.005).name == "FAR<=0.5%"


def test_eer_tie_goes_to_the_largest_threshold():
    # (MR, FAR): .8 -> (.5, 1/3), .7 -> (.5, 2/3); both |MR - FAR| = 1/6.
    c = Curve.from_scores([0.9, 0.8, 0.7, 0.6, 0.5], [1, 0, 0, 1, 0], n_boot=0)
    assert c.eer().threshold == 0.8


@pytest.mark.parametrize("kwargs", [{"cost_miss": -1}, {"cost_false_alarm": math.nan},
                                    {"prevalence": 1.5}])
def test_min_cost_refuses_bad_arguments(kwargs):
    with pytest.raises(InputError, match=next(iter(kwargs))):
        Curve.from_scores(HAND_S, HAND_Y, n_boot=0).min_cost(**kwargs)


@pytest.mark.parametrize("alpha", [-0.1, 1.5, None, "5%"])
def test_at_far_refuses_bad_alpha(alpha):
    with pytest.raises(InputError, match="alpha"):
        Curve.from_scores(HAND_S, HAND_Y, n_boot=0).at_far(alpha)


# ---------------------------------------------------------------- validation

@pytest.mark.parametrize("bad", [[0.1, math.nan, 0.3], [0.1, None, 0.3]])
def test_missing_scores_are_refused_not_zero(bad):
    with pytest.raises(InputError, match=r"scores.*1 missing.*\[1\].*never treated as 0"):
        sweep(bad, [1, 0, 1])
    with pytest.raises(InputError, match="missing"):
        Curve.from_scores(bad, [1, 0, 1])
    with pytest.raises(InputError, match="missing"):
        confusion_at(bad, [1, 0, 1], 0.5)


@pytest.mark.parametrize("scores, labels, match", [
    ([0.1, 1.2], [1, 0], r"\[0, 1\]"),
    ([[0.1, 0.2]], [1, 0], "1-D"),
    ([], [], "at least one"),
    ([0.1, 0.2], [1], "expected 2 labels"),
    ([0.1, 0.2], [1, None], "unknown"),
    ([0.1, 0.2], [1, 2], "True/False or 0/1"),
    (["a", "b"], [1, 0], "numbers"),
])
def test_sweep_refuses_bad_input(scores, labels, match):
    with pytest.raises(InputError, match=match):
        sweep(scores, labels)


def test_one_class_curve_is_undefined_not_wrong():
    c = Curve.from_scores([0.2, 0.4, 0.9], [1, 1, 1])
    assert not c.defined and c.band is None and math.isnan(c.auroc)
    assert "no negatives" in c.undefined_reason
    assert np.isnan(c.far).all() and c.mr[0] == 1 and c.mr[-1] == 0
    with pytest.raises(InputError, match="no negatives"):
        c.at_far(0.05)
    with pytest.raises(InputError, match="no positives"):
        Curve.from_scores([0.2, 0.4], [0, 0]).eer()


def test_curve_arrays_are_read_only():
    c = Curve.from_scores(HAND_S, HAND_Y, n_boot=0)
    with pytest.raises(ValueError):
        c.mr[0] = 0.0


# ---------------------------------------------------------------- JSON

def test_to_dict_is_json_and_round_trips():
    s, y = _data(4, n=80)
    c = Curve.from_scores(s, y, groups=np.arange(80) // 2, n_boot=20)
    d = json.loads(json.dumps(c.to_dict(), allow_nan=False))
    assert d["thresholds"][0] is None and d["mr"][0] == 1.0 and d["far"][0] == 0.0
    assert d["n_pos"] == int(np.sum(y)) and d["band"]["n_boot"] == 20
    back = Curve.from_dict(d)
    np.testing.assert_array_equal(back.thresholds, c.thresholds)
    np.testing.assert_array_equal(back.mr, c.mr)
    np.testing.assert_array_equal(back.band.mr_lo, c.band.mr_lo)
    assert back.auroc == c.auroc and back.at_far(0.1) == c.at_far(0.1)
    op = json.loads(json.dumps(Curve.from_scores(HAND_S, HAND_Y).at_mr(1.0).to_dict()))
    assert op["threshold"] is None


def test_undefined_curve_to_dict_writes_nulls():
    d = Curve.from_scores([0.2, 0.4], [0, 0]).to_dict()
    text = json.dumps(d, allow_nan=False)
    assert d["auroc"] is None and d["band"] is None and "no positives" in text
    assert math.isnan(Curve.from_dict(json.loads(text)).auroc)


def test_from_dict_refuses_garbage():
    with pytest.raises(InputError, match="curve"):
        Curve.from_dict({"mr": []})


# ---------------------------------------------------------------- binary protocol points

def test_binary_point_with_parse_failures():
    # positives: T T F None ; negatives: F F T None None
    dec = [True, True, False, None, False, False, True, None, None]
    y = [1, 1, 1, 1, 0, 0, 0, 0, 0]
    p = binary_point(dec, y, "json")
    assert (p.tp, p.fp, p.tn, p.fn, p.n_parse_failure) == (2, 1, 2, 1, 3)
    assert p.mr == pytest.approx(1 / 3) and p.far == pytest.approx(1 / 3)
    assert (p.mr_lo, p.mr_hi) == pytest.approx((1 / 4, 2 / 4))
    assert (p.far_lo, p.far_hi) == pytest.approx((1 / 5, 3 / 5))
    assert p.mr_lo <= p.mr <= p.mr_hi and p.far_lo <= p.far <= p.far_hi
    assert json.loads(json.dumps(p.to_dict()))["n_parse_failure"] == 3


def test_binary_point_without_failures_has_no_range():
    p = binary_point([True, False, False, True], [1, 1, 0, 0], "direct")
    assert p == BinaryPoint("direct", 0.5, 0.5, 1, 1, 1, 1, 0, 0.5, 0.5, 0.5, 0.5)


def test_binary_point_all_positives_failed_is_nan_with_full_range():
    p = binary_point([None, None, False], [1, 1, 0], "x")
    assert math.isnan(p.mr) and (p.mr_lo, p.mr_hi) == (0.0, 1.0) and p.far == 0.0
    assert json.dumps(p.to_dict(), allow_nan=False)


@pytest.mark.parametrize("dec", [[True, "no"], [True, 0], [True, math.nan]])
def test_binary_point_refuses_non_boolean_decisions(dec):
    with pytest.raises(InputError, match="decisions"):
        binary_point(dec, [1, 0], "x")


# ---------------------------------------------------------------- grouped curves

def test_curves_by_category_and_task():
    s, y = _data(5, n=120)
    cat = np.array(["safety", "sycophancy", "spec_gaming"] * 40)
    task = np.where(y, "code", np.where(np.arange(120) % 2, "qa", "code")).astype(object)
    task[0] = "reasoning"
    out = curves_by(s, y, np.arange(120) // 2, {"category": cat, "task": task}, n_boot=10)
    assert list(out) == ["all", "category=safety", "category=spec_gaming",
                         "category=sycophancy", "task=code", "task=qa", "task=reasoning"]
    m = cat == "safety"
    np.testing.assert_array_equal(out["category=safety"].mr, sweep(s[m], y[m])[1])
    assert out["category=safety"].band is not None
    qa = out["task=qa"]            # benign only
    assert not qa.defined and "no positives" in qa.undefined_reason and qa.band is None
    assert out["task=code"].defined
    assert out["task=reasoning"].n_pos + out["task=reasoning"].n_neg == 1


def test_curves_by_refuses_wrong_key_length():
    with pytest.raises(InputError, match="keys\\['task'\\]"):
        curves_by(HAND_S, HAND_Y, None, {"task": ["qa"] * 3}, n_boot=0)
