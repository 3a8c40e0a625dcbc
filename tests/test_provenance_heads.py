"""Probe heads and bundles meet runs as maps and policies do (`calimon.provenance`): a head or
bundle applied to a model of another revision, or to another prompt, template hash or defense,
is refused with one line naming both sides; ``--force`` lets it score, recorded in its readings
and curve.json. A bundle binds only a map and a curve run made for its sequence head."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from conftest import toy_samples
from typer.testing import CliRunner

from calimon.calibration.io import load_map, save_map
from calimon.calibration.maps import make_calibrator
from calimon.cli import app
from calimon.prompts import load_prompt
from calimon.provenance import ProvenanceMismatchError, mismatches
from calimon.samples import write_samples
from calimon.scoring.backends import HiddenStates
from calimon.scoring.probes.artifacts import (
    BaseModelRef,
    HeadCard,
    PromptRef,
    TrainingRef,
    save_head,
)
from calimon.scoring.probes.bundle import (
    BundleCard,
    BundleModelRef,
    load_bundle,
    make_bundle,
    save_bundle,
)
from calimon.scoring.probes.head import ProbeHead, fit_logistic
from calimon.scoring.probes.monitor import ProbeMonitor

HIDDEN = 576  # SmolLM2-135M's


class _Backend:
    """Just what ProbeMonitor reads before scoring: the model and the capability."""

    name = "stand-in"
    capabilities = frozenset({HiddenStates})

    def __init__(self, model_ref):
        self.model_ref = model_ref


def _save(root, smol, name="h", prompt="direct", revision=None):
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(60, HIDDEN)), np.arange(60) % 2 == 0
    head = ProbeHead("sequence", "logistic", 3, fit_logistic(X, y), pooling="mean")
    tpl = load_prompt(prompt)
    card = HeadCard(version=1, name=name, kind="sequence", estimator="logistic", layer=3,
                    pooling="mean",
                    base_model=BaseModelRef(name=smol.name, revision=revision or smol.revision,
                                            hidden_size=HIDDEN, num_layers=30),
                    prompt=PromptRef(name=prompt, template_hash=tpl.template_hash("verdict"),
                                     max_input_tokens=1024),
                    training=TrainingRef(benchmark="toy", dataset_hash="x", split="train",
                                         n_samples=60, n_positive=30, categories=["safety"],
                                         seed=0),
                    weights_file="", weights_sha256="", calimon_version="0", created="now")
    return save_head(head, card, root)


def test_a_head_of_another_pass_or_revision_is_refused_naming_both_sides(smol, tmp_path):
    _save(tmp_path, smol)
    be = _Backend(smol)
    assert ProbeMonitor(be, load_prompt("direct"), "h", heads_root=tmp_path).forced == []
    with pytest.raises(ProvenanceMismatchError) as err:
        ProbeMonitor(be, load_prompt("evidence"), "h", heads_root=tmp_path)
    msg = str(err.value)
    assert len(msg.splitlines()) == 1 and str(tmp_path / smol.name / "h.card.yaml") in msg
    assert "head prompt 'direct' vs run 'evidence'" in msg and "--force" in msg
    with pytest.raises(ProvenanceMismatchError, match=r"head defenses \[\] vs run \['spotlight'\]"):
        ProbeMonitor(be, load_prompt("direct").with_defenses(("spotlight",)), "h",
                     heads_root=tmp_path)
    other = _Backend(dataclasses.replace(smol, revision="reconverted"))
    with pytest.raises(ProvenanceMismatchError,
                       match=f"head model_revision '{smol.revision}' vs run 'reconverted'"):
        ProbeMonitor(other, load_prompt("direct"), "h", heads_root=tmp_path)
    forced = ProbeMonitor(other, load_prompt("direct"), "h", heads_root=tmp_path, force=True)
    assert forced.forced == [f"model_revision '{smol.revision}' vs run 'reconverted'"]


def test_a_bundle_is_checked_as_its_sequence_head(smol, tmp_path):
    _save(tmp_path, smol, "seq")
    save_bundle(BundleCard(version=1, name="mon", base_model=BundleModelRef(
        name=smol.name, revision=smol.revision), sequence_head="seq", recipe="r", command="c",
        calimon_version="0", created="now"), tmp_path)
    be = _Backend(smol)
    assert ProbeMonitor(be, load_prompt("direct"), "mon", heads_root=tmp_path).bundle
    with pytest.raises(ProvenanceMismatchError, match=r"probe bundle .*bundle prompt 'direct' "
                                                      r"vs run 'evidence'"):
        ProbeMonitor(be, load_prompt("evidence"), "mon", heads_root=tmp_path)


def test_curve_refuses_a_head_of_another_prompt_in_one_line(smol, tmp_path, monkeypatch):
    monkeypatch.setenv("CALIMON_HEADS_DIR", str(tmp_path / "heads"))
    _save(tmp_path / "heads", smol)
    bench = write_samples(toy_samples(10), tmp_path / "toy.jsonl")
    r = CliRunner().invoke(app, ["curve", "--readout", "probe:h", "--prompt", "evidence",
                                 "--benchmark", str(bench), "--no-binary", "--store",
                                 str(tmp_path / "s.sqlite"), "--out", str(tmp_path / "run"),
                                 "--quiet"])
    assert r.exit_code == 2, r.output
    (line,) = [ln for ln in r.output.splitlines() if ln.strip()]
    assert line.startswith("calimon: error:") and "this probe head was made for another " \
        "monitor: head prompt 'direct' vs run 'evidence'" in line and "--force" in line
    assert not (tmp_path / "run" / "curve.json").exists()


def _map(path, extra):
    rng = np.random.default_rng(0)
    p, y = rng.random(80), rng.integers(0, 2, 80)
    cal = make_calibrator("platt").fit(np.clip(p + 0.3 * y, 0, 1), y)
    return save_map(cal, path, fit_hash="sha256:x", metrics={}, extra=extra)


def test_a_bundle_binds_only_a_map_and_a_run_of_its_sequence_head(smol, tmp_path):
    _save(tmp_path, smol, "seq")
    mine = {"model": smol.name, "model_revision": smol.revision, "prompt": "direct",
            "template_hash": "k1", "readout": "probe:seq"}
    verdict_map = _map(tmp_path / "verdict.json", {**mine, "readout": "verdict"})
    args = dict(recipe="r", command="c", root=tmp_path)
    with pytest.raises(ProvenanceMismatchError) as err:
        make_bundle("mon", smol.name, "seq", calibration_map=verdict_map, **args)
    assert "map readout 'verdict' vs bundle 'probe:seq'" in str(err.value)
    assert not (tmp_path / smol.name / "mon.bundle.yaml").exists()
    run = tmp_path / "curve.json"
    run.write_text(json.dumps({"provenance": {**mine, "prompt": "evidence"}}))
    with pytest.raises(ProvenanceMismatchError, match="run prompt 'evidence' vs bundle 'direct'"):
        make_bundle("mon", smol.name, "seq", curve_json=run, **args)

    forced = load_bundle(make_bundle("mon", smol.name, "seq", calibration_map=verdict_map,
                                     force=True, **args))
    assert forced.card.forced == ["readout 'verdict' vs bundle 'probe:seq'"]

    # a map of the sequence head is bound, and then names the bundle: it applies to probe:mon
    seq_map = _map(tmp_path / "seq.json", mine)
    bundle = load_bundle(make_bundle("mon2", smol.name, "seq", calibration_map=seq_map, **args))
    assert bundle.card.forced == []
    extra = load_map(tmp_path / smol.name / "mon2.calibration.json").extra
    assert extra["readout"] == "probe:mon2" and extra["sequence_readout"] == "probe:seq"
    assert "template_hash" not in extra and extra["sequence_template_hash"] == "k1"
    run_of_bundle = {**mine, "template_hash": "k2", "readout": "probe:mon2"}
    assert mismatches(extra, run_of_bundle) == []
    assert mismatches(extra, {**run_of_bundle, "readout": "verdict"}) == [
        "readout 'probe:mon2' vs run 'verdict'"]


def test_the_shipped_bundle_map_names_the_bundle():
    from calimon.scoring.probes.artifacts import heads_dir

    extra = load_map(heads_dir() / "smollm2-135m" / "amb-open-monitor.calibration.json").extra
    assert extra["readout"] == "probe:amb-open-monitor"
    assert extra["sequence_readout"] == "probe:amb-open-monitor-seq"


@pytest.mark.model
def test_curve_with_force_scores_the_head_and_records_what_differed(smol, tmp_path,
                                                                     monkeypatch):
    monkeypatch.setenv("CALIMON_HEADS_DIR", str(tmp_path / "heads"))
    _save(tmp_path / "heads", smol)
    bench = write_samples(toy_samples(2), tmp_path / "toy.jsonl")  # rates only: enough here
    args = ["curve", "--readout", "probe:h", "--defense", "spotlight", "--benchmark",
            str(bench), "--no-binary", "--n-boot", "10", "--store", str(tmp_path / "s.sqlite"),
            "--out", str(tmp_path / "run"), "--quiet", "--threads", "2"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2 and "head defenses [] vs run ['spotlight']" in r.output, r.output
    r = CliRunner().invoke(app, [*args, "--force"])
    assert r.exit_code == 0, r.output
    first = r.output.splitlines()[0]
    assert first.startswith("WARNING: probe head made for another monitor, used with --force: ")
    assert first.endswith("defenses [] vs run ['spotlight']")
    doc = json.loads((tmp_path / "run" / "curve.json").read_text())
    assert doc["provenance"]["head_forced"][-1] == "defenses [] vs run ['spotlight']"
    assert doc["settings"]["force"] is True
