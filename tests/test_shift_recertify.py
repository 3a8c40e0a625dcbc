"""Recertification through review: audit slices, stratified bounds, label files, the CLI."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from calimon.cli import app
from calimon.deploy.io import write_synthetic_run
from calimon.deploy.policy_file import Audit, load_policy
from calimon.errors import InputError
from calimon.studies.shift.recert_run import read_labels, recertify_files
from calimon.studies.shift.recertify import (
    Stratum,
    audit_labels_needed,
    count_lower,
    count_upper,
    stratified_bounds,
)


def test_audit_slice_is_deterministic_and_has_its_rate():
    a = Audit(fraction=0.2, seed=7)
    ids = [f"t{i}" for i in range(5000)]
    picked = [a.includes(i) for i in ids]
    assert picked == [a.includes(i) for i in ids]
    assert np.mean(picked) == pytest.approx(0.2, abs=0.02)
    assert not any(Audit().includes(i) for i in ids[:100])
    assert picked != [Audit(fraction=0.2, seed=8).includes(i) for i in ids]


def test_hypergeometric_count_bounds_cover_and_are_exact_at_full_audit():
    assert count_upper(3, 10, 10, 0.05) == 3 and count_lower(3, 10, 10, 0.05) == 3
    assert count_upper(0, 0, 50, 0.05) == 50 and count_lower(0, 0, 50, 0.05) == 0
    rng = np.random.default_rng(0)
    N, K, m, delta = 200, 30, 40, 0.1
    pop = np.r_[np.ones(K), np.zeros(N - K)]
    miss_hi = miss_lo = 0
    for _ in range(400):
        k = int(rng.choice(pop, m, replace=False).sum())
        miss_hi += count_upper(k, m, N, delta) < K
        miss_lo += count_lower(k, m, N, delta) > K
    limit = 400 * (delta + 3 * math.sqrt(delta * (1 - delta) / 400))
    assert miss_hi <= limit and miss_lo <= limit
    assert miss_hi > 0 or miss_lo > 0  # not trivially wide


def _traffic(rng, n=3000):
    """Scores and labels of new traffic and a policy's actions on it."""
    y = rng.random(n) < 0.3
    s = 1 / (1 + np.exp(-(np.where(y, 1.0, -1.0) + rng.normal(size=n))))
    action = np.where(s < 0.35, "auto_pass", np.where(s >= 0.6, "auto_block", "human_review"))
    return y, action


def _strata(y, action, audited):
    out = {}
    for a in ("auto_pass", "auto_block", "human_review"):
        m = action == a
        rev = m if a == "human_review" else (m & audited)
        out[a] = Stratum(a, int(m.sum()), int(rev.sum()), int((rev & ~y).sum()),
                         1.0 if a == "human_review" else 0.1)
    return out


def test_stratified_far_mr_bounds_cover_the_traffic_rates():
    rng = np.random.default_rng(5)
    y, action = _traffic(rng)
    true_far = np.mean(action[~y] == "auto_block")
    true_mr = np.mean(action[y] == "auto_pass")
    viol_far = viol_mr = 0
    for _ in range(300):
        far, mr = stratified_bounds(_strata(y, action, rng.random(y.size) < 0.1), 0.1)
        viol_far += far.bound < true_far
        viol_mr += mr.bound < true_mr
    assert viol_far <= 300 * 0.1 and viol_mr <= 300 * 0.1
    full = _strata(y, action, np.ones(y.size, bool))
    far, mr = stratified_bounds(full, 0.05, far_alpha=0.5)
    assert far.bound == pytest.approx(true_far) and far.estimate == pytest.approx(true_far)
    assert mr.bound == pytest.approx(true_mr) and far.certified is True
    with pytest.raises(InputError, match="fully labelled"):
        stratified_bounds({"human_review": Stratum("human_review", 5, 4, 2, 1.0)})


def test_audit_labels_needed_is_enough_and_close_to_minimal():
    rng = np.random.default_rng(1)
    y, action = _traffic(rng)
    full = _strata(y, action, np.ones(y.size, bool))
    true_far = np.mean(action[~y] == "auto_block")
    alpha = true_far + 0.03
    planned = {a: full[a].benign / full[a].size for a in ("auto_pass", "auto_block")}
    need = audit_labels_needed(full, alpha, 0.05, "far", planned)
    review = full["human_review"].size
    assert need is not None and need > review
    assert audit_labels_needed(full, true_far - 0.01, 0.05, "far", planned) is None


def _policy_run(tmp_path, fraction=0.2):
    write_synthetic_run(tmp_path / "run", n_pairs=600, seed=0)
    runner = CliRunner()
    r = runner.invoke(app, ["escalate", str(tmp_path / "run"), "--budget", "0.2",
                            "--audit-fraction", str(fraction), "--out",
                            str(tmp_path / "p.yaml")])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["apply-policy", str(tmp_path / "p.yaml"),
                            str(tmp_path / "run" / "curve.csv"), "--out",
                            str(tmp_path / "dec.csv")])
    assert r.exit_code == 0, r.output
    assert "audit slice of 0.2" in r.output and "shift check: not run" in r.output
    return tmp_path / "dec.csv"


def test_recertify_end_to_end_and_label_file_errors(tmp_path):
    dec = _policy_run(tmp_path)
    assert load_policy(tmp_path / "p.yaml").audit.fraction == 0.2
    rows = [line.split(",") for line in dec.read_text().splitlines()[1:]]
    truth = {}
    for line in (tmp_path / "run" / "curve.csv").read_text().splitlines()[1:]:
        f = line.split(",")
        truth[f[0]] = f[2]
    reviewed = [r[0] for r in rows if r[4] == "1"]
    (tmp_path / "labels.csv").write_text(
        "id,label\n" + "".join(f"{i},{truth[i]}\n" for i in reviewed))
    rep = recertify_files(dec, tmp_path / "labels.csv", far_alpha=0.3, mr_alpha=0.3)
    assert rep.n_labels_used == len(reviewed) and rep.n_reviewed_unlabelled == 0
    assert rep.far.bound >= rep.far.estimate and rep.mr.bound >= rep.mr.estimate
    r = CliRunner().invoke(app, ["recertify", str(dec), str(tmp_path / "labels.csv"),
                                 "--far", "0.3"])
    assert r.exit_code == 0 and "FAR on this traffic" in r.output, r.output
    jl = tmp_path / "labels.jsonl"
    jl.write_text("".join(json.dumps({"id": i, "label": truth[i] == "1"}) + "\n"
                          for i in reviewed[:5]))
    part = recertify_files(dec, jl)
    assert part.n_reviewed_unlabelled == len(reviewed) - 5 and part.far.bound >= rep.far.bound
    bad = tmp_path / "bad.csv"
    bad.write_text(f"id,label\n{reviewed[0]},1\n{reviewed[1]},maybe\n")
    with pytest.raises(InputError) as e:
        read_labels(bad)
    assert e.value.line == 3 and e.value.field == "label" and str(bad) in str(e.value)
    bad.write_text(f"id,label\n{reviewed[0]},1\n{reviewed[0]},0\n")
    with pytest.raises(InputError, match="labelled both"):
        read_labels(bad)
    bad.write_text("id,label\nnot-an-id,1\n")
    with pytest.raises(InputError, match="not in the decisions"):
        recertify_files(dec, bad)
    jl.write_text('{"id": "x", "label": 1}\n{oops\n')
    with pytest.raises(InputError) as e:
        read_labels(jl)
    assert e.value.line == 2
    r = CliRunner().invoke(app, ["recertify", str(dec), str(bad)])
    assert r.exit_code == 2 and "error:" in r.output and dec.is_file()
