from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from calimon.cli import app as deploy_app
from calimon.cli.deploy import apply_policy_cmd, escalate_cmd, thresholds_cmd
from calimon.deploy.guarantees import certify_far
from calimon.deploy.io import calib_test_split, read_scored_csv, write_synthetic_run
from calimon.deploy.policy_file import apply_policy, load_policy

runner = CliRunner()


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("run")
    write_synthetic_run(d, n_pairs=400, seed=0, n_failed=6)
    return d


def invoke(*args):
    return runner.invoke(deploy_app, [str(a) for a in args])


def test_commands_are_plain_functions_with_help_lines():
    for fn in (thresholds_cmd, escalate_cmd, apply_policy_cmd):
        assert callable(fn) and fn.__doc__.splitlines()[0].strip()


def test_thresholds_table_and_json(run_dir):
    r = invoke("thresholds", run_dir, "--far", 0.05, "--far", 0.1)
    assert r.exit_code == 0, r.output
    assert "FAR <= 0.05" in r.output and "FAR <= 0.1" in r.output and "test FAR" in r.output
    r = invoke("thresholds", run_dir, "--far", 0.05, "--mr", 0.3, "--json")
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    assert rep["n_dropped"] == 6 and rep["split"].startswith("split column")
    far, mr = rep["checks"]
    calib = calib_test_split(read_scored_csv(run_dir / "curve.csv")).calib
    want = certify_far(calib.benign_scores, 0.05, 0.05)
    assert far["certificate"]["threshold"] == want.threshold and far["certificate"]["k"] == want.k
    assert mr["certificate"]["rate"] == "mr"


def test_thresholds_without_split_column_uses_a_seeded_pair_split(tmp_path):
    write_synthetic_run(tmp_path, n_pairs=300, seed=1, with_split=False)
    r = invoke("thresholds", tmp_path / "curve.csv", "--seed", 3, "--json")
    assert r.exit_code == 0, r.output
    assert "pair-grouped" in json.loads(r.output)["split"]


def test_escalate_writes_a_loadable_policy_and_reports_test(run_dir, tmp_path):
    out = tmp_path / "policies" / "demo.yaml"
    r = invoke("escalate", run_dir, "--budget", 0.1, "--out", out, "--far-alpha", 0.2)
    assert r.exit_code == 0, r.output
    assert "written to" in r.output and "test" in r.output and "guarantee" in r.output
    p = load_policy(out)
    assert p.name == "demo" and p.score == "p_cal" and p.guarantees[0].rate == "far"
    assert p.provenance["objective"]["budget"] == 0.1
    assert p.provenance["calib"]["review_rate"] <= 0.1
    r = invoke("escalate", run_dir, "--budget", 0.1, "--out", out, "--json", "--score", "p_raw")
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    assert rep["policy"]["calibration"] == "none" and "review_rate" in rep["test"]


def test_escalate_errors_are_one_line_with_exit_code(run_dir, tmp_path):
    r = invoke("escalate", run_dir, "--out", tmp_path / "x.yaml")
    assert r.exit_code == 2 and "budget" in r.output and "Traceback" not in r.output
    r = invoke("escalate", tmp_path / "nope", "--budget", 0.1, "--out", tmp_path / "x.yaml")
    assert r.exit_code == 2 and "no such run" in r.output


def test_apply_policy_decides_every_row(run_dir, tmp_path):
    pol = tmp_path / "p.yaml"
    assert invoke("escalate", run_dir, "--budget", 0.2, "--out", pol).exit_code == 0
    out = tmp_path / "decisions.csv"
    r = invoke("apply-policy", pol, run_dir / "curve.csv", "--out", out)
    assert r.exit_code == 0, r.output
    assert "6 row(s) had no score" in r.output
    with out.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 800
    scored = [row for row in rows if row["score"]]
    s = np.array([float(row["score"]) for row in scored])
    assert [row["action"] for row in scored] == apply_policy(load_policy(pol), s).tolist()
    unscored = [row for row in rows if not row["score"]]
    assert len(unscored) == 6 and {row["action"] for row in unscored} == {"human_review"}
    assert {row["status"] for row in unscored} == {"parse_failure"}
    r = invoke("apply-policy", pol, run_dir / "curve.csv", "--out", out, "--json")
    assert json.loads(r.output)["n_unscored"] == 6


def test_apply_policy_on_its_own_design_run_says_so(run_dir, tmp_path):
    pol = tmp_path / "p.yaml"
    assert invoke("escalate", run_dir, "--budget", 0.2, "--out", pol).exit_code == 0
    r = invoke("apply-policy", pol, run_dir / "curve.csv", "--out", tmp_path / "d.csv")
    first = r.output.splitlines()[0]
    assert first.startswith(f"note: {run_dir / 'curve.csv'} is this policy's own design run")
    assert "not new traffic" in first
    assert "shift check: not run (the scored rows are the policy's own design run)" in r.output
    doc = json.loads(invoke("apply-policy", pol, run_dir / "curve.csv", "--out",
                            tmp_path / "d.csv", "--json").output)
    assert doc["design_run"] is True
    other = tmp_path / "other.csv"  # the same rows, another file: new traffic as far as it knows
    other.write_text((run_dir / "curve.csv").read_text() + "\n")
    r = invoke("apply-policy", pol, other, "--out", tmp_path / "d2.csv")
    assert r.exit_code == 0 and "design run" not in r.output


def test_apply_policy_refuses_a_bad_policy_naming_the_field(run_dir, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nname: x\nreadout: v\nmodel: m\ncalibration: none\n"
                   "score: p_raw\nt_low: 0.7\nt_high: 0.2\n", encoding="utf-8")
    r = invoke("apply-policy", bad, run_dir / "curve.csv", "--out", tmp_path / "d.csv")
    assert r.exit_code == 2
    assert "t_high" in r.output and str(bad) in r.output
