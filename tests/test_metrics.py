from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import average_precision_score, brier_score_loss, log_loss, roc_auc_score

from calimon.errors import InputError
from calimon.numerics import metrics as M

netcal_metrics = pytest.importorskip("netcal.metrics")


def _random(seed: int, n: int = 400, rounded: bool = False):
    rng = np.random.default_rng(seed)
    p = rng.uniform(size=n)
    if rounded:  # many ties and values exactly on bin edges
        p = np.round(p, 1)
    y = (rng.uniform(size=n) < p**1.7).astype(int)
    return p, y


# ---- hand-computed examples -------------------------------------------------------------

def test_brier_and_nll_by_hand():
    p, y = [0.9, 0.2, 0.6, 0.5], [1, 0, 0, 1]
    assert M.brier(p, y) == pytest.approx((0.01 + 0.04 + 0.36 + 0.25) / 4)
    expected = -(math.log(0.9) + math.log(0.8) + math.log(0.4) + math.log(0.5)) / 4
    assert M.nll(p, y) == pytest.approx(expected)


def test_nll_clips_certain_mistakes():
    assert M.nll([0.0], [1]) == pytest.approx(-math.log(1e-12))
    assert M.nll([1.0], [1]) == pytest.approx(0.0, abs=1e-11)


def test_auroc_by_hand_with_ties():
    # positives {0.8, 0.4}, negatives {0.4, 0.1}: pairs (0.8>0.4)=1, (0.8>0.1)=1,
    # (0.4=0.4)=0.5, (0.4>0.1)=1  ->  3.5 / 4
    assert M.auroc([0.8, 0.4, 0.4, 0.1], [1, 1, 0, 0]) == pytest.approx(0.875)


def test_auprc_by_hand():
    # sorted: 0.9(+), 0.8(-), 0.7(+), 0.1(-): AP = 0.5*1 + 0.5*(2/3)
    assert M.auprc([0.9, 0.8, 0.7, 0.1], [1, 0, 1, 0]) == pytest.approx(0.5 + 1 / 3)


def test_ece_mce_by_hand():
    # 2 bins: [0, .5): p = .1, .3 (conf .2), labels 0, 1 (acc .5) -> gap .3
    #         [.5, 1]: p = .6, .8, 1.0 (conf .8), labels 1, 1, 1 (acc 1) -> gap .2
    p, y = [0.1, 0.3, 0.6, 0.8, 1.0], [0, 1, 1, 1, 1]
    assert M.ece(p, y, n_bins=2) == pytest.approx(0.4 * 0.3 + 0.6 * 0.2)
    assert M.mce(p, y, n_bins=2) == pytest.approx(0.3)


def test_reliability_bins_marks_empty_bins():
    rb = M.reliability_bins([0.05, 0.15, 0.95], [0, 1, 1], n_bins=10)
    assert rb.edges.shape == (11,) and rb.n_bins == 10
    assert rb.counts.tolist() == [1, 1, 0, 0, 0, 0, 0, 0, 0, 1]
    assert np.isnan(rb.accuracy[2]) and np.isnan(rb.mean_confidence[5])
    assert rb.accuracy[1] == 1.0 and rb.mean_confidence[9] == pytest.approx(0.95)
    d = rb.to_dict()
    assert d["accuracy"][3] is None and d["counts"][0] == 1
    with pytest.raises(ValueError):
        rb.counts[0] = 5  # read-only arrays inside a frozen result


def test_point_on_an_edge_goes_to_the_upper_bin():
    rb = M.reliability_bins([0.5, 1.0, 0.0], [1, 1, 0], n_bins=2)
    assert rb.counts.tolist() == [1, 2]


def test_single_class_ranking_metrics_are_nan():
    assert math.isnan(M.auroc([0.1, 0.7], [0, 0]))
    assert math.isnan(M.auprc([0.1, 0.7], [1, 1]))
    report = M.calibration_report([0.1, 0.7], [0, 0])
    assert math.isnan(report["auroc"]) and report["n_pos"] == 0 and report["n"] == 2


# ---- reference tests: scikit-learn and netcal on the same numbers -------------------------

@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("rounded", [False, True])
def test_against_sklearn(seed, rounded):
    p, y = _random(seed, rounded=rounded)
    assert M.auroc(p, y) == pytest.approx(roc_auc_score(y, p), abs=1e-12)
    assert M.auprc(p, y) == pytest.approx(average_precision_score(y, p), abs=1e-12)
    assert M.brier(p, y) == pytest.approx(brier_score_loss(y, p), abs=1e-12)
    inner = np.clip(p, 1e-6, 1 - 1e-6)  # sklearn's log_loss clipping differs only at 0 and 1
    assert M.nll(inner, y) == pytest.approx(log_loss(y, inner), abs=1e-12)


# netcal (scipy's binned_statistic_dd) cannot take repeated quantile edges, which 15 quantile
# bins over values rounded to 0.1 produce; that one combination is left out.
NETCAL_CASES = [(seed, rounded, strategy, n_bins)
                for seed in (0, 1, 2) for rounded in (False, True)
                for strategy in ("uniform", "quantile") for n_bins in (5, 15)
                if not (rounded and strategy == "quantile" and n_bins == 15)]


@pytest.mark.parametrize("seed, rounded, strategy, n_bins", NETCAL_CASES)
def test_against_netcal(seed, rounded, strategy, n_bins):
    p, y = _random(seed, rounded=rounded)
    eq = strategy == "uniform"
    ref_ece = netcal_metrics.ECE(bins=n_bins, equal_intervals=eq).measure(p, y)
    ref_mce = netcal_metrics.MCE(bins=n_bins, equal_intervals=eq).measure(p, y)
    assert M.ece(p, y, n_bins, strategy) == pytest.approx(ref_ece, abs=1e-12)
    assert M.mce(p, y, n_bins, strategy) == pytest.approx(ref_mce, abs=1e-12)


def test_report_keys_and_values():
    p, y = _random(3)
    r = M.calibration_report(p, y, n_bins=10)
    assert set(r) == {"ece", "mce", "brier", "nll", "auroc", "auprc", "n", "n_pos"}
    assert r["ece"] == M.ece(p, y, 10) and r["n"] == len(p) and r["n_pos"] == int(y.sum())


# ---- properties -------------------------------------------------------------------------

probs = st.lists(st.floats(0, 1), min_size=2, max_size=60)


@settings(max_examples=60, deadline=None)
@given(probs, st.data())
def test_metric_ranges(p, data):
    y = data.draw(st.lists(st.integers(0, 1), min_size=len(p), max_size=len(p)))
    r = M.calibration_report(p, y, n_bins=7)
    assert 0 <= r["ece"] <= r["mce"] + 1e-12 <= 1 + 1e-12
    assert 0 <= r["brier"] <= 1 and r["nll"] >= 0
    for k in ("auroc", "auprc"):
        assert math.isnan(r[k]) or 0 <= r[k] <= 1
    rb = M.reliability_bins(p, y, n_bins=7, strategy="quantile")
    assert rb.counts.sum() == len(p)


# ---- validation -------------------------------------------------------------------------

@pytest.mark.parametrize("p, y, field", [
    ([0.1, float("nan")], [0, 1], "p"),
    ([0.1, 1.5], [0, 1], "p"),
    ([[0.1, 0.2]], [0, 1], "p"),
    ([0.1, 0.2], [0, 2], "y"),
    ([0.1, 0.2], [0, 1, 1], "y"),
    ([], [], "p"),
    (["a", "b"], [0, 1], "p"),
])
def test_bad_input_names_the_argument(p, y, field):
    with pytest.raises(InputError) as exc:
        M.brier(p, y)
    assert exc.value.field == field and field in str(exc.value)


def test_bad_binning_arguments():
    with pytest.raises(InputError, match="n_bins"):
        M.ece([0.1], [0], n_bins=0)
    with pytest.raises(InputError, match="strategy"):
        M.ece([0.1], [0], strategy="log")


def test_boolean_labels_accepted():
    assert M.brier([0.2, 0.9], [False, True]) == pytest.approx((0.04 + 0.01) / 2)


def test_average_ranks_equal_scipy_rankdata_with_and_without_ties():
    from scipy.stats import rankdata

    from calimon.numerics.metrics import average_ranks

    rng = np.random.default_rng(3)
    for n in (1, 2, 7, 500):
        for levels in (1, 3, 1000):
            a = rng.integers(0, levels, n).astype(float)
            assert np.array_equal(average_ranks(a), rankdata(a))
