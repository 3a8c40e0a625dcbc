"""The GPU throughput script (benchmarks/gpu/run_gpu_perf.py), run on the CPU with its tiny
Qwen3 config: the table it writes, its FLOP and parameter counts, its table of GPU peaks and what
it imports. No timing is asserted."""

from __future__ import annotations

import ast
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu" / "run_gpu_perf.py"
sys.path.insert(0, str(SCRIPT.parent))
sys.path.insert(0, str(ROOT / "benchmarks" / "perf"))

import flops  # noqa: E402
import gpu_plan  # noqa: E402
import run_gpu_perf as gpu  # noqa: E402

SMALL = ["--tiny", "--lengths", "40", "--batch-sizes", "1", "2", "--padding-batch-sizes", "3",
         "--samples", "3", "--repeats", "2", "--real-samples", "3", "3"]


def tables(text: str) -> dict[str, list[list[str]]]:
    """{section heading: rows (cells)} of every table under a `## ` heading."""
    out: dict[str, list[list[str]]] = {}
    section = None
    for line in text.splitlines():
        if line.startswith("## "):
            section = line[3:]
            out[section] = []
        elif section and line.startswith("|") and not line.startswith("|---"):
            out[section].append([c.strip() for c in line.strip("|").split("|")])
    return out


def positive(cell: str) -> float:
    value = float(cell)
    assert math.isfinite(value) and value > 0, cell
    return value


def check_rows(text: str, args) -> list[dict[str, str]]:
    """Every planned case has a row, in order, with positive, finite figures; returns the rows
    (each with its case under "case")."""
    got = tables(text)
    cases = gpu.plan(args, gpu.Shape.from_config(gpu.TINY))
    assert list(got) == list(dict.fromkeys(c.section for c in cases))
    rows = []
    for section, body in got.items():
        header, *cells = body
        assert tuple(header) == gpu.COLUMNS
        mine = [c for c in cases if c.section == section]
        assert len(cells) == len(mine)
        rows += [{**dict(zip(header, r, strict=True)), "case": c}
                 for r, c in zip(cells, mine, strict=True)]
    for r in rows:
        assert r["path"] == r["case"].path
        assert r["path"] in (*gpu.CALIMON_PATHS, "plain")
        median, low, high = map(float, re.fullmatch(
            r"(\S+) \((\S+)-(\S+)\)", r["s per run (median, min-max)"]).groups())
        assert 0 < low <= median <= high
        for col in ("samples/s", "prompt tokens/s", "TFLOP/s"):
            positive(r[col])
        assert int(r["samples"]) == len(r["case"].lengths)
    return rows


def test_tiny_run_on_the_cpu_writes_the_table(tmp_path):
    out = tmp_path / "perf-gpu.md"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, str(SCRIPT), *SMALL, "--out", str(out)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = out.read_text()
    rows = check_rows(text, gpu.parse_args([*SMALL, "--out", str(out)]))
    assert {r["MFU"] for r in rows} == {"n/a"}  # a CPU, and no --peak-tflops
    assert {r["peak GiB"] for r in rows} == {"n/a"}  # no CUDA memory to read
    assert "MFU n/a" in text and "Outputs checked finite in the warm-up runs: all, in every case that ran." in text
    assert "calimon 0.1.0" in text  # the calimon rows ran calimon's code, not a stand-in
    mixed = [r for r in rows if "mean" in r["prompt tokens"] and r["path"] != "calimon"]
    assert mixed and all(positive(r["padding"].rstrip("%")) for r in mixed)
    real = [r for r in rows if r["case"].section.startswith("real lengths")]
    assert {r["path"] for r in real} == {"calimon", "calimon padded", "plain"}
    for r in real:  # calimon packs batches of different lengths: no padding computed
        assert (r["padding"] == "0%") == (r["path"] == "calimon"), r
    assert "benchmarks/gpu/run_gpu_perf.py --tiny" in text
    agree = re.search(r"max \|dp\| (\S+) \(within 1e-05 for float32\)", text)
    assert agree and float(agree.group(1)) <= 1e-5, text  # fp32: calimon's pass = a plain one


def test_a_given_peak_gives_an_mfu_consistent_with_the_tflops(tmp_path):
    out = tmp_path / "perf.md"
    argv = [*SMALL, "--repeats", "1", "--peak-tflops", "0.002", "--out", str(out)]
    gpu.main(argv)
    text = out.read_text()
    rows = check_rows(text, gpu.parse_args(argv))
    for r in rows:
        mfu = float(r["MFU"].rstrip("%"))
        assert mfu == pytest.approx(100 * float(r["TFLOP/s"]) / 0.002, rel=2e-3, abs=0.06)
    assert "peak 0.002 TFLOP/s as given by --peak-tflops" in text


def qwen3_4b() -> dict:
    return json.loads((SCRIPT.parent / "qwen3-4b.json").read_text())


def test_the_flops_agree_with_the_cpu_benchmarks_count(tmp_path):
    cfg = qwen3_4b()["config"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    ours, theirs = gpu.Shape.from_config(cfg), flops.Shape.from_config(tmp_path)
    assert ours.layer_params == theirs.layer_params
    for args in [(0, 600), (218, 4000), (218, 4000, 18)]:
        assert ours.tokens(*args) == theirs.tokens(*args)
    assert ours.logits(3) == theirs.logits(3)
    case = gpu.Case("s", "calimon", "probe", (600, 4000), 2, "x")
    assert case.flops(ours, 218, 18) == pytest.approx(
        flops.probe_flops(theirs, [600, 4000], 18, 218) - theirs.tokens(0, 218, 18)
        + theirs.logits(2))
    verdict = gpu.Case("s", "plain", "verdict", (600, 4000), 2, "x")
    assert verdict.flops(ours, 218, 18) == pytest.approx(
        flops.prefill_readout_flops(theirs, [600, 4000], 0))


def test_the_qwen3_4b_config_builds_the_model_its_card_describes():
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    meta = qwen3_4b()
    cfg = {k: v for k, v in meta["config"].items() if k not in ("architectures", "model_type")}
    with torch.device("meta"):  # shapes only, no memory
        model = AutoModelForCausalLM.from_config(Qwen3Config(**cfg))
    counted = sum({id(p): p.numel() for p in model.parameters()}.values())
    total, body = gpu.Shape.from_config(meta["config"]).parameters()
    assert counted == total
    assert round(total / 1e9, 1) == meta["card_parameters_b"] == 4.0
    assert round(body / 1e9, 1) == meta["card_non_embedding_parameters_b"] == 3.6
    assert model.model.embed_tokens.weight is model.lm_head.weight  # tied, as configured
    assert len(model.model.layers) == 36 and model.config.num_key_value_heads == 8


@pytest.mark.parametrize("name, peak", [
    ("NVIDIA H100 80GB HBM3", 989.5), ("NVIDIA H100 PCIe", 756.5), ("NVIDIA H100 NVL", None),
    ("NVIDIA H200", 989.5), ("NVIDIA H200 NVL", None), ("NVIDIA A100-SXM4-80GB", 312.0),
    ("NVIDIA A100 80GB PCIe", 312.0), ("NVIDIA L4", 121.0), ("NVIDIA L40S", 362.05),
    ("NVIDIA L40", None), ("NVIDIA GH200 480GB", None), ("NVIDIA GeForce RTX 4090", None),
])
def test_the_peak_table_matches_device_names_exactly(name, peak):
    got = gpu.device_peak(name)
    assert (got[1] if got else None) == peak
    if got:
        assert "nvidia.com" in got[2]  # every peak names its source


def test_padding_is_counted_over_length_sorted_batches():
    assert gpu.sorted_batches([5, 9, 7, 3], 2) == [[1, 2], [0, 3]]
    assert gpu.padding_share([4, 4, 4], 2) == 0.0
    # batches (9, 7) and (5, 3): 18 + 10 positions computed, 24 of them real
    assert gpu.padding_share([5, 9, 7, 3], 2) == pytest.approx(1 - 24 / 28)
    mixed = gpu.mixed_lengths(600, 32, 0)
    assert min(mixed) == 300 and max(mixed) == 900 and sum(mixed) / 32 == pytest.approx(600)


def test_real_lengths_are_humaneval_pairs_own_scaled():
    pool = json.loads((SCRIPT.parent / "humaneval-pairs-lengths.json").read_text())
    assert len(pool["lengths"]) == 656 and pool["truncated"] == 0
    one, four = gpu_plan.real_lengths(32, 1, 0, 218), gpu_plan.real_lengths(32, 4, 0, 218)
    assert set(one) <= set(pool["lengths"]) and len(set(one)) > 10
    assert four == tuple(4 * x for x in one)


def test_the_default_plan_fits_in_five_minutes_and_runs_nothing(capsys):
    """The estimate counts computed FLOPs (padding included) at 300 TFLOP/s: the H200 run of
    2026-11-26 did its then 42 cases (repeats 2) in 216 s of forward passes, where this count
    estimates 220 s."""
    gpu.main(["--plan"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    seconds = float(re.search(r"about (\d+) s of forward passes", last).group(1))
    assert seconds <= 240, last  # + the model build and Python overhead: under 5 minutes
    args = gpu.parse_args(["--plan"])
    cases = gpu.plan(args, gpu.Shape.from_config(qwen3_4b()["config"]))
    scales = {c.label for c in cases if c.section.startswith("real lengths")}
    assert scales == {"humaneval-pairs x1", "humaneval-pairs x4", "humaneval-pairs x16"}
    assert 16000 in {max(c.lengths) for c in cases}


def test_the_full_model_needs_a_gpu_unless_forced(monkeypatch, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit):
        gpu.parse_args([])
    assert "needs a GPU" in capsys.readouterr().err
    assert gpu.parse_args(["--device", "cpu"]).out == gpu.DEFAULT_OUT


def test_the_script_imports_only_torch_transformers_calimon_and_the_stdlib():
    roots = set()
    # the script's own modules, and benchmarks/perf/flops.py (the FLOP count it shares)
    paths = [*SCRIPT.parent.glob("*.py"), ROOT / "benchmarks" / "perf" / "flops.py"]
    siblings = {p.stem for p in paths}
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                roots |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                roots.add(node.module.split(".")[0])
    assert roots - sys.stdlib_module_names - siblings <= {"torch", "transformers", "calimon"}
    assert {"torch", "transformers", "calimon", "gpu_report", "flops"} <= roots


def test_the_gpu_scripts_import_no_circle():
    """Every import between benchmarks/gpu's modules, those under ``if TYPE_CHECKING`` too,
    goes one way: no module reaches itself again."""
    here = SCRIPT.parent
    names = {p.stem for p in here.glob("*.py")}
    graph = {}
    for path in here.glob("*.py"):
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                found.add(node.module)
        graph[path.stem] = found & names

    def reaches(start, seen):
        for nxt in graph[start]:
            if nxt not in seen:
                seen.add(nxt)
                reaches(nxt, seen)
        return seen

    assert sorted(m for m in graph if m in reaches(m, set())) == []


def test_the_levers_suite_runs_on_the_cpu_and_its_plan_fits_one_call(tmp_path, capsys):
    """The tiny run goes end to end (liger, compile and the CUDA graph need a GPU: their rows
    say so); the full plan's forward passes fit in 4 minutes at 300 TFLOP/s (the H100 run of the
    suite took 243 s in all, model build and compilations included)."""
    out = tmp_path / "levers.md"
    gpu.main(["--tiny", "--suite", "levers", "--out", str(out)])
    got = tables(out.read_text())
    assert list(got) == ["levers (verdict readout, batch 2)",
                         "levers, real lengths (humaneval-pairs, batch 2)",
                         "default batching (the fastest calimon lever)",
                         "whole-model compile, CUDA graphs, one shape bucket"]
    rows = [dict(zip(body[0], r, strict=True)) for body in got.values() for r in body[1:]]
    ran = {r["path"] for r in rows if not r["s per run (median, min-max)"].startswith("error")}
    assert {"plain", "calimon eager", "calimon varlen", "calimon"} <= ran
    assert "calimon liger" not in ran and "plain graph" not in ran  # no GPU here
    assert "calimon varlen: max |dp|" in out.read_text()
    gpu.main(["--suite", "levers", "--plan"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert float(re.search(r"about (\d+) s of forward passes", last).group(1)) <= 240, last
