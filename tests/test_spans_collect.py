"""benchmarks/spans/collect_runs.py and the copy-quote and occlusion part of
make_segment_results.py: per-sample hit@1 of each method, its expected floor, the check against
the run's own figures, and the table with paired intervals."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent.parent / "benchmarks" / "spans"


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"spans_{name}", HERE / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


TEXT = "First sentence here. The bad claim is here. A third one follows."
GOLD = [[21, 43]]  # the second sentence


def record(i: int, spans: list[dict], units: list[tuple[int, int]]) -> dict:
    return {"id": f"s{i}", "category": "sycophancy", "task": "qa", "source": "src",
            "label": True, "response": TEXT, "gold": GOLD, "spans": spans,
            "segments": [{"start": a, "end": b, "drop": 0.1} for a, b in units]}


def write_run(folder: Path, recs: list[dict], reports: dict) -> Path:
    folder.mkdir()
    (folder / "spans.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (folder / "summary.json").write_text(json.dumps({
        "provenance": {"limit": 4, "dataset_hash": "abc"},
        "counts": {"samples": 4, "misbehaving": len(recs)}, "auroc_raw": 0.7,
        "reports": {k: {"overall": {"hit_at_1": v, "f1": 0.5}} for k, v in reports.items()},
        "cost": {"seconds_variants": 10.0, "variants": 3, "variants_scored": 3,
                 "quotes": {"copy": {"seconds": 2.0}}}}))
    (folder / "spans.md").write_text("Command:\n\n```\ncalimon spans --limit 4\n```\n")
    return folder


def test_copy_quotes_in_order_and_by_drop_against_their_expected_floor(tmp_path):
    mod = load("collect_runs")
    quotes = [{"source": "copy_quote", "start": 0, "end": 5, "score": 0.0},     # misses gold
              {"source": "copy_quote", "start": 25, "end": 28, "score": 0.3}]   # hits it
    recs = [record(0, quotes, []), record(1, [], [])]  # the second sample got no quote
    run = write_run(tmp_path / "v", recs, {"copy quotes": 0.0, "copy quotes (by drop)": 0.5})
    got = mod.collect(run, "verdict")
    first, second = got["rows"]
    assert (first["copy_hit1"], first["copy_drop_hit1"]) == (0.0, 1.0)
    assert first["copy_hit1_floor"] == pytest.approx(1 / 3)  # one of three sentences is gold
    assert second["copy_hit1"] == second["copy_hit1_floor"] == 0.0  # nothing predicted
    assert got["command"] == "calimon spans --limit 4" and "response" not in json.dumps(got)


def test_occlusion_floor_reads_the_units_and_a_mismatch_with_the_run_is_refused(tmp_path):
    mod = load("collect_runs")
    spans = [{"source": "occlusion", "start": 21, "end": 43, "score": 0.2}]
    recs = [record(0, spans, [(0, 20), (21, 43), (44, 64), (44, 50)])]
    got = mod.collect(write_run(tmp_path / "h", recs, {"occlusion": 1.0}), "head")
    assert got["rows"][0]["occ_hit1"] == 1.0
    assert got["rows"][0]["occ_hit1_floor"] == pytest.approx(0.25)
    with pytest.raises(SystemExit, match="recomputed"):
        mod.collect(write_run(tmp_path / "h2", recs, {"occlusion": 0.0}), "head")


def test_the_report_gives_each_method_its_floor_and_a_paired_interval(tmp_path):
    mod = load("make_segment_results")
    rows = [{"id": f"s{i}", "category": "safety" if i % 2 else "sycophancy", "task": "qa",
             "cell": "x/qa", "copy_hit1": float(i % 3 > 0), "copy_hit1_floor": 0.25,
             "copy_drop_hit1": 1.0, "copy_drop_hit1_floor": 0.25} for i in range(12)]
    figs = mod.run_figures({"verdict": {"rows": rows}, "head": {"rows": []}})
    assert set(figs) == {"copy quotes (order written)", "copy quotes (ranked by drop)"}
    o = figs["copy quotes (order written)"]["overall"]
    assert o["n"] == 12 and o["hit1"]["mean"] == pytest.approx(8 / 12)
    lo, hi = o["hit1_minus_floor"]["ci"]
    assert lo < 8 / 12 - 0.25 < hi
    assert figs["copy quotes (ranked by drop)"]["category"]["safety"]["n"] == 6


def test_the_report_reads_the_two_run_folders_as_well_as_the_collected_json(tmp_path):
    mod = load("make_segment_results")
    quotes = [{"source": "copy_quote", "start": 25, "end": 28, "score": 0.3}]
    occ = [{"source": "occlusion", "start": 0, "end": 5, "score": 0.2}]
    v = write_run(tmp_path / "v", [record(0, quotes, [])],
                  {"copy quotes": 1.0, "copy quotes (by drop)": 1.0})
    h = write_run(tmp_path / "h", [record(0, occ, [(0, 20), (21, 43)])], {"occlusion": 0.0})
    runs = mod.read_runs([str(v), str(h)])
    assert runs["verdict"]["rows"][0]["copy_hit1"] == 1.0
    assert runs["head"]["rows"][0]["occ_hit1_floor"] == pytest.approx(0.5)
    (tmp_path / "runs.json").write_text(json.dumps(runs))
    assert mod.read_runs([str(tmp_path / "runs.json")]) == runs


def test_the_tables_alone_for_one_run(tmp_path, capsys):
    mod = load("make_segment_results")
    occ = [{"source": "occlusion", "start": 21, "end": 43, "score": 0.2}]
    h = write_run(tmp_path / "h", [record(0, occ, [(0, 20), (21, 43)])],
                  {"occlusion": 1.0, "random (as occlusion)": 0.0})
    collect = load("collect_runs")
    assert collect.main(["--occlusion", str(h), "--out", str(tmp_path / "runs.json")]) == 0
    assert mod.main(["--runs-only", str(tmp_path / "runs.json")]) == 0
    out = capsys.readouterr().out
    assert "| occlusion on the sequence head | 1 | 1.000 [1.000, 1.000] | 0.500 |" in out
    assert "| copy quotes (order written) |" not in out
