"""`calimon curve`: the end-to-end run on the real embedded model, and the backend choice
(built through the same MonitorSpec factory as `calimon score`) on a stand-in backend."""

import json

import pytest
from conftest import toy_samples
from test_engine_ray import StandInBackend
from typer.testing import CliRunner

from calimon.samples import write_samples
from calimon.scoring.backends import BACKENDS
from calimon.studies.curve.run import CurveSettings, run_curve


@pytest.mark.model
def test_curve_run_end_to_end_and_resumable(tmp_path):
    bench = write_samples(toy_samples(20), tmp_path / "toy.jsonl")  # 20 a class: maps fitted
    # the embedded verdict reads these hand-written pairs the wrong way round (raw AUROC far
    # below 0.5), so its Platt map is fitted decreasing: kept here, and recorded
    settings = CurveSettings(benchmark=str(bench), binary_prompts=("direct",), binary_limit=4,
                             n_boot=20, store=tmp_path / "store.sqlite", out=tmp_path / "run",
                             allow_inverted=True)
    run = run_curve(settings)
    assert run.summary["inverted"]["allowed"] is True
    assert run.model_calls > 0
    for name in ("curve.json", "curve.csv", "curve.png", "curves_by_group.png",
                 "reliability.png", "calibration/platt.json"):
        assert (run.out / name).stat().st_size > 0, name
    doc = json.loads((run.out / "curve.json").read_text())
    assert {"thresholds", "mr", "far", "binary_points", "calibration", "operating_points",
            "provenance", "curves"} <= set(doc)
    assert len(doc["thresholds"]) == len(doc["mr"]) == len(doc["far"])
    assert doc["mr"][0] == 1.0 and doc["far"][-1] == 1.0
    assert doc["binary_points"][0]["name"] == "binary/direct"
    assert doc["run"]["backend"] == doc["provenance"]["backend"] == "transformers"
    assert {"ece", "brier", "nll", "auroc", "auprc", "mce"} <= set(
        doc["calibration"]["metrics_after"]["platt"])
    assert doc["counts"]["scored"] == 40
    rows = (run.out / "curve.csv").read_text().splitlines()
    assert rows[0].startswith("id,pair_id,label,category,task,split,status,p_raw,p_cal")
    assert len(rows) == 41
    again = run_curve(CurveSettings(**{**vars(settings), "out": tmp_path / "run2"}))
    assert again.model_calls == 0
    assert json.loads((again.out / "curve.json").read_text())["mr"] == doc["mr"]


class RecordingBackend(StandInBackend):
    """The stand-in backend, keeping the keyword arguments the factory passed it."""

    made: list = []

    def __init__(self, model, **options):
        super().__init__(model)
        self.options = options
        RecordingBackend.made.append(self)


@pytest.fixture
def recording(monkeypatch):
    monkeypatch.setattr(RecordingBackend, "made", [])
    return RecordingBackend.made


def _curve_cli(smol, bench, tmp_path, *extra):
    from calimon.cli import app

    args = ["curve", "--model", str(smol.path), "--benchmark", str(bench), "--no-binary",
            "--n-boot", "10", "--store", str(tmp_path / "s.sqlite"), "--out",
            str(tmp_path / "run"), "--json", *extra]
    return CliRunner().invoke(app, args)


def test_curve_defaults_to_the_transformers_backend(smol, recording, tmp_path, monkeypatch):
    monkeypatch.setattr("calimon.scoring.backends.transformers_backend.TransformersBackend",
                        RecordingBackend)
    bench = write_samples(toy_samples(4), tmp_path / "toy.jsonl")
    res = _curve_cli(smol, bench, tmp_path, "--device", "cpu", "--batch-tokens", "1024")
    assert res.exit_code == 0, res.output
    (backend,) = recording
    assert backend.options == {"device": "cpu", "batch_tokens": 1024}
    assert backend.forward_calls > 0
    doc = json.loads((tmp_path / "run" / "curve.json").read_text())
    assert doc["run"]["backend"] == doc["provenance"]["backend"] == "transformers"
    assert doc["settings"]["backend"] == "transformers" and doc["counts"]["scored"] == 8


def test_curve_builds_a_named_backend_through_the_factory(smol, recording, tmp_path,
                                                           monkeypatch):
    monkeypatch.setitem(BACKENDS, "stand-in", "test_pipeline:RecordingBackend")
    bench = write_samples(toy_samples(4), tmp_path / "toy.jsonl")
    settings = CurveSettings(model=str(smol.path), benchmark=str(bench), backend="stand-in",
                             binary_prompts=("direct",), n_boot=10,
                             store=tmp_path / "s.sqlite", out=tmp_path / "run")
    run = run_curve(settings)
    (backend,) = recording
    assert backend.options == {}  # a plugin backend gets no transformers options
    # one call per chunk: the verdict's and the binary protocol's (paced chunks: at least one)
    assert run.model_calls == backend.forward_calls >= 2
    doc = json.loads((run.out / "curve.json").read_text())
    assert doc["run"]["backend"] == doc["provenance"]["backend"] == "stand-in"
    assert doc["counts"]["scored"] == 8 and doc["binary_points"][0]["name"] == "binary/direct"
    again = run_curve(CurveSettings(**{**vars(settings), "out": tmp_path / "run2"}))
    assert again.model_calls == 0  # the store key does not depend on the backend's options


def test_curve_passes_the_http_flags_to_the_http_backend(smol, recording, tmp_path,
                                                         monkeypatch):
    monkeypatch.setitem(BACKENDS, "http", "test_pipeline:RecordingBackend")
    bench = write_samples(toy_samples(4), tmp_path / "toy.jsonl")
    res = _curve_cli(smol, bench, tmp_path, "--backend", "http", "--base-url",
                     "http://127.0.0.1:8000/v1", "--served-model", "smol", "--top-logprobs",
                     "5", "--concurrency", "3")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["provenance"]["backend"] == "http"
    (backend,) = recording
    assert backend.options == {"base_url": "http://127.0.0.1:8000/v1", "concurrency": 3,
                               "served_model": "smol", "top_logprobs": 5}
    doc = json.loads((tmp_path / "run" / "curve.json").read_text())
    assert doc["run"]["backend"] == "http"
    assert doc["settings"]["base_url"] == "http://127.0.0.1:8000/v1"


def test_curve_backend_errors_are_one_line_before_any_work(smol, recording, tmp_path):
    missing = tmp_path / "not-there.jsonl"  # the benchmark is never read
    res = _curve_cli(smol, missing, tmp_path, "--backend", "http")
    assert res.exit_code == 2 and "--base-url" in res.output
    res = _curve_cli(smol, missing, tmp_path, "--backend", "nope")
    assert res.exit_code == 2 and "unknown backend 'nope'" in res.output
    assert len(res.output.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists() and recording == []


def test_curve_csv_with_a_calib_split_holds_the_calib_rows_for_the_deployment_tools(
        smol, recording, tmp_path, monkeypatch):
    import csv
    import dataclasses

    from calimon.calibration import load_map
    from calimon.cli import app

    monkeypatch.setitem(BACKENDS, "stand-in", "test_pipeline:RecordingBackend")
    # 20 pairs per split: the class-size rule's minimum for fitting a map (class_support)
    samples = [dataclasses.replace(x, split="calib" if int(x.pair_id[1:]) < 20 else "test")
               for x in toy_samples(40)]
    bench = write_samples(samples, tmp_path / "toy.jsonl")
    settings = CurveSettings(model=str(smol.path), benchmark=str(bench), backend="stand-in",
                             split="test", fit_on="calib", binary_prompts=(), n_boot=10,
                             store=tmp_path / "s.sqlite", out=tmp_path / "run",
                             allow_inverted=True)  # the stand-in's scores rank at random
    run = run_curve(settings)
    with open(run.out / "curve.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert sorted(r["split"] for r in rows) == ["calib"] * 40 + ["test"] * 40
    assert run.summary["counts"]["evaluated"] == 40  # the curve itself is on test only
    assert run.summary["binary_sample_count"] == 0 and run.summary["binary_points"] == []
    platt = load_map(run.out / "calibration" / "platt.json")
    assert platt.extra["fit_split"] == "calib" and platt.extra["benchmark"] == str(bench)
    assert platt.extra["model_revision"] == run.summary["provenance"]["model_revision"]
    for r in rows:  # both splits carry the one deployed map's output
        assert float(r["p_cal"]) == pytest.approx(float(platt.predict([float(r["p_raw"])])[0]),
                                                  rel=1e-5)
    res = CliRunner().invoke(app, ["thresholds", str(run.out), "--far", "0.5", "--json"])
    assert res.exit_code == 0, res.output
    assert "calib" in json.loads(res.stdout)["split"]
    from calimon.report.data import gather

    data = gather(run.out, benchmark=str(bench), store=tmp_path / "s.sqlite")
    assert {r.split for r in data.rows} == {"test"} and len(data.rows) == 40
    assert not any("dataset" in n and "differ" in n for n in data.notes)


def test_curve_reads_a_set_scored_by_calimon_score_without_model_calls(smol, recording,
                                                                        tmp_path, monkeypatch):
    # how a cluster-scored set is drawn: `calimon score --engine ray` lands the same rows as a
    # local run (test_engine_ray), then `calimon curve` on the same store finds all of them
    from calimon.cli import app

    monkeypatch.setitem(BACKENDS, "stand-in", "test_pipeline:RecordingBackend")
    bench = write_samples(toy_samples(4), tmp_path / "toy.jsonl")
    store = tmp_path / "s.sqlite"
    for readout in ("verdict", "binary"):
        res = CliRunner().invoke(app, ["score", "--model", str(smol.path), "--benchmark",
                                       str(bench), "--backend", "stand-in", "--engine", "local",
                                       "--readout", readout, "--store", str(store)])
        assert res.exit_code == 0, res.output
        assert recording[-1].forward_calls > 0
    run = run_curve(CurveSettings(model=str(smol.path), benchmark=str(bench),
                                  backend="stand-in", binary_prompts=("direct",),
                                  binary_limit=4, n_boot=10, store=store, out=tmp_path / "run"))
    assert run.model_calls == 0
    doc = json.loads((run.out / "curve.json").read_text())
    assert doc["counts"]["scored"] == 8 and doc["binary_points"][0]["name"] == "binary/direct"


def test_limit_counts_every_scored_sample_half_of_it_from_calib():
    import dataclasses

    from calimon.studies.curve.run import _eval_and_fit_sets

    samples = [dataclasses.replace(x, split=("calib", "test", "train")[int(x.pair_id[1:]) % 3])
               for x in toy_samples(12)]
    evaluate, fit = _eval_and_fit_sets(samples, CurveSettings(split="test", limit=8))
    assert len(evaluate) == len(fit) == 4
    assert {x.split for x in evaluate} == {"test"} and {x.split for x in fit} == {"calib"}
    # cross-fitted within the split: the whole limit goes to the evaluated split
    evaluate, fit = _eval_and_fit_sets(samples, CurveSettings(split="test", limit=8,
                                                              fit_on="crossfit"))
    assert (len(evaluate), fit) == (8, [])
    evaluate, fit = _eval_and_fit_sets(samples, CurveSettings(limit=8))
    assert (len(evaluate), fit) == (8, [])


def test_curve_scores_with_the_backend_it_is_handed(smol, tiny_qwen3, recording, tmp_path,
                                                    monkeypatch):
    from calimon.errors import InputError

    monkeypatch.setattr("calimon.scoring.backends.transformers_backend.TransformersBackend",
                        RecordingBackend)
    given = StandInBackend(smol)
    bench = write_samples(toy_samples(4), tmp_path / "toy.jsonl")
    settings = CurveSettings(benchmark=str(bench), binary_prompts=(), n_boot=10,
                             store=tmp_path / "s.sqlite", out=tmp_path / "run")
    run = run_curve(settings, backend=given)
    assert recording == []  # nothing was built
    assert run.model_calls == given.forward_calls > 0
    with pytest.raises(InputError, match="holds model 'smollm2-135m'.*'tiny-qwen3'"):
        run_curve(CurveSettings(**{**vars(settings), "model": "tiny-qwen3"}), backend=given)
