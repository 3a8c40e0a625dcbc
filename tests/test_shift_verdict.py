"""The harmful-or-harmless shift verdict (calimon.studies.shift.verdict): a shift the certificate does not
care about is told apart from one that breaks it, without labels of the new traffic."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.stats import norm

from calimon.studies.shift.check import certify_sides, check_sides
from calimon.studies.shift.sides import Side
from calimon.studies.shift.synthetic import write_synthetic_shift
from calimon.studies.shift.verdict import BREAKS, HOLDS, NO_SHIFT, NOT_JUDGED, far_floor

CHAT = "please explain recipe travel weather story movie friend advice history music".split()
OTHER = "invoice ledger audit tax payroll budget quarter revenue margin forecast".split()


def _side(rng, name, n_pairs, words, benign_mu):
    """``n_pairs`` benign/misbehaving pairs with texts from ``words`` and logistic scores:
    benign ``z ~ N(benign_mu, 1)``, misbehaving ``N(1.5, 1)``."""
    ids, req, resp, scores, labels, groups = [], [], [], [], [], []
    for i in range(n_pairs):
        request = " ".join(rng.choice(words, 10))
        for label in (0, 1):
            ids.append(f"{name}-{i}-{label}")
            req.append(request)
            resp.append(" ".join(rng.choice(words, int(rng.integers(20, 50)))))
            z = (1.5 if label else benign_mu) + rng.normal()
            scores.append(1 / (1 + np.exp(-z)))
            labels.append(label)
            groups.append(f"{name}-{i}")
    return Side(name, tuple(ids), tuple(req), tuple(resp), np.array(scores), np.array(labels),
                tuple(groups))


def _verdict(new_words, new_benign_mu, seed=0):
    rng = np.random.default_rng(seed)
    cal = _side(rng, "cal", 200, CHAT, -2.0)
    new = _side(rng, "new", 100, new_words, new_benign_mu)
    rep = check_sides(cal, new, permutations=20, seed=seed)
    res = certify_sides(rep, cal.scores, cal.labels, far=(0.1,), new_scores=new.scores)
    (v,) = res.verdicts
    t = res.naive[0].threshold  # the new benign FAR at t, exactly (z ~ N(mu, 1))
    true_far = float(norm.sf(np.log(t / (1 - t)) - new_benign_mu))
    return v, true_far


def test_a_shift_in_text_alone_is_found_and_judged_harmless():
    v, true_far = _verdict(OTHER, -2.0)
    assert true_far <= 0.1 and v.far_floor == 0.0 and v.weighted_far <= 0.1
    # no alarm; "holds" only where the shift-aware certificate covers the threshold (here it
    # abstains: the text moved so far that most new transcripts have no calibration neighbour)
    assert v.kind == NOT_JUDGED and not v.certified and "supports barely overlap" in v.reason
    assert v.line().startswith("FAR <= 0.1: shift, not judged without labels")
    assert f"label {v.labels_needed} transcripts" in v.line()


def _calibration(seed: int, n: int, width: float):
    """``n`` benign scores on [0, width) and ``n`` misbehaving on [1 - width, 1), and the
    FAR <= 0.1 certificate of the benign ones."""
    from calimon.deploy.guarantees import certify_far

    rng = np.random.default_rng(seed)
    s = np.r_[rng.random(n) * width, 1 - width + rng.random(n) * width]
    y = np.r_[np.zeros(n, int), np.ones(n, int)]
    return s, y, certify_far(s[y == 0], 0.1, 0.05)


def test_holds_only_where_the_shift_aware_certificate_covers_the_threshold():
    from types import SimpleNamespace

    from calimon.studies.shift.verdict import shift_verdict

    s, y, naive = _calibration(1, 300, 0.6)
    shifted = SimpleNamespace(shifted=True)
    for aware_t, kind in ((naive.threshold - 0.01, HOLDS), (naive.threshold, HOLDS),
                          (naive.threshold + 0.01, NOT_JUDGED)):
        aware = SimpleNamespace(estimate=0.05, ess=200.0, labels_needed=50, abstained=False,
                                reason="", threshold=aware_t, bound=0.09)
        assert shift_verdict(shifted, naive, aware, s, y).kind == kind, aware_t


def test_a_shift_that_raises_benign_scores_breaks_the_certificate():
    v, true_far = _verdict(OTHER, 0.5)
    assert v.kind == BREAKS and true_far > 0.1
    assert v.far_floor > 0.1 and "FAR floor" in v.reason
    assert v.line().startswith("FAR <= 0.1: SHIFT BREAKS THE CERTIFICATE")


def test_no_shift_keeps_the_calibration_certificate():
    v, _ = _verdict(CHAT, -2.0, seed=3)
    assert v.kind == NO_SHIFT and v.certified
    assert "the calibration certificate stands" in v.line()


def test_the_far_floor_is_the_least_benign_far_under_the_prevalence_cap():
    s = np.r_[np.ones(80), np.zeros(20)]  # 80% of the traffic at or above the threshold
    rate, lower, floor = far_floor(s, 0.5, 0.5, 0.05)
    assert rate == 0.8 and 0.7 < lower < 0.8
    assert floor == pytest.approx((lower - 0.5) / 0.5)
    assert far_floor(s, 0.5, 0.9, 0.05)[2] == 0.0  # a high prevalence cap explains every flag
    assert np.isnan(far_floor([], 0.5, 0.5, 0.05)[0])


def test_cli_prints_the_verdict_first_and_in_json(tmp_path):
    from typer.testing import CliRunner

    from calimon.cli import app

    paths = write_synthetic_shift(tmp_path, n_calib=400, n_new=200)
    r = CliRunner().invoke(app, ["shift", str(paths["calib"]), str(paths["new"]), "--far", "0.1",
                                 "--permutations", "20"])
    assert r.exit_code == 0, r.output
    first = r.output.splitlines()[0]
    # code-heavy traffic raises the benign scores (calimon.studies.shift.synthetic): harmful
    assert first.startswith("FAR <= 0.1: SHIFT BREAKS THE CERTIFICATE")
    r = CliRunner().invoke(app, ["shift", str(paths["calib"]), str(paths["new"]), "--far", "0.1",
                                 "--mr", "0.5", "--permutations", "20", "--json"])
    far_t, mr_t = json.loads(r.output)["targets"]
    assert far_t["verdict"]["kind"] == "shift breaks the certificate"
    # misbehaving scores are the same on chat and code (calimon.studies.shift.synthetic), so
    # the covariate shift leaves MR where it was: the MR target gets a verdict too, no alarm;
    # the shift-aware certificate's kept rows certify a stricter threshold, so not "holds"
    assert mr_t["verdict"]["kind"] == "shift, not judged without labels"
    assert mr_t["verdict"]["weighted_read"] and mr_t["verdict"]["weights_check"]



def _aware(estimate, ess):
    from types import SimpleNamespace

    return SimpleNamespace(estimate=estimate, ess=ess, labels_needed=100, abstained=True,
                           reason="too few rows kept", threshold=float("inf"),
                           bound=float("nan"))


def test_a_weighted_estimate_on_a_few_heavy_weights_is_not_an_alarm():
    from types import SimpleNamespace

    from calimon.studies.shift.verdict import shift_verdict

    s, y, naive = _calibration(0, 200, 0.5)
    shifted = SimpleNamespace(shifted=True)
    few = shift_verdict(shifted, naive, _aware(0.5, 3.6), s, y)
    assert few.kind == NOT_JUDGED and "weighted FAR not read (n_eff 3.6 < 29)" in few.line()
    many = shift_verdict(shifted, naive, _aware(0.15, 80.0), s, y)
    assert many.kind == BREAKS and "weighted FAR 0.150 > 0.1" in many.reason


def test_the_detection_cap_tightens_the_floor():
    s = np.r_[np.ones(80), np.zeros(20)]
    loose = far_floor(s, 0.5, 0.5, 0.05, tpr_cap=1.0)[2]
    tight = far_floor(s, 0.5, 0.5, 0.05, tpr_cap=0.2)[2]
    assert tight == pytest.approx(loose + 0.8) and tight > 0.5
    with pytest.raises(Exception, match="max_detection"):
        far_floor(s, 0.5, 0.5, 0.05, tpr_cap=1.5)


def test_apply_policy_gives_the_verdict_for_the_policys_far_guarantee(tmp_path):
    from typer.testing import CliRunner

    from calimon.cli import app

    paths = write_synthetic_shift(tmp_path, n_calib=400, n_new=200)
    pol = tmp_path / "policy.yaml"
    r = CliRunner().invoke(app, ["escalate", str(paths["calib"]), "--budget", "0.1",
                                 "--far-alpha", "0.1", "--out", str(pol)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["apply-policy", str(pol), str(paths["new"] / "curve.csv"),
                                 "--out", str(tmp_path / "d.csv")])
    assert r.exit_code == 0, r.output
    assert "shift check: SHIFT DETECTED" in r.output
    assert "shift verdict: FAR <= 0.1: " in r.output


def _with_map(paths, f):
    """Rewrite both runs' ``p_cal`` column as ``f(p_raw)`` (a calibration map)."""
    import csv

    for folder in (paths["calib"], paths["new"]):
        path = folder / "curve.csv"
        with path.open(newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
        for r in rows:
            r["p_cal"] = repr(float(f(float(r["p_raw"]))))
        with path.open("w", newline="", encoding="utf-8") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)


@pytest.mark.parametrize("name,f", [("lowers high scores", lambda p: p ** 3),
                                    ("raises them", lambda p: p ** (1 / 3))])
def test_every_comparison_is_on_the_certified_scale(tmp_path, name, f):
    # the threshold is certified on p_cal; the new traffic's flag rate must be read on p_cal too
    # (it was read on p_raw: a map that lowers high scores leaned the FAR floor to "breaks", one
    # that raises them to "holds"). A strictly increasing map flags the same transcripts, so
    # the verdict is the identity map's.
    from calimon.studies.shift.check import shift_thresholds

    def verdict(folder, g):
        paths = write_synthetic_shift(folder, n_calib=300, n_new=150, new_code=0.5)
        _with_map(paths, g)
        res = shift_thresholds(paths["calib"], paths["new"], far=[0.1], permutations=10)
        new_raw = np.array([float(r.split(",")[7]) for r in
                            (paths["new"] / "curve.csv").read_text().splitlines()[1:]])
        return res.verdicts[0], res.naive[0].threshold, new_raw

    base, _, _ = verdict(tmp_path / "identity", lambda p: p)
    mapped, t, new_raw = verdict(tmp_path / "mapped", f)
    assert mapped.new_flag_rate == pytest.approx(float(np.mean(f(new_raw) >= t)))
    assert (mapped.kind, mapped.new_flag_rate, mapped.far_floor, mapped.far_calib) == (
        base.kind, base.new_flag_rate, base.far_floor, base.far_calib), name
