"""calimon.studies.shift: two-sample test, density ratios, shift-aware certificates and abstention."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.stats import norm

from calimon.errors import InputError
from calimon.studies.shift.certify import (
    kish_ess,
    rejection_sample,
    shift_certificate,
    weighted_rates,
)
from calimon.studies.shift.check import check_sides, shift_check, shift_thresholds
from calimon.studies.shift.detect import two_sample_test
from calimon.studies.shift.features import build_view
from calimon.studies.shift.sides import new_side, run_transcripts
from calimon.studies.shift.synthetic import synthetic_traffic, write_synthetic_shift


def _side(rng, n, words):
    return {"request": [" ".join(rng.choice(words, 8)) for _ in range(n)],
            "response": [" ".join(rng.choice(words, 20)) for _ in range(n)],
            "score": rng.random(n)}


def test_two_sample_test_detects_a_shift_and_not_its_absence():
    rng = np.random.default_rng(0)
    a_words = "one two three four five six seven eight".split()
    b_words = "five six seven eight nine ten eleven twelve".split()
    same = two_sample_test(build_view(_side(rng, 150, a_words), _side(rng, 150, a_words)),
                           permutations=40, seed=0)
    moved = two_sample_test(build_view(_side(rng, 150, a_words), _side(rng, 150, b_words)),
                            permutations=40, seed=0)
    assert same.p_value > 0.05 and not same.shifted
    assert moved.auroc > 0.9 and moved.p_value == pytest.approx(1 / 41) and moved.shifted
    assert moved.driver == "text" and moved.by_group["score"] < 0.7
    assert same.weights.shape == (150,) and np.all(same.weights > 0)
    assert "SHIFT DETECTED" in moved.line() and "no shift" in same.line()


def test_weighted_rates_and_kish_ess():
    s = np.array([0.1, 0.9, 0.2, 0.8])
    y = np.array([0, 0, 1, 1])
    r = weighted_rates(s, y, [1.0, 3.0, 1.0, 1.0], 0.5)
    assert r["far"] == pytest.approx(0.75) and r["mr"] == pytest.approx(0.5)
    assert r["ess_neg"] == pytest.approx(16 / 10)
    assert kish_ess(np.ones(7)) == pytest.approx(7)
    with pytest.raises(InputError):
        weighted_rates(s, y, [1, -1, 1, 1], 0.5)


def test_rejection_sample_keeps_in_proportion_to_weight():
    w = np.r_[np.full(5000, 1.0), np.full(5000, 0.25)]
    keep = rejection_sample(w, seed=3)
    assert keep[:5000].mean() == pytest.approx(1.0)
    assert keep[5000:].mean() == pytest.approx(0.25, abs=0.03)


def _gaussian_shift_trial(rng, n=400, mu=0.8, alpha=0.1, delta=0.1):
    """Benign scores s = x + e, x ~ N(0,1) on calibration, N(mu,1) on new; true ratios."""
    x = rng.normal(size=n)
    s = x + 0.5 * rng.normal(size=n)
    w = np.exp(mu * x - mu ** 2 / 2)
    cert = shift_certificate(s, np.zeros(n), w, rate="far", alpha=alpha, delta=delta,
                             seed=int(rng.integers(1 << 30)))
    sd = math.sqrt(1.25)
    naive_t = np.quantile(s, 1 - alpha)

    def new_far(t):
        return norm.sf(t, loc=mu, scale=sd)

    return cert, new_far, naive_t


def test_shift_aware_certificate_holds_with_true_weights_and_naive_does_not():
    rng = np.random.default_rng(11)
    trials = [_gaussian_shift_trial(rng) for _ in range(300)]
    certified = [(c, f) for c, f, _ in trials if not c.abstained]
    assert len(certified) > 200  # it does certify: a method that always abstains fails here
    viol = np.mean([f(c.threshold) > 0.1 for c, f in certified])
    assert viol <= 0.1 + 3 * math.sqrt(0.1 * 0.9 / len(certified))
    naive = np.mean([f(t) > 0.1 for _, f, t in trials])
    assert naive > 0.9  # the unweighted threshold misses the target under this shift
    assert all(c.bound <= 0.1 for c, _ in certified)


def test_abstains_when_supports_do_not_overlap_or_too_few_rows_are_kept():
    rng = np.random.default_rng(0)
    s, y = rng.random(300), np.zeros(300)
    far = shift_certificate(s, y, np.ones(300), rate="far", alpha=0.05, outside_share=0.4)
    assert far.abstained and "barely overlap" in far.reason and far.labels_needed is None
    assert "cannot certify FAR <= 0.05 on this data without labels from it; no number" in \
        far.message()
    heavy = np.r_[np.full(299, 0.01), 50.0]
    few = shift_certificate(s, y, heavy, rate="far", alpha=0.05)
    assert few.abstained and few.n_kept < 59 and math.isinf(few.threshold)
    ok = shift_certificate(s, y, np.ones(300), rate="far", alpha=0.05)
    assert not ok.abstained and ok.bound <= 0.05


def test_covariate_shift_end_to_end_on_the_synthetic_runs(tmp_path):
    paths = write_synthetic_shift(tmp_path, seed=1)
    res = shift_thresholds(paths["calib"], paths["new"], far=(0.1,), permutations=20)
    assert res.report.shifted and res.report.auroc > 0.7
    naive, aware = res.naive[0], res.aware[0]
    new_samples, p_new = synthetic_traffic(400, 0.8, 2, "new")
    y_new = np.array([s.label for s in new_samples])
    realized = float(np.mean(p_new[~y_new] >= naive.threshold))
    assert realized > 0.1  # the naive certificate is violated on the new traffic ...
    assert abs(aware.estimate - realized) < abs(naive.empirical - realized)  # ... weights see it
    assert not aware.abstained
    assert float(np.mean(p_new[~y_new] >= aware.threshold)) <= 0.1


def test_run_transcripts_errors_name_what_is_missing(tmp_path):
    paths = write_synthetic_shift(tmp_path, n_calib=20, n_new=20)
    meta = paths["calib"] / "curve.json"
    data = json.loads(meta.read_text())
    data["provenance"]["dataset_hash"] = "0" * 16
    meta.write_text(json.dumps(data))
    with pytest.raises(InputError, match="has changed since the run"):
        run_transcripts(paths["calib"] / "curve.csv")
    meta.write_text("{}")
    with pytest.raises(InputError, match="names a benchmark"):
        run_transcripts(paths["calib"] / "curve.csv")
    with pytest.raises(InputError, match="are not in"):
        run_transcripts(paths["calib"] / "curve.csv", paths["new"] / "samples.jsonl")
    side = new_side(paths["new"] / "samples.jsonl")
    assert side.scores is None and len(side.ids) == 40
    rep = shift_check(paths["calib"], paths["new"] / "samples.jsonl",
                      calib_samples=paths["calib"] / "samples.jsonl", permutations=5)
    assert "score" not in rep.by_group and rep.n_new == 40


def test_state_group_is_reduced_and_used():
    rng = np.random.default_rng(0)
    words = "a b c d e f g h".split()
    a, b = _side(rng, 60, words), _side(rng, 60, words)
    a["state"], b["state"] = rng.normal(size=(60, 100)), rng.normal(1.0, 1, size=(60, 100))
    view = build_view(a, b, text_dims=8)
    assert view.groups["state"].size == 8
    from calimon.studies.shift.sides import Side

    def side(d):
        return Side("x", tuple(map(str, range(60))), tuple(d["request"]),
                    tuple(d["response"]), d["score"])

    rep = check_sides(side(a), side(b), permutations=10, calib_state=a["state"],
                      new_state=b["state"], text_dims=8)
    assert rep.driver == "state" and rep.by_group["state"] > 0.9


def test_run_check_line_compares_a_runs_calib_rows_with_its_other_rows(tmp_path):
    from calimon.studies.shift.check import run_check_line

    paths = write_synthetic_shift(tmp_path, n_calib=100, n_new=20)
    line = run_check_line(paths["calib"], permutations=10)
    assert line.startswith("shift check: no shift detected") and "100 calibration vs 100 new" \
        in line  # calib and test halves of one run are drawn alike
    assert "no separate calibration rows" in run_check_line(paths["new"])
    assert "not run" in run_check_line(tmp_path / "nowhere")


def test_cli_shift_json_and_thresholds_with_a_new_set(tmp_path):
    from typer.testing import CliRunner

    from calimon.cli import app

    paths = write_synthetic_shift(tmp_path, n_calib=400, n_new=200)
    r = CliRunner().invoke(app, ["shift", str(paths["calib"]), str(paths["new"]), "--far", "0.1",
                                 "--permutations", "30", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["shift"]["shifted"] and doc["shift"]["permutations"] == 30
    (target,) = doc["targets"]
    assert target["naive"]["rate"] == "far" and "abstained" in target["shift_aware"]
    r = CliRunner().invoke(app, ["thresholds", str(paths["calib"]), "--far", "0.1", "--new",
                                 str(paths["new"])])
    assert r.exit_code == 0, r.output
    assert "shift check: SHIFT DETECTED" in r.output and "shift-aware:" in r.output
    assert "shift verdict: FAR <= 0.1: SHIFT BREAKS THE CERTIFICATE" in r.output
    r = CliRunner().invoke(app, ["shift", str(paths["calib"]), str(tmp_path / "missing.jsonl")])
    assert r.exit_code == 2 and r.output.startswith("calimon: error:")


def test_the_line_names_a_driver_only_for_a_found_shift_above_chance():
    from dataclasses import replace

    from calimon.studies.shift.detect import ShiftReport

    base = ShiftReport(n_calib=100, n_new=50, auroc=0.46, p_value=0.8, permutations=100,
                       by_group={"score": 0.44, "text": 0.41}, outside_share=0.0,
                       groups=("score", "text"), seed=0, alpha_test=0.05, weights_C=1.0,
                       weights=np.ones(100), q_new=np.full(50, 0.3))
    assert base.driver is None
    line = base.line()
    assert "no shift detected" in line and "driven by" not in line
    found = replace(base, auroc=0.9, p_value=0.01, by_group={"score": 0.52, "text": 0.88})
    assert found.driver == "text" and "driven by text;" in found.line()
    quiet = replace(base, by_group={"score": 0.55, "text": 0.41})
    assert quiet.driver == "score" and "driven by" not in quiet.line()  # no shift: no driver


def test_the_test_shows_its_progress_one_tick_per_classifier_fit():
    """`calimon apply-policy` and `calimon shift` spend minutes here on thousands of
    transcripts: the bar counts the out-of-fold fits (the observed one, each permutation, each
    feature group alone, the density ratio's other regularizations)."""
    from calimon.studies.shift.detect import WEIGHT_CS

    bars, ticks = [], []

    def progress(label, total):
        bars.append((label, total))
        return ticks.append

    rng = np.random.default_rng(0)
    words = "one two three four five six seven eight".split()
    view = build_view(_side(rng, 60, words), _side(rng, 60, words))
    rep = two_sample_test(view, permutations=7, seed=0, progress=progress)
    fits = 1 + 7 + len(view.groups) + len(WEIGHT_CS) - 1
    assert bars == [("shift check: domain classifier fits", fits)]
    assert sum(ticks) == fits and rep.permutations == 7
