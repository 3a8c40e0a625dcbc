from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.special import expit, logit
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LogisticRegression

from calimon.calibration import (
    CALIBRATORS,
    DEFAULT_METHODS,
    BetaCalibration,
    HistogramBinning,
    IsotonicCalibration,
    PlattScaling,
    TemperatureScaling,
    calibrate,
    calibrator_from_dict,
    crossfit_predict,
    fit_on_split,
    fit_set_hash,
    load_map,
    make_calibrator,
    make_folds,
    save_map,
)
from calimon.errors import InputError
from calimon.numerics import metrics as M

netcal_scaling = pytest.importorskip("netcal.scaling")
netcal_binning = pytest.importorskip("netcal.binning")
pytestmark = pytest.mark.filterwarnings("ignore:independent is deprecated:DeprecationWarning")


def miscalibrated(seed: int, n: int, sharpen: float = 3.0, shift: float = 0.5):
    """Labels drawn from true_p; the score is over-confident: sigmoid(3 * logit(true_p) + .5)."""
    rng = np.random.default_rng(seed)
    true_p = rng.uniform(0.02, 0.98, size=n)
    y = (rng.uniform(size=n) < true_p).astype(int)
    return expit(sharpen * logit(true_p) + shift), y


def unsklearn_lr(X, y):
    """Practically unregularised logistic regression (C = 1e12)."""
    return LogisticRegression(C=1e12, tol=1e-12, max_iter=10_000).fit(X, y)


GRID = np.linspace(0.0, 1.0, 501)
# netcal clips at float64 eps (2.2e-16), we at eps=1e-12: compare the maps away from 0 and 1
INNER = np.linspace(1e-3, 1 - 1e-3, 499)


# ---- reference tests: netcal and scikit-learn on the same numbers -------------------------
# netcal's scaling methods ('mle') minimise the same unpenalised mean log-loss with scipy's
# BFGS on numeric gradients, so they agree with our Newton solution to about 1e-5.

def test_temperature_vs_netcal():
    p, y = miscalibrated(0, 2000)
    ours = TemperatureScaling().fit(p, y)
    ref = netcal_scaling.TemperatureScaling(method="mle").fit(p, y)
    # netcal's "temperature" is the weight on the logit, i.e. 1 / T
    assert ours.temperature_ == pytest.approx(1.0 / float(np.ravel(ref.temperature)[0]),
                                              rel=1e-4)
    np.testing.assert_allclose(ours.predict(INNER), ref.transform(INNER), atol=1e-5)
    assert ours.temperature_ == pytest.approx(3.0, rel=0.15)  # recovers the sharpening


def test_platt_vs_sklearn_and_netcal():
    p, y = miscalibrated(1, 2000)
    ours = PlattScaling().fit(p, y)
    lr = unsklearn_lr(logit(p)[:, None], y)
    assert ours.a_ == pytest.approx(lr.coef_[0, 0], rel=1e-6)
    assert ours.b_ == pytest.approx(lr.intercept_[0], abs=1e-6)
    ref = netcal_scaling.LogisticCalibration(method="mle").fit(p, y)
    np.testing.assert_allclose(ours.predict(INNER), ref.transform(INNER), atol=1e-4)


def test_platt_keeps_a_negative_slope():
    p, y = miscalibrated(2, 2000)
    inverted = 1.0 - p
    ours = PlattScaling().fit(inverted, y)
    assert ours.a_ < 0
    assert ours.a_ == pytest.approx(unsklearn_lr(logit(inverted)[:, None], y).coef_[0, 0],
                                    rel=1e-6)
    assert M.auroc(ours.predict(inverted), y) == pytest.approx(1 - M.auroc(inverted, y))


def test_temperature_cannot_invert_and_goes_flat():
    p, y = miscalibrated(2, 2000)
    ts = TemperatureScaling().fit(1.0 - p, y)
    assert ts.temperature_ == pytest.approx(1e6)
    np.testing.assert_allclose(ts.predict(GRID[1:-1]), 0.5, atol=1e-4)


def test_beta_vs_netcal():
    p, y = miscalibrated(3, 3000)
    ours = BetaCalibration().fit(p, y)
    assert ours.a_ > 0 and ours.b_ > 0  # unconstrained optimum: no refit involved
    X = np.column_stack([np.log(p), -np.log1p(-p)])
    lr = unsklearn_lr(X, y)
    np.testing.assert_allclose([ours.a_, ours.b_, ours.c_], [*lr.coef_[0], lr.intercept_[0]],
                               rtol=1e-5, atol=1e-6)
    ref = netcal_scaling.BetaCalibration(method="mle").fit(p, y)
    np.testing.assert_allclose(ours.predict(INNER), ref.transform(INNER), atol=1e-4)


def test_beta_drops_a_negative_coefficient_like_betacal():
    rng = np.random.default_rng(4)
    p = rng.uniform(0.001, 0.999, size=3000)
    X = np.column_stack([np.log(p), -np.log1p(-p)])
    y = (rng.uniform(size=p.size) < expit(X @ [-0.6, 1.5] - 1.0)).astype(int)
    assert unsklearn_lr(X, y).coef_[0, 0] < 0  # the unconstrained fit has a < 0 ...
    ours = BetaCalibration().fit(p, y)
    refit = unsklearn_lr(X[:, 1:], y)  # ... so betacal refits on -ln(1 - p) alone
    assert ours.a_ == 0.0
    assert ours.b_ == pytest.approx(refit.coef_[0, 0], rel=1e-5)
    assert ours.c_ == pytest.approx(refit.intercept_[0], abs=1e-5)
    assert np.all(np.diff(ours.predict(GRID)) >= 0)


def test_isotonic_vs_sklearn_and_netcal():
    p, y = miscalibrated(5, 1500)
    ours = IsotonicCalibration().fit(p, y)
    sk = IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip").fit(p, y)
    np.testing.assert_allclose(ours.predict(GRID), sk.predict(GRID), atol=1e-12)
    ref = netcal_binning.IsotonicRegression().fit(p, y)
    np.testing.assert_allclose(ours.predict(GRID), ref.transform(GRID), atol=1e-12)


def test_histogram_vs_netcal():
    # netcal assigns edge points differently in fit and transform and fills empty bins with the
    # bin centre; on continuous data with every bin filled both rules are moot.
    p, y = miscalibrated(6, 2000)
    ours = HistogramBinning(n_bins=10).fit(p, y)
    assert ours.counts_.min() > 0
    ref = netcal_binning.HistogramBinning(bins=10).fit(p, y)
    q = np.random.default_rng(7).uniform(size=500)
    np.testing.assert_allclose(ours.predict(q), ref.transform(q), atol=1e-15)


def test_histogram_closed_form_quantile_and_empty_bins():
    rng = np.random.default_rng(8)
    p = np.sort(rng.uniform(size=100))
    y = (rng.uniform(size=100) < 0.4).astype(int)
    h = HistogramBinning(n_bins=4, strategy="quantile").fit(p, y)
    assert h.counts_.tolist() == [25, 25, 25, 25]
    np.testing.assert_allclose(h.predict(p), np.repeat(y.reshape(4, 25).mean(axis=1), 25))
    low = HistogramBinning(n_bins=4).fit(p / 2, y)  # nothing above 0.5: bins 3 and 4 empty
    assert low.counts_[2:].tolist() == [0, 0]
    assert low.predict([0.6, 1.0]).tolist() == [y.mean(), y.mean()]


# ---- serialization ------------------------------------------------------------------------

@pytest.mark.parametrize("method", sorted(CALIBRATORS))
def test_json_round_trip_is_exact(method):
    p, y = miscalibrated(9, 800)
    cal = make_calibrator(method).fit(p, y)
    d = json.loads(json.dumps(cal.to_dict(), allow_nan=False))
    assert d["method"] == method
    back = calibrator_from_dict(d)
    assert type(back) is type(cal)
    q = np.r_[GRID, p]
    assert np.array_equal(back.predict(q), cal.predict(q))


def test_from_dict_names_the_bad_field():
    d = TemperatureScaling().fit(*miscalibrated(0, 200)).to_dict()
    d["params"]["temperature"] = -1.0
    with pytest.raises(InputError, match="temperature") as exc:
        calibrator_from_dict(d)
    assert exc.value.field == "params.temperature"
    d["params"]["temperature"] = "hot"
    with pytest.raises(InputError, match="params.temperature"):
        calibrator_from_dict(d)
    with pytest.raises(InputError, match="missing"):
        calibrator_from_dict({"method": "platt", "params": {"eps": 1e-12, "a": 1.0}})
    with pytest.raises(InputError, match="histogram, isotonic"):
        calibrator_from_dict({"method": "magic", "params": {}})


def test_registry_and_errors():
    assert set(CALIBRATORS) == set(DEFAULT_METHODS)
    with pytest.raises(InputError, match="beta, histogram, isotonic, platt, temperature"):
        make_calibrator("vector")
    with pytest.raises(InputError, match="histogram"):
        make_calibrator("histogram", bins=3)
    with pytest.raises(InputError, match="n_bins"):
        make_calibrator("histogram", n_bins=0).fit([0.1, 0.9], [0, 1])
    with pytest.raises(InputError, match="both classes"):
        PlattScaling().fit([0.1, 0.9], [1, 1])
    with pytest.raises(InputError, match="not fitted"):
        BetaCalibration().predict([0.5])
    with pytest.raises(InputError, match="'p'"):
        IsotonicCalibration().fit([0.1, 1.2], [0, 1])


# ---- properties ---------------------------------------------------------------------------

prob_lists = st.lists(st.floats(0.0, 1.0), min_size=2, max_size=40)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(p=prob_lists, q=prob_lists, data=st.data(),
       method=st.sampled_from(sorted(CALIBRATORS)))
def test_calibrated_scores_stay_in_unit_interval(p, q, data, method):
    y = data.draw(st.lists(st.integers(0, 1), min_size=len(p), max_size=len(p))
                  .filter(lambda v: 0 < sum(v) < len(v)))
    cal = make_calibrator(method).fit(p, y)
    for arr in (cal.predict(p), cal.predict(q), cal.predict([0.0, 1.0])):
        assert np.all(np.isfinite(arr)) and np.all((arr >= 0) & (arr <= 1))


@settings(max_examples=40, deadline=None)
@given(p=prob_lists, data=st.data())
def test_isotonic_map_is_monotone(p, data):
    y = data.draw(st.lists(st.integers(0, 1), min_size=len(p), max_size=len(p))
                  .filter(lambda v: 0 < sum(v) < len(v)))
    cal = IsotonicCalibration().fit(p, y)
    assert np.all(np.diff(cal.predict(np.sort(np.r_[GRID, p]))) >= 0)


BRIER_TOLERANCE = 0.002  # held-out Brier may not rise by more than this


@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), method=st.sampled_from(sorted(CALIBRATORS)))
def test_calibration_does_not_worsen_held_out_brier(seed, method):
    p, y = miscalibrated(seed, 8000)
    cal, p_test = fit_on_split(method, p[:4000], y[:4000], p[4000:])
    assert M.brier(p_test, y[4000:]) <= M.brier(p[4000:], y[4000:]) + BRIER_TOLERANCE


# ---- cross-fitting ------------------------------------------------------------------------

def paired(seed: int, n_pairs: int):
    p, y = miscalibrated(seed, 2 * n_pairs)
    return p, y, np.repeat([f"pair-{i}" for i in range(n_pairs)], 2)


def test_crossfit_never_fits_on_the_own_pair(monkeypatch):
    fitted, applied = [], []

    class Spy(PlattScaling):
        method = "spy"

        def _fit(self, p, y):
            fitted.append(p.copy())
            super()._fit(p, y)

        def _predict(self, p):
            applied.append(p.copy())
            return super()._predict(p)

    monkeypatch.setitem(CALIBRATORS, "spy", Spy)
    p, y, groups = paired(10, 150)
    index = {v: i for i, v in enumerate(p)}
    assert len(index) == p.size  # scores identify samples
    oof = crossfit_predict("spy", p, y, groups, n_splits=5)
    assert len(fitted) == len(applied) == 5
    seen = []
    for fit_p, apply_p in zip(fitted, applied, strict=True):
        fit_pairs = {groups[index[v]] for v in fit_p}
        apply_pairs = {groups[index[v]] for v in apply_p}
        assert not fit_pairs & apply_pairs
        seen.extend(index[v] for v in apply_p)
    assert sorted(seen) == list(range(p.size))  # every sample scored exactly once
    assert np.all((oof >= 0) & (oof <= 1))


def test_crossfit_cannot_memorise_pairs():
    # Each pair has its own score and one label; a 10 000-bin histogram memorises the fit set,
    # so a leak would return the labels. Out of fold, each pair's bin is empty in training and
    # the map can only answer the training fold's base rate.
    rng = np.random.default_rng(11)
    n_pairs = 200
    p = np.repeat(rng.permutation(n_pairs) / n_pairs + 0.5 / n_pairs, 2)
    y = np.repeat(rng.integers(0, 2, n_pairs), 2)
    groups = np.repeat(np.arange(n_pairs), 2)
    oof = crossfit_predict("histogram", p, y, groups, n_splits=4, n_bins=10_000)
    folds, k, _ = make_folds(y, groups, 4)
    for i in range(k):
        np.testing.assert_allclose(oof[folds == i], y[folds != i].mean())
    in_sample = make_calibrator("histogram", n_bins=10_000).fit(p, y).predict(p)
    assert np.array_equal(in_sample, y)  # the contrast: fitted on itself it would leak


def test_folds_keep_pairs_together_and_fall_back():
    p, y, groups = paired(12, 60)
    folds, k, notes = make_folds(y, groups, 5, seed=3)
    assert k == 5 and notes == ()
    for g in np.unique(groups):
        assert len(set(folds[groups == g])) == 1
    y_one = np.zeros_like(y)
    y_one[:2] = 1  # all positives in one pair: the fold holding it trains on negatives only
    with pytest.warns(UserWarning, match="one class"):
        oof = crossfit_predict("platt", p, y_one, groups)
    folds, k, notes = make_folds(y_one, groups, 5)
    assert k == 2 and notes
    assert np.all(oof[folds == folds[0]] == 0.0)
    with pytest.raises(InputError, match="groups"):
        make_folds(y, ["a"] * y.size)
    with pytest.raises(InputError, match="groups"):
        crossfit_predict("platt", p, y, groups[:-1])


def test_calibrate_result():
    p, y, groups = paired(13, 400)
    res = calibrate(p, y, groups, n_splits=5, seed=1)
    assert res.methods == DEFAULT_METHODS and res.n_splits == 5
    assert res.metrics_before == M.calibration_report(p, y)
    for m in res.methods:
        assert res.oof[m].shape == p.shape
        assert res.metrics_after[m] == M.calibration_report(res.oof[m], y)
        assert res.metrics_after[m]["ece"] < res.metrics_before["ece"]
        np.testing.assert_array_equal(res.maps[m].predict(p),
                                      make_calibrator(m).fit(p, y).predict(p))
        np.testing.assert_array_equal(res.oof[m], crossfit_predict(m, p, y, groups, 5, 1))
    assert res.best("brier") in res.methods
    json.dumps(res.to_dict(), allow_nan=False)
    with pytest.raises(InputError, match="methods"):
        calibrate(p, y, groups, methods=("platt", "platt"))


def test_fit_on_split_applies_the_fitted_map():
    p, y = miscalibrated(14, 600)
    cal, out = fit_on_split("beta", p[:300], y[:300], p[300:])
    np.testing.assert_array_equal(out, BetaCalibration().fit(p[:300], y[:300]).predict(p[300:]))
    with pytest.raises(InputError, match="p_apply"):
        fit_on_split("beta", p[:300], y[:300], [2.0])


# ---- storage ------------------------------------------------------------------------------

def _saved(tmp_path, method="isotonic"):
    p, y = miscalibrated(15, 500)
    ids = [f"s{i}" for i in range(p.size)]
    cal = make_calibrator(method).fit(p, y)
    path = save_map(cal, tmp_path / "map.json", fit_hash=fit_set_hash(p, y, ids),
                    metrics=M.calibration_report(p, y), extra={"split": "calib"})
    return cal, path, (p, y, ids)


@pytest.mark.parametrize("method", sorted(CALIBRATORS))
def test_save_load_round_trip(tmp_path, method):
    cal, path, (p, y, ids) = _saved(tmp_path, method)
    stored = load_map(path)
    assert stored.method == method and stored.extra == {"split": "calib"}
    assert stored.fit_set_hash == fit_set_hash(p, y, ids)
    assert stored.metrics["n"] == p.size
    assert np.array_equal(stored.predict(GRID), cal.predict(GRID))
    doc = json.loads(path.read_text())
    assert doc["format"] == "calimon.calibration-map" and doc["version"] == 1


def test_fit_set_hash_is_order_free_and_content_bound():
    p, y = miscalibrated(16, 50)
    ids = [f"s{i}" for i in range(50)]
    h = fit_set_hash(p, y, ids)
    assert h.startswith("sha256:") and len(h) == 7 + 64
    perm = np.random.default_rng(0).permutation(50)
    assert fit_set_hash(p[perm], y[perm], [ids[i] for i in perm]) == h
    y2 = y.copy()
    y2[0] = 1 - y2[0]
    assert fit_set_hash(p, y2, ids) != h
    with pytest.raises(InputError, match="unique"):
        fit_set_hash(p, y, ["same"] * 50)


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d.update(format="something-else"), "format"),
    (lambda d: d.update(version=2), "version"),
    (lambda d: d.pop("fit_set_hash"), "fit_set_hash"),
    (lambda d: d.update(pickle="gASV"), "pickle"),
    (lambda d: d.update(method="magic"), "method"),
    (lambda d: d["params"].update(y_thresholds=[0.5]), "params.y_thresholds"),
    (lambda d: d["params"].update(x_thresholds="0.1,0.2"), "params.x_thresholds"),
    (lambda d: d["metrics"].update(ece="low"), "metrics.ece"),
    (lambda d: d.update(extra=[1]), "extra"),
])
def test_load_map_refuses_bad_files_naming_the_field(tmp_path, mutate, field):
    _, path, _ = _saved(tmp_path)
    doc = json.loads(path.read_text())
    mutate(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError) as exc:
        load_map(path)
    assert exc.value.field == field and exc.value.path == str(path)
    assert str(path) in str(exc.value) and field in str(exc.value)


def test_load_map_refuses_non_json(tmp_path):
    path = tmp_path / "map.json"
    path.write_text('{\n  "format": "calimon.calibration-map",\n  oops\n}')
    with pytest.raises(InputError, match=r"map.json:3"):
        load_map(path)
    with pytest.raises(InputError, match="cannot read"):
        load_map(tmp_path / "missing.json")
