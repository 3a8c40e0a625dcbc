"""`calimon robustness --engine ray` and `calimon spans --engine ray`: the same figures as a
local run, with the readings computed by Ray actors that rebuild the monitor from its spec.
Needs ray (run in the Ray venv)."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import replace

import pytest
from conftest import toy_samples
from typer.testing import CliRunner

from calimon.samples import write_samples

HAS_RAY = importlib.util.find_spec("ray") is not None
pytestmark = [pytest.mark.ray, pytest.mark.model,
              pytest.mark.skipif(not HAS_RAY, reason="needs ray (pip install 'calimon[ray]')"),
              pytest.mark.usefixtures("ray_cluster")]  # one cluster for every scoring call

CPU = ["--model", "smollm2-135m", "--device", "cpu", "--threads", "1", "--json"]


def run(args):
    from calimon.cli import app

    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)  # stderr carries the weight-loading bars


@pytest.fixture
def bench(tmp_path):
    samples = [replace(s, split="test") for s in toy_samples(10)]  # 10: the curve rule
    return str(write_samples(samples, tmp_path / "toy.jsonl"))


def test_robustness_on_ray_matches_a_local_run(bench, tmp_path):
    base = ["robustness", *CPU, "--benchmark", bench, "--fit-split", "all",
            "--attack", "reviewer_note", "--calibration", "none"]  # toy pairs: a map inverts
    local = run([*base, "--store", str(tmp_path / "l.sqlite"), "--out", str(tmp_path / "l")])
    ray = run([*base, "--engine", "ray", "--store",
               str(tmp_path / "r.sqlite"), "--out", str(tmp_path / "r")])
    assert ray["clean"]["scored"] == local["clean"]["scored"] == 20
    assert ray["clean"]["auroc_raw"] == pytest.approx(local["clean"]["auroc_raw"], abs=1e-6)
    (a,), (b,) = local["results"], ray["results"]
    assert b["shift_raw"]["mean_delta"] == pytest.approx(a["shift_raw"]["mean_delta"], abs=1e-5)
    assert b["at_far"]["flipped"] == a["at_far"]["flipped"]
    assert "--engine ray" in ray["provenance"]["command"]


def test_spans_on_ray_matches_a_local_run(bench, tmp_path):
    base = ["spans", *CPU, "--benchmark", bench, "--max-segments", "4", "--no-quotes"]
    local = run([*base, "--no-share-prefix", "--store", str(tmp_path / "l.sqlite"),
                 "--out", str(tmp_path / "l")])
    ray = run([*base, "--engine", "ray", "--store",
               str(tmp_path / "r.sqlite"), "--out", str(tmp_path / "r")])
    assert ray["settings"]["share_prefix"] is False and ray["model_calls"] > 0
    assert ray["counts"] == local["counts"]
    assert ray["auroc_raw"] == pytest.approx(local["auroc_raw"], abs=1e-6)
    for name, rep in local["reports"].items():
        assert ray["reports"][name]["overall"] == pytest.approx(rep["overall"], abs=1e-6), name
