"""`calimon compare`: several curve runs on one MR/FAR figure and one leaderboard.

The run folders are written by the real curve writer from fake readings (no model); the
figures of the table are checked against each run's own curve.json."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest
import typer
from conftest import toy_samples
from typer.testing import CliRunner

from calimon.errors import InputError
from calimon.report.compare import build_comparison, compare_runs, markdown
from calimon.selection import dataset_hash
from calimon.studies.curve.outputs import write_curve_outputs
from calimon.studies.curve.run import CurveSettings
from calimon.verdict import Verdict


def write_run(out: Path, *, n_pairs: int = 20, seed: int = 0, model: str = "toy",
              readout: str = "verdict", prompt: str = "direct", split: str | None = None,
              binary: bool = True, timing: dict | None = None) -> Path:
    """A run folder over ``toy_samples(n_pairs)`` (benchmark "toy") with noisy fake scores and,
    with ``binary``, a binary point per prompt with one parse failure."""
    rng = random.Random(seed)
    data = [s if split is None else replace(s, split=split)
            for s in toy_samples(n_pairs)]
    readings = {s.transcript_hash: Verdict(s.transcript_hash, readout, "ok", p_raw=min(
        0.99, max(0.01, rng.gauss(0.62 if s.label else 0.38, 0.17)))) for s in data}
    bset = data[:8] if binary else []
    breadings = {}
    for name in (("direct", "evidence") if binary else ()):
        table = {}
        for i, s in enumerate(bset):
            decision = None if i == 0 else bool(s.label) == (rng.random() < 0.8)
            table[s.transcript_hash] = Verdict(
                s.transcript_hash, "binary", "ok" if decision is not None else
                "parse_failure", decision=decision,
                p_raw=None if decision is None else float(decision))
        breadings[name] = table
    settings = CurveSettings(model=model, benchmark="toy", readout=readout, prompt=prompt,
                             n_boot=20, split=split, methods=("platt", "isotonic"),
                             binary_prompts=("direct", "evidence") if binary else ())
    out.mkdir(parents=True, exist_ok=True)
    write_curve_outputs(
        out, settings, evaluate=data, fit=[], readings=readings, binary_set=bset,
        binary_readings=breadings, timing=timing,
        provenance={"model": model, "model_revision": "rev0", "model_path": "/nowhere",
                    "prompt": prompt, "template_hash": "h", "readout": readout,
                    "benchmark": "toy", "dataset_hash": dataset_hash(data),
                    "calimon_version": "test", "store": "none", "created": "-"})
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("compare")
    return {
        "a": write_run(root / "a", seed=1, timing={"scoring_seconds": 8.0, "scored": 48,
                                                    "model_calls": 3}),
        "b": write_run(root / "b", seed=2, model="other", readout="json",
                       timing={"scoring_seconds": 0.01, "scored": 0, "model_calls": 0}),
        "small": write_run(root / "small", n_pairs=6, seed=3),  # below the class-size rule
        "other_samples": write_run(root / "other_samples", n_pairs=24, seed=4),
        "test_split": write_run(root / "test_split", seed=5, split="test", binary=False),
    }


def _doc(run: Path) -> dict:
    return json.loads((run / "curve.json").read_text())


def _op(doc: dict, name: str) -> float:
    (p,) = [p for p in doc["operating_points"] if p["name"] == name]
    return p["mr"]


def test_table_figures_are_the_runs_own(runs, tmp_path):
    comp = build_comparison([runs["a"], runs["b"]], tmp_path / "cmp")
    assert comp.same_samples is True and comp.warnings == ()
    for entry, run in zip(comp.runs, (runs["a"], runs["b"]), strict=True):
        doc = _doc(run)
        assert entry.curve is not None and entry.reason is None
        assert entry.n_scored == doc["counts"]["scored"]
        assert entry.auroc_raw == doc["auroc_raw"] and entry.auroc == doc["auroc"]
        assert dict(entry.mr_at_far) == {0.05: _op(doc, "FAR<=5%"), 0.10: _op(doc, "FAR<=10%")}
        method = doc["calibration_method"]
        assert entry.ece == doc["calibration"]["metrics_after"][method]["ece"]
        assert [(b.name, b.mr, b.far, b.n_parse_failure) for b in entry.binary] == [
            (b["name"], b["mr"], b["far"], b["n_parse_failure"]) for b in doc["binary_points"]]
        assert entry.binary[0].n_parse_failure == 1
    a, b = comp.runs
    assert (a.model, a.readout, b.model, b.readout) == ("toy", "verdict", "other", "json")
    assert a.samples_per_s == 48 / 8.0
    assert b.samples_per_s is None  # every reading from the store: n/a, not infinite
    row_a, row_b = comp.table_rows()
    assert row_a[comp.headers.index("samples/s")] == "6.00"
    assert row_b[comp.headers.index("samples/s")] == "n/a"
    assert row_a[comp.headers.index("AUROC cal")] == f"{_doc(runs['a'])['auroc']:.3f}"
    written = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert written["same_samples"] is True and len(written["runs"]) == 2
    png = tmp_path / "cmp" / "compare.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_run_below_the_class_size_rule_is_listed_not_drawn(runs, tmp_path):
    comp = compare_runs([runs["a"], runs["small"]])
    small = comp.runs[1]
    doc = _doc(runs["small"])
    assert doc["support"]["curve"] is False
    assert small.curve is None and small.reason == doc["support"]["reason"]
    assert small.auroc is None and small.auroc_raw is None
    assert dict(small.mr_at_far) == {0.05: None, 0.10: None}
    row = comp.table_rows()[1]
    assert row[comp.headers.index("AUROC cal")] == "n/a"
    assert row[comp.headers.index("MR@FAR<=5%")] == "n/a"
    assert row[comp.headers.index("n scored")] == str(doc["counts"]["scored"])
    (line,) = comp.no_curve_lines()
    rate = doc["rates_at_thresholds"][0]
    assert line.startswith(small.label) and f"{rate['k']}/{rate['n']}" in line
    md = markdown(comp)
    assert "## Runs without a curve" in md and small.label in md


def test_runs_on_different_samples_or_splits_are_flagged(runs, tmp_path):
    comp = compare_runs([runs["a"], runs["other_samples"]])
    assert comp.same_samples is False
    (warning,) = comp.warnings
    assert "NOT scored on the same samples" in warning
    for r in (runs["a"], runs["other_samples"]):
        assert _doc(r)["provenance"]["dataset_hash"] in warning
    comp = compare_runs([runs["a"], runs["test_split"]])
    # the toy's samples are the same in both (the hash covers content and labels, not the
    # split's name): only the split is flagged
    assert comp.same_samples is True and len(comp.warnings) == 1
    assert any("same benchmark toy, different splits" in w and "test" in w and "all" in w
               for w in comp.warnings)


def test_html_page_and_markdown(runs, tmp_path):
    comp = build_comparison([runs["a"], runs["b"], runs["small"]], tmp_path / "o",
                            markdown_file=tmp_path / "board.md",
                            html_file=tmp_path / "board.html")
    page = (tmp_path / "board.html").read_text()
    assert "Content-Security-Policy" in page and "<script" not in page
    assert page.count('class="cm-curve-line"') == 2  # the two runs with a curve
    for r in comp.runs:
        assert r.label in page
    assert "Runs without a curve" in page
    md = (tmp_path / "board.md").read_text()
    assert md.count("\n| ") >= 3 + 4  # header + 3 runs; 2 runs x 2 binary prompts
    assert comp.files["markdown"] == str(tmp_path / "board.md")


def _app() -> typer.Typer:
    from calimon.cli.compare import register

    app = typer.Typer()
    register(app)

    @app.command("noop")
    def _noop() -> None:  # a second command keeps `compare` a named subcommand
        pass

    return app


def test_cli_table_json_and_errors(runs, tmp_path):
    runner = CliRunner()
    res = runner.invoke(_app(), ["compare", str(runs["a"]), str(runs["other_samples"]),
                                 "--out", str(tmp_path / "c")])
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("warning: these runs were NOT scored on the same samples")
    assert "MR@FAR<=5%" in res.stdout and "binary protocol" in res.stdout
    assert (tmp_path / "c" / "compare.png").is_file()
    res = runner.invoke(_app(), ["compare", str(runs["a"]), str(runs["small"]), "--json",
                                 "--out", str(tmp_path / "j")])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert [r["curve"] for r in doc["runs"]] == [True, False]
    assert doc["runs"][0]["auroc"] == _doc(runs["a"])["auroc"]
    assert doc["runs"][1]["auroc"] is None and doc["runs"][1]["reason"]
    assert doc["same_samples"] is False and doc["files"]["png"].endswith("compare.png")
    empty = tmp_path / "empty"
    empty.mkdir()
    res = runner.invoke(_app(), ["compare", str(runs["a"]), str(empty)])
    assert res.exit_code == 2
    (line,) = res.output.strip().splitlines()
    assert line.startswith("calimon: error:") and str(empty / "curve.json") in line


def test_bad_curve_json_is_an_input_error(tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "curve.json").write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        compare_runs([bad])
    with pytest.raises(InputError, match="at least one run"):
        compare_runs([])
    (bad / "curve.json").write_text(json.dumps({"provenance": {}, "operating_points": [],
                                                "curves": {}, "binary_points": [{"name": "x"}]}))
    with pytest.raises(InputError, match="binary_points") as err:
        compare_runs([bad])
    assert str(bad / "curve.json") in str(err.value)


def test_curve_records_its_scoring_time_and_compare_reads_it(smol, tmp_path, monkeypatch):
    from calimon.samples import write_samples
    from calimon.scoring.backends import BACKENDS
    from calimon.studies.curve.run import run_curve

    monkeypatch.setitem(BACKENDS, "stand-in", "test_engine_ray:StandInBackend")
    bench = write_samples(toy_samples(4), tmp_path / "toy.jsonl")
    settings = CurveSettings(model=str(smol.path), benchmark=str(bench), backend="stand-in",
                             binary_prompts=("direct",), n_boot=10,
                             store=tmp_path / "s.sqlite", out=tmp_path / "run")
    run = run_curve(settings)
    timing = _doc(run.out)["timing"]
    # 8 transcripts for the verdict, the same 8 (whole pairs) for the binary prompt
    assert timing["scored"] == 16 and timing["model_calls"] == run.model_calls >= 2
    assert timing["scoring_seconds"] > 0
    again = run_curve(CurveSettings(**{**vars(settings), "out": tmp_path / "run2"}))
    assert _doc(again.out)["timing"]["scored"] == again.model_calls == 0
    first, second = compare_runs([run.out, again.out]).runs
    assert first.samples_per_s == 16 / timing["scoring_seconds"]
    assert second.samples_per_s is None  # everything came from the store


@pytest.mark.chromium
def test_html_page_renders_in_chromium_without_errors(runs, tmp_path):
    from calimon.report.chromium import check_page, find_chromium

    if find_chromium() is None:
        pytest.skip("no Chromium binary (apt-get install chromium)")
    build_comparison([runs["a"], runs["b"], runs["small"]], tmp_path / "o",
                     html_file=tmp_path / "board.html")
    check = check_page(tmp_path / "board.html", screenshot=tmp_path / "board.png",
                       full_height=1800, expressions={
                           "curves": "document.querySelectorAll('svg.cm-curve "
                                     "path.cm-curve-line').length",
                           "width": "document.querySelector('svg.cm-curve')"
                                    ".getBoundingClientRect().width",
                           "board_rows": "document.querySelectorAll('#leaderboard tbody tr')"
                                         ".length"})
    assert check.errors == ()
    assert check.values["curves"] == 2 and check.values["width"] > 300
    assert check.values["board_rows"] == 3
