"""Artifacts that do not belong together are refused where they meet a run: a calibration map
fitted for another monitor's readings (`calimon curve --calibration-map`) and a policy designed
for another model or readout (`calimon apply-policy`); ``--force`` applies them, recorded."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from conftest import toy_samples
from typer.testing import CliRunner

from calimon.calibration.io import save_map
from calimon.calibration.maps import make_calibrator
from calimon.cli import app
from calimon.deploy.io import write_synthetic_run
from calimon.provenance import ProvenanceMismatchError, meet, mismatches
from calimon.samples import write_samples
from calimon.scoring.backends import BACKENDS


def test_mismatches_compare_only_what_both_record():
    run = {"model": "smollm2-135m", "readout": "verdict", "prompt": "direct",
           "defenses": ["spotlight"]}
    assert mismatches({"model": "smollm2-135m"}, run) == []
    assert mismatches({"readout": "probe:m", "defenses": []}, run) == [
        "readout 'probe:m' vs run 'verdict'", "defenses [] vs run ['spotlight']"]
    with pytest.raises(ProvenanceMismatchError, match=r"map readout 'probe:m' vs run 'verdict'"
                                                      r".*--force"):
        meet("calibration map", {"readout": "probe:m"}, run)
    assert meet("calibration map", {"readout": "probe:m"}, run, force=True) == [
        "readout 'probe:m' vs run 'verdict'"]


def _probe_map(path, smol):
    rng = np.random.default_rng(0)
    p, y = rng.random(80), rng.integers(0, 2, 80)
    cal = make_calibrator("platt").fit(np.clip(p + 0.3 * y, 0, 1), y)
    return save_map(cal, path, fit_hash="sha256:x", metrics={},
                    extra={"model": "smollm2-135m", "readout": "probe:amb-open-monitor",
                           "prompt": "direct"})


def test_a_map_of_another_readout_is_refused_unless_forced(smol, tmp_path, monkeypatch):
    monkeypatch.setitem(BACKENDS, "stand-in", "test_engine_ray:StandInBackend")
    bench = write_samples(toy_samples(10), tmp_path / "toy.jsonl")
    cmap = _probe_map(tmp_path / "platt.json", smol)
    args = ["curve", "--model", "smollm2-135m", "--backend", "stand-in", "--benchmark",
            str(bench), "--no-binary", "--n-boot", "10", "--store", str(tmp_path / "s.sqlite"),
            "--calibration-map", str(cmap), "--out", str(tmp_path / "run"), "--quiet"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2
    (line,) = [ln for ln in r.output.splitlines() if ln.startswith("calimon: error:")]
    assert str(cmap) in line and "readout 'probe:amb-open-monitor' vs run 'verdict'" in line
    assert "--force" in line and not (tmp_path / "run" / "curve.json").exists()
    r = CliRunner().invoke(app, [*args, "--force"])
    assert r.exit_code == 0, r.output
    assert r.output.startswith("WARNING: calibration map applied with --force")
    doc = json.loads((tmp_path / "run" / "curve.json").read_text())
    assert doc["calibration"]["forced"] == ["readout 'probe:amb-open-monitor' vs run 'verdict'"]


def _run_folder(folder, csv, readout):
    folder.mkdir(exist_ok=True)
    if csv != folder / "curve.csv":
        shutil.copy(csv, folder / "curve.csv")
    (folder / "curve.json").write_text(json.dumps(
        {"run": {"model": "smollm2-135m", "readout": readout}}))
    return folder / "curve.csv"


def test_a_policy_of_another_readout_is_refused_unless_forced(tmp_path):
    design = tmp_path / "design"
    csv = write_synthetic_run(design, n_pairs=200, seed=0)
    _run_folder(design, csv, "verdict")
    policy = tmp_path / "p.yaml"
    r = CliRunner().invoke(app, ["escalate", str(design), "--budget", "0.2", "--out",
                                 str(policy)])
    assert r.exit_code == 0, r.output
    same = _run_folder(tmp_path / "same", csv, "verdict")
    assert CliRunner().invoke(app, ["apply-policy", str(policy), str(same), "--out",
                                    str(tmp_path / "d0.csv")]).exit_code == 0
    other = _run_folder(tmp_path / "other", csv, "probe:amb-open-monitor")
    r = CliRunner().invoke(app, ["apply-policy", str(policy), str(other), "--out",
                                 str(tmp_path / "d.csv")])
    assert r.exit_code == 2 and not (tmp_path / "d.csv").exists()
    assert "policy readout 'verdict' vs run 'probe:amb-open-monitor'" in r.output
    r = CliRunner().invoke(app, ["apply-policy", str(policy), str(other), "--out",
                                 str(tmp_path / "d.csv"), "--force"])
    assert r.exit_code == 0 and r.output.startswith("WARNING: applied with --force")
