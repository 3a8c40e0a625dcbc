"""benchmarks/robustness/report.py: undefended and defended runs side by side, the cost of each
defense next to the undefended judge, the docs section replaced, mixed samples refused."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from conftest import toy_samples
from test_faults import fake_factory

from calimon.samples import write_samples

ROOT = Path(__file__).resolve().parents[1]


def _report_module():
    spec = importlib.util.spec_from_file_location(
        "robustness_bench_report", ROOT / "benchmarks" / "robustness" / "report.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _runs(smol, tmp_path, monkeypatch, n_pairs=10):  # 10: the curve rule of each class
    from calimon.studies.robustness.study import RobustnessSettings, run_robustness

    fake_factory(monkeypatch)
    bench = write_samples(toy_samples(n_pairs), tmp_path / f"toy{n_pairs}.jsonl")
    out = tmp_path / "runs"
    for name, defense in (("verdict-none", ()), ("verdict-strip+reminder", ("reminder", "strip"))):
        run_robustness(RobustnessSettings(
            model=str(smol.path), benchmark=str(bench), split=None, fit_split=None,
            store=tmp_path / "s.sqlite", out=out / "toy" / name, defense=defense,
            attacks=("role_markers", "control_note")))
    return out


def test_report_puts_defended_rows_beside_undefended_and_fills_the_docs(smol, tmp_path,
                                                                       monkeypatch):
    report = _report_module()
    runs = _runs(smol, tmp_path, monkeypatch)
    docs = tmp_path / "reliability.md"
    docs.write_text(f"# R\n\nbefore\n\n{report.DOCS_BEGIN}\nold\n{report.DOCS_END}\n\nafter\n")
    out = tmp_path / "robustness.md"
    report.main([str(runs), "--out", str(out), "--docs", str(docs)])
    text = out.read_text()
    rows = [ln for ln in text.splitlines() if ln.startswith("| role_markers |")]
    assert [r.split(" | ")[2] for r in rows] == ["none", "reminder+strip"]  # side by side
    docs_text = docs.read_text()
    assert docs_text.startswith("# R\n\nbefore\n\n") and docs_text.endswith("\n\nafter\n")
    assert "old" not in docs_text and "| verdict | reminder+strip |" in docs_text
    assert f"run by `bash benchmarks/robustness/run.sh`); per-rewrite figures with intervals: `{out}`" \
        in docs_text  # the summary names the report it abbreviates
    by_name = {p.parent.name: json.loads(p.read_text())
               for p in runs.glob("toy/*/robustness.json")}
    plain, defended = by_name["verdict-none"], by_name["verdict-strip+reminder"]
    delta = defended["clean"]["auroc_cal"] - plain["clean"]["auroc_cal"]
    tokens = (defended["clean"]["mean_prompt_tokens"] - plain["clean"]["mean_prompt_tokens"])
    assert tokens > 0  # the reminder costs prompt tokens
    line = next(ln for ln in docs_text.splitlines() if ln.startswith("| verdict | reminder+"))
    assert f"| {delta:+.3f} |" in line and f"| {tokens:+.1f} |" in line
    assert text.count("`calimon robustness ") == 2 and "--defense reminder,strip" in text


def test_report_refuses_runs_on_different_samples(smol, tmp_path, monkeypatch):
    report = _report_module()
    runs = _runs(smol, tmp_path, monkeypatch)
    doc_path = runs / "toy" / "verdict-none" / "robustness.json"
    doc = json.loads(doc_path.read_text())
    doc["provenance"]["dataset_hash"] = "something-else"  # the fit set differs: allowed
    doc_path.write_text(json.dumps(doc))
    report.main([str(runs), "--out", str(tmp_path / "r.md")])
    doc["provenance"]["evaluated_hash"] = "something-else"  # the evaluated samples differ
    doc_path.write_text(json.dumps(doc))
    with pytest.raises(SystemExit, match="different samples"):
        report.main([str(runs), "--out", str(tmp_path / "r.md")])
