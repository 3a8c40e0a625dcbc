"""Bundles (calimon.scoring.probes.bundle): one card binding a sequence head, a token head and a map."""


import numpy as np
import pytest
import yaml
from conftest import ModelRefStub as _Ref

from calimon.calibration.io import save_map
from calimon.calibration.maps import PlattScaling
from calimon.errors import InputError
from calimon.scoring.probes.artifacts import (
    BaseModelRef,
    HeadCard,
    HeadMismatchError,
    PromptRef,
    TrainingRef,
    save_head,
)
from calimon.scoring.probes.bundle import (
    BundleCard,
    BundleModelRef,
    find_bundle,
    load_bundle,
    save_bundle,
)
from calimon.scoring.probes.head import ProbeHead, fit_logistic


def _head_card(name, kind, template_hash="abc", revision="r1"):
    return HeadCard(version=1, name=name, kind=kind, estimator="logistic", layer=3,
                    pooling="mean" if kind == "sequence" else None,
                    base_model=BaseModelRef(name="m", revision=revision, hidden_size=6,
                                            num_layers=30),
                    prompt=PromptRef(name="direct", template_hash=template_hash,
                                     max_input_tokens=1024),
                    training=TrainingRef(benchmark="toy", dataset_hash="x", split="train",
                                         n_samples=80, n_positive=40, categories=["safety"],
                                         seed=0),
                    weights_file="", weights_sha256="", calimon_version="0", created="now")


def _parts(root, *, token_hash="abc", token_revision="r1"):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 6))
    y = X[:, 0] > 0
    for name, kind, th, rev in (("seq", "sequence", "abc", "r1"),
                                ("tok", "token", token_hash, token_revision)):
        head = ProbeHead(kind, "logistic", 3, fit_logistic(X, y, C=1.0),
                         pooling="mean" if kind == "sequence" else None)
        save_head(head, _head_card(name, kind, th, rev), root)
    cal = PlattScaling().fit(rng.uniform(size=80), rng.uniform(size=80) > 0.5)
    save_map(cal, root / "m" / "mon.calibration.json", fit_hash="h", metrics={})


def _card(**kw):
    base = dict(version=1, name="mon", base_model=BundleModelRef(name="m", revision="r1"),
                sequence_head="seq", token_head="tok", calibration_map="mon.calibration.json",
                recipe="logistic", command="make it", training={"benchmark": "toy"},
                metrics={"auroc": 0.9}, calimon_version="0", created="now")
    base.update(kw)
    return BundleCard(**base)


def test_a_bundle_binds_its_parts_and_loads_them(tmp_path):
    _parts(tmp_path)
    path = save_bundle(_card(), tmp_path)
    assert path == tmp_path / "m" / "mon.bundle.yaml"
    assert find_bundle("mon", "m", tmp_path) == path
    assert find_bundle("seq", "m", tmp_path) is None  # a plain head is not a bundle
    b = load_bundle(path, model_ref=_Ref("m", "r1"), hidden_size=6)
    assert b.sequence.kind == "sequence" and b.token.kind == "token"
    assert b.calibration.method == "platt"
    assert b.weights_sha256 == f"{b.sequence_card.weights_sha256}+{b.token_card.weights_sha256}"
    with pytest.raises(HeadMismatchError, match="trained on m revision r1"):
        load_bundle(path, model_ref=_Ref("m", "r2"))


def test_a_card_naming_a_missing_part_is_refused_and_not_written(tmp_path):
    _parts(tmp_path)
    with pytest.raises(InputError, match="nope.card.yaml not found"):
        save_bundle(_card(token_head="nope"), tmp_path)
    assert not (tmp_path / "m" / "mon.bundle.yaml").exists()


def test_heads_of_different_passes_or_kinds_are_refused(tmp_path):
    _parts(tmp_path, token_hash="other")
    with pytest.raises(HeadMismatchError, match="different passes"):
        save_bundle(_card(), tmp_path)
    assert not (tmp_path / "m" / "mon.bundle.yaml").exists()
    with pytest.raises(HeadMismatchError, match="is a token head, expected sequence"):
        save_bundle(_card(sequence_head="tok", token_head=None), tmp_path)


def test_an_altered_card_names_its_field(tmp_path):
    _parts(tmp_path)
    path = save_bundle(_card(), tmp_path)
    doc = yaml.safe_load(path.read_text())
    doc["threshold"] = 0.5
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(InputError, match="threshold"):
        load_bundle(path)
    doc.pop("threshold")
    doc["calibration_map"] = "../elsewhere.json"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(HeadMismatchError, match="plain file name"):
        load_bundle(path)


def _curve_json(path):
    import json

    doc = {"run": {"readout": "probe:seq", "calibration": "platt"},
           "provenance": {"benchmark": "toy", "dataset_hash": "d"},
           "settings": {"split": "test"}, "counts": {"scored": 30, "n_pos": 10},
           "auroc_raw": 0.8, "auroc": 0.8,
           "operating_points": [{"name": "FAR<=5%", "threshold": 0.7, "mr": 0.4, "far": 0.05,
                                 "tp": 6, "fp": 1, "tn": 19, "fn": 4}]}
    path.write_text(json.dumps(doc))
    return path


def test_the_cli_assembles_a_bundle_from_saved_heads_a_map_and_a_curve(tmp_path):
    from typer.testing import CliRunner

    from calimon.cli import app

    _parts(tmp_path)
    src = tmp_path / "m" / "mon.calibration.json"
    mapfile = src.rename(tmp_path / "platt.json")
    curve = _curve_json(tmp_path / "curve.json")
    args = ["heads", "bundle", "--name", "mon", "--model", "m", "--root", str(tmp_path),
            "--sequence-head", "seq", "--token-head", "tok", "--recipe", "logistic",
            "--command", "bash make.sh", "--calibration-map", str(mapfile),
            "--metrics-from", str(curve)]
    got = CliRunner().invoke(app, args)
    assert got.exit_code == 0, got.output
    b = load_bundle(tmp_path / "m" / "mon.bundle.yaml")
    assert b.card.calibration_map == "mon.calibration.json" and b.calibration is not None
    assert b.card.metrics["operating_points"]["FAR<=5%"]["mr"] == 0.4
    assert (b.card.metrics["benchmark"], b.card.metrics["split"], b.card.metrics["n"]) == \
        ("toy", "test", 30)
    assert b.card.training["benchmark"] == "toy" and b.card.command == "bash make.sh"
    listed = CliRunner().invoke(app, ["heads", "list", "--root", str(tmp_path)])
    assert "bundle   seq + tok" in listed.output and "readout probe:mon" in listed.output
    bad = CliRunner().invoke(app, args[:-2] + ["--metrics-from", str(mapfile)])
    assert bad.exit_code != 0 and "curve.json" in bad.output
