"""A threshold calimon prints is a value a user can copy: certified and policy thresholds lie
inside the gap between adjacent calibration scores (a short decimal near its middle, or the upper
score itself when the gap holds no float) and are printed exactly, so the copied value flags
the very calibration rows the certificate and the policy counted."""

from __future__ import annotations

import re

import numpy as np
import yaml
from typer.testing import CliRunner

from calimon.cli import app
from calimon.deploy.guarantees import certify_far, cut_values, gap_cut, threshold_text
from calimon.deploy.io import ScoredSet, read_scored_csv, write_scored_csv

HI = 0.7899674371984922
LO = float(np.nextafter(HI, 0))  # 0.789967437198492: no float between them


def _run(folder, scores, labels):
    n = len(scores)
    pairs = [f"p{i // 2}" for i in range(n)]
    splits = ["calib" if (i // 2) % 2 == 0 else "test" for i in range(n)]
    scored = ScoredSet.from_arrays(scores, labels, pair_ids=pairs, splits=splits,
                                   ids=[f"r{i}" for i in range(n)])
    write_scored_csv(scored, folder / "curve.csv")
    return folder


def _crowded(folder, seed=0, n_pairs=200):
    """Scores packed within 2e-5 of 0.78997 (gaps of ~1e-8, where 6 printed digits cannot
    tell thresholds apart), misbehaving ones higher on average; one benign calib pair of
    adjacent floats at the top."""
    rng = np.random.default_rng(seed)
    labels = np.tile([0, 1], n_pairs)
    z = rng.normal(labels * 1.2, 1.0)
    scores = 0.78997 + np.round(z * 4e-6, 12)
    scores[0], scores[4] = HI, LO  # two benign calib rows (pairs 0 and 2)
    return _run(folder, scores, labels)


def _calib(folder):
    s = read_scored_csv(folder / "curve.csv")
    cal = s.splits == "calib"
    return s.scores[cal], s.labels[cal]


def _cli(*args):
    res = CliRunner().invoke(app, list(args))
    assert res.exit_code == 0, res.output
    return res.output


def test_the_one_ulp_gap_of_the_issue_is_kept_and_printed_exactly():
    benign = np.r_[np.linspace(0.1, 0.7, 98), LO, HI]
    cert = certify_far(benign, 0.05, 0.05)  # allows 1 false alarm of 100: flag HI only
    assert cert.k == 1 and cert.threshold == HI
    printed = float(threshold_text(cert.threshold))
    assert np.array_equal(benign >= printed, benign >= cert.threshold)
    assert (benign >= printed).sum() == 1


def test_inner_cuts_are_short_decimals_inside_their_gaps():
    assert gap_cut(0.4903265, 0.5090615) == 0.5
    assert gap_cut(0.7899671, 0.7899679) == 0.7899675
    assert gap_cut(LO, HI) == HI
    v = np.unique(np.random.default_rng(3).uniform(0, 1, 500))
    cuts = cut_values(v)
    assert np.all(v[:-1] < cuts[1:-1]) and np.all(cuts[1:-1] <= v[1:])
    assert max(len(repr(float(c))) for c in cuts[1:-1]) < len(repr(float(v[0]))) + 2


def test_every_printed_threshold_copied_back_flags_the_same_calibration_rows(tmp_path):
    run = _crowded(tmp_path)
    scores, labels = _calib(run)
    out = _cli("thresholds", str(run), "--far", "0.05", "--far", "0.2", "--mr", "0.2",
               "--score", "p_cal")
    rep = yaml.safe_load(_cli("thresholds", str(run), "--far", "0.05", "--far", "0.2",
                              "--mr", "0.2", "--score", "p_cal", "--json"))
    rows = [line.split() for line in out.splitlines() if re.match(r"(FAR|MR) <=", line)]
    assert len(rows) == len(rep["checks"]) == 3
    for row, check in zip(rows, rep["checks"], strict=True):
        t = check["certificate"]["threshold"]
        assert np.array_equal(scores >= float(row[4]), scores >= t), (row, t)

    policy = tmp_path / "p.yaml"
    out = _cli("escalate", str(run), "--budget", "0.2", "--far-alpha", "0.2", "--score",
               "p_cal", "--out", str(policy))
    low, high = re.search(r"p_cal < (\S+); auto_block if >= (\S+);", out).groups()
    doc = yaml.safe_load(policy.read_text())  # the file, as a user reads it
    for printed, exact in ((low, doc["t_low"]), (high, doc["t_high"]),
                           *((str(g["threshold"]), g["threshold"]) for g in doc["guarantees"])):
        assert np.array_equal(scores >= float(printed), scores >= exact), (printed, exact)
    assert (scores >= doc["t_high"]).sum() > 0 and (scores < doc["t_low"]).sum() > 0

    decisions = tmp_path / "d.csv"
    out = _cli("apply-policy", str(policy), str(run / "curve.csv"), "--out", str(decisions))
    for m in re.finditer(r"\((?:benign auto-blocked|misbehaving auto-passed)\)\s+(\S+)", out):
        assert float(m.group(1)) in (doc["t_low"], doc["t_high"])
