"""One label plan per target (calimon.studies.shift.label_plan): the same number in `shift`,
`thresholds --new`, `apply-policy` and the review planner; a target's plan does not depend on
which other targets are asked; a plan never rests on a weighted estimate its verdict did not
read."""

from __future__ import annotations

import json
import types

import numpy as np
import pytest

from calimon.studies.shift.check import certify_sides
from calimon.studies.shift.label_plan import decided_traffic, plan_labels
from calimon.studies.shift.live import stratum_counts
from calimon.studies.shift.live_plan import Target, plan
from calimon.studies.shift.synthetic import write_synthetic_shift


def _report_and_rows(n: int = 80, seed: int = 1, weights=None):
    rng = np.random.default_rng(seed)
    y = np.r_[np.zeros(n), np.ones(n)].astype(int)
    s = np.r_[rng.beta(2, 5, n), rng.beta(5, 2, n)]
    w = rng.lognormal(0, 0.5, 2 * n) if weights is None else weights
    rep = types.SimpleNamespace(weights=w, outside_share=0.0, shifted=True, n_new=300)
    new = np.r_[rng.beta(2, 5, 150), rng.beta(5, 2, 150)]
    return rep, s, y, new


def test_a_targets_plan_does_not_depend_on_the_other_targets_asked():
    # seed 1 at 80 a class: the FAR <= 0.10 target took the FAR <= 0.05 plan when both were
    # asked (plans made monotone across targets) and its own when asked alone
    rep, s, y, new = _report_and_rows()
    both = certify_sides(rep, s, y, far=(0.05, 0.10), new_scores=new).aware[1]
    alone = certify_sides(rep, s, y, far=(0.10,), new_scores=new).aware[0]
    assert both.labels_needed == alone.labels_needed and both.labels_plan == alone.labels_plan


def test_a_plan_never_rests_on_a_weighted_estimate_that_was_not_read():
    rep, s, y, new = _report_and_rows()
    heavy = np.full(s.size, 1e-3)
    heavy[3] = 1.0  # one benign row carries the weight: n_eff ~ 1, the estimate is not read
    flat = certify_sides(types.SimpleNamespace(**{**vars(rep), "weights": np.ones(s.size)}),
                         s, y, far=(0.10,), new_scores=new)
    few = certify_sides(types.SimpleNamespace(**{**vars(rep), "weights": heavy}), s, y,
                        far=(0.10,), new_scores=new)
    assert "weighted FAR not read" in few.verdicts[0].line()
    assert few.aware[0].labels_needed == flat.aware[0].labels_needed
    assert not few.plans[0].weighted and "unweighted" in few.aware[0].message()


def test_the_plan_is_the_review_planners_on_the_unlabelled_traffic():
    rep, s, y, new = _report_and_rows()
    p = plan_labels("far", 0.1, 0.05, threshold=0.6, calib_scores=s, calib_labels=y,
                    new_scores=new)
    counts = stratum_counts(decided_traffic(new >= 0.6))
    assert plan(counts, Target("far", 0.1, 0.05), shares=p.shares).labels == p.labels
    looser = plan_labels("far", 0.2, 0.05, threshold=0.6, calib_scores=s, calib_labels=y,
                         new_scores=new)
    assert looser.labels <= p.labels  # the same threshold, a looser target
    # without new scores the strata are predicted from the calibration flag share
    blind = plan_labels("far", 0.1, 0.05, threshold=0.6, calib_scores=s, calib_labels=y,
                        n_new=300)
    assert blind.predicted and sum(blind.sizes.values()) == 300 and blind.labels


# the slow suite: a real server or several CLI runs (make test stays near its 8 minutes)
@pytest.mark.slow
def test_shift_thresholds_apply_policy_and_the_review_planner_plan_the_same(tmp_path):
    from typer.testing import CliRunner

    from calimon.cli import app

    paths = write_synthetic_shift(tmp_path, n_calib=160, n_new=80, new_code=0.4)
    run = CliRunner()

    def call(*args):
        r = run.invoke(app, [*map(str, args)])
        assert r.exit_code == 0, r.output
        return json.loads(r.output)

    common = ["--permutations", "20"]
    shift = call("shift", paths["calib"], paths["new"], "--far", "0.05", "--far", "0.1",
                 *common, "--json")["targets"][1]
    thr = call("thresholds", paths["calib"], "--far", "0.1", "--new", paths["new"],
               "--json")["shift"]["targets"][0]
    pol = tmp_path / "policy.yaml"
    r = run.invoke(app, ["escalate", str(paths["calib"]), "--budget", "0.1", "--far-alpha",
                         "0.1", "--out", str(pol)])
    assert r.exit_code == 0, r.output
    applied = call("apply-policy", pol, paths["new"] / "curve.csv", "--out",
                   tmp_path / "d.csv", "--json")["shift_targets"][0]
    new = np.array([float(line.split(",")[8]) for line in
                    (paths["new"] / "curve.csv").read_text().splitlines()[1:]])
    t = shift["naive"]["threshold"]
    review = plan(stratum_counts(decided_traffic(new >= t)), Target("far", 0.1, 0.05),
                  shares=shift["plan"]["shares"]).labels
    numbers = {shift["plan"]["labels"], thr["plan"]["labels"], applied["plan"]["labels"],
               review, shift["shift_aware"]["labels_needed"]}
    assert len(numbers) == 1 and None not in numbers, numbers
    assert thr["naive"]["threshold"] == applied["naive"]["threshold"] == t
