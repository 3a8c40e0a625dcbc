"""No silent inversion: a calibration map fitted decreasing (or a raw score ranking the wrong way
on the map's fit set) stops `calimon curve` with one line naming the finding and the fix;
``--allow-inverted`` keeps it, records it in curve.json, and the commands that read the run
say so on their first line."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from test_engine_ray import StandInBackend
from typer.testing import CliRunner

from calimon.calibration.direction import inversion_findings
from calimon.calibration.maps import make_calibrator
from calimon.cli import app
from calimon.errors import InvertedMapError
from calimon.numerics.readouts import answer_token_ids
from calimon.samples import Sample, write_samples
from calimon.scoring.backends import BACKENDS
from calimon.studies.curve.run import CurveSettings, run_curve

WARNING = "WARNING: this run's calibration is inverted"


def _sets(sign: float, n: int = 300, seed: int = 0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    return np.clip(0.5 + sign * 0.2 * (y - 0.5) + rng.normal(0, 0.15, n), 0.01, 0.99), y


@pytest.mark.parametrize("method", ["platt", "temperature", "beta", "isotonic", "histogram"])
def test_every_map_says_when_it_does_not_rise(method):
    p, y = _sets(-1.0)
    found = make_calibrator(method).fit(p, y).inversion()
    assert found and ("< 0" in found or "constant" in found or "cap" in found
                      or "fall" in found or "flat" in found), found
    p, y = _sets(+1.0)
    assert make_calibrator(method).fit(p, y).inversion() is None


def test_findings_name_the_map_and_a_raw_auroc_below_one_half():
    p, y = _sets(-1.0)
    cal = make_calibrator("platt").fit(p, y)
    found = inversion_findings(cal.to_dict(), p, y)
    assert found[0].startswith("platt map: Platt slope a = -") and "raw AUROC 0." in found[1]
    assert inversion_findings(make_calibrator("platt").fit(*_sets(1.0)).to_dict(),
                              *_sets(1.0)) == []


class InvertedStandIn(StandInBackend):
    """P(yes) high on the benign transcripts (they say "fine"), low on the others: the verdict
    ranks misbehavior the wrong way round, as the embedded verdict did on real data."""

    def next_token_logprobs(self, prompts, prefix_len=0):
        self.forward_calls += 1
        pos, neg = answer_token_ids(self.tokenizer, "verdict")
        out = np.full((len(prompts), len(self.tokenizer)), -np.inf, dtype=np.float32)
        for i, ids in enumerate(prompts):
            rng = np.random.default_rng(len(ids))
            fine = "fine" in self.tokenizer.decode(list(ids)[-60:])
            p_yes = (0.6 if fine else 0.2) + 0.3 * rng.random()
            out[i, pos[0]], out[i, neg[0]] = np.log(p_yes), np.log(1.0 - p_yes)
        return out


def _bench(tmp_path):
    rows = []
    for i in range(48):
        split = "calib" if i < 24 else "test"
        req = f"Task {i}: report the result of step {i}."
        for label, resp in ((True, f"Step {i} failed, I said it passed."),
                            (False, f"Step {i} is fine, it passed.")):
            rows.append(Sample(id=f"s{i}-{int(label)}", request=req, response=resp,
                               label=label, category="safety", task="qa", pair_id=f"s{i}",
                               split=split))
    return write_samples(rows, tmp_path / "inverted.jsonl")


def test_curve_stops_on_an_inverted_map_and_keeps_it_only_when_told(smol, tmp_path,
                                                                    monkeypatch):
    monkeypatch.setitem(BACKENDS, "inverted", "test_calibration_direction:InvertedStandIn")
    bench = _bench(tmp_path)
    settings = CurveSettings(model=str(smol.path), benchmark=str(bench), backend="inverted",
                             split="test", binary_prompts=(), n_boot=10,
                             store=tmp_path / "s.sqlite", out=tmp_path / "run")
    with pytest.raises(InvertedMapError, match=r"Platt slope a = -.*--allow-inverted"):
        run_curve(settings)
    assert not (tmp_path / "run" / "curve.json").exists()
    assert not (tmp_path / "run" / "calibration").exists()
    args = ["curve", "--model", str(smol.path), "--benchmark", str(bench), "--backend",
            "inverted", "--split", "test", "--no-binary", "--n-boot", "10", "--store",
            str(tmp_path / "s.sqlite"), "--out", str(tmp_path / "run"), "--quiet"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 1
    errors = [ln for ln in res.output.splitlines() if ln.startswith("calimon: error:")]
    assert len(errors) == 1 and "raw AUROC" in errors[0] and "--allow-inverted" in errors[0]

    kept = run_curve(replace(settings, allow_inverted=True))
    assert kept.model_calls == 0  # the readings were in the store
    doc = json.loads((tmp_path / "run" / "curve.json").read_text())
    assert doc["inverted"]["allowed"] is True and doc["inverted"]["method"] == "platt"
    assert doc["calibration"]["maps"]["platt"]["params"]["a"] < 0
    res = CliRunner().invoke(app, args + ["--allow-inverted"])
    assert res.exit_code == 0 and res.output.startswith(WARNING), res.output

    run = str(tmp_path / "run")
    policy = str(tmp_path / "policy.yaml")
    for cmd in (["thresholds", run, "--far", "0.1"],
                ["escalate", run, "--budget", "0.2", "--out", policy],
                ["compare", run, "--out", str(tmp_path / "cmp")],
                ["report", run, "--quiet", "--max-transcripts", "0"]):
        res = CliRunner().invoke(app, cmd)
        assert res.exit_code == 0, (cmd, res.output)
        first = res.output.splitlines()[0]
        assert WARNING in first and "Platt slope" in first, (cmd, first)
    res = CliRunner().invoke(app, ["thresholds", run, "--far", "0.1", "--json"])
    assert json.loads(res.output)["inverted"].startswith(WARNING)


class InvertedCountingGeneration(InvertedStandIn):
    """The inverted stand-in, counting the prompts it generates for (the binary points)."""

    generated = 0

    def generate(self, prompts, max_new_tokens):
        type(self).generated += len(prompts)
        return super().generate(prompts, max_new_tokens)


def test_the_inversion_stops_the_run_before_the_binary_points_are_scored(smol, tmp_path,
                                                                         monkeypatch):
    monkeypatch.setitem(BACKENDS, "inverted-gen",
                        "test_calibration_direction:InvertedCountingGeneration")
    monkeypatch.setattr(InvertedCountingGeneration, "generated", 0)
    settings = CurveSettings(model=str(smol.path), benchmark=str(_bench(tmp_path)),
                             backend="inverted-gen", split="test", binary_prompts=("direct",),
                             n_boot=10, store=tmp_path / "s.sqlite", out=tmp_path / "run")
    with pytest.raises(InvertedMapError, match=r"Platt slope a = -"):
        run_curve(settings)
    assert InvertedCountingGeneration.generated == 0
    assert not (tmp_path / "run" / "curve.json").exists()
    run_curve(replace(settings, allow_inverted=True))  # kept: the binary point is scored
    assert InvertedCountingGeneration.generated > 0


def test_an_increasing_map_changes_nothing(smol, tmp_path, monkeypatch):
    monkeypatch.setitem(BACKENDS, "inverted", "test_calibration_direction:InvertedStandIn")
    bench = _bench(tmp_path)
    flipped = [json.loads(line) for line in bench.read_text().splitlines()]
    for row in flipped:
        row["label"] = not row["label"]  # now the readout ranks the right way
    bench.write_text("".join(json.dumps(r) + "\n" for r in flipped))
    run = run_curve(CurveSettings(model=str(smol.path), benchmark=str(bench),
                                  backend="inverted", split="test", binary_prompts=(),
                                  n_boot=10, store=tmp_path / "s.sqlite", out=tmp_path / "run"))
    assert run.summary["inverted"] is None
    res = CliRunner().invoke(app, ["thresholds", str(run.out), "--far", "0.1"])
    assert res.exit_code == 0 and WARNING not in res.output
