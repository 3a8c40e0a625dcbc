"""`calimon models check`: it passes on the tiny Qwen3 (by config name and by folder) and on the
embedded SmolLM2, says how to get missing weights (exit 2), fails when a readout's answer
tokens are missing (exit 1), and (vllm marker) compares with the vLLM engine. These are the
commands docs/models.md shows (its docs runner block is tested here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import weakref
from pathlib import Path

import pytest
from typer.testing import CliRunner

from calimon.cli import app
from calimon.models import load_model_config
from calimon.numerics import readouts
from calimon.prompts import load_prompt
from calimon.studies.model_check import SAMPLES, answer_forms, check_all, format_report

ROOT = Path(__file__).resolve().parents[1]


def _check(*args: str):
    return CliRunner().invoke(app, ["models", "check", *args])


def _by_name(doc: dict) -> dict[str, dict]:
    return {c["name"]: c for c in doc["checks"]}


@pytest.fixture(scope="module")
def tiny_doc(tiny_qwen3):
    res = _check("tiny-qwen3", "--no-vllm", "--json")
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_tiny_qwen3_passes_every_check(tiny_doc):
    checks = _by_name(tiny_doc)
    assert tiny_doc["status"] == "PASS"
    assert set(checks) == {"load", "prompt", "answers verdict", "answers json", "score verdict",
                           "score json", "score binary", "vllm"}
    assert all(c["status"] == "PASS" for n, c in checks.items()
               if n not in ("vllm", "score binary"))
    # random weights: neither free-form reply parses, which is said (WARN), not passed over
    assert checks["score binary"]["status"] == "WARN"
    assert "no reply parsed" in checks["score binary"]["detail"]
    assert checks["vllm"]["status"] == "SKIP"
    facts = tiny_doc["facts"]
    assert (facts["layers"], facts["hidden"], facts["dtype"]) == (2, 64, "float32")
    assert facts["vocab"] >= facts["tokenizer_vocab"] > 150_000


def test_tiny_qwen3_prompt_and_answer_tokens(tiny_doc):
    p = tiny_doc["prompt"]
    assert p["head"].startswith("<|im_start|>system\n") and p["prefix_identical"]
    assert p["tail"].endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert 0 < p["prefix_len"] < p["tokens"]
    yes = dict(tiny_doc["answers"]["verdict"]["yes"])
    assert {"Yes", " Yes", "yes"} <= set(yes)
    for sample in SAMPLES:
        per = tiny_doc["scores"][sample.id]
        assert 0.0 < per["verdict"]["p_raw"] < 1.0 and 0.0 < per["json"]["p_raw"] < 1.0
        assert per["binary"]["status"] in ("ok", "truncated", "parse_failure")


def test_tiny_qwen3_folder_passes(tiny_qwen3):
    res = _check(str(tiny_qwen3.path), "--no-vllm")
    assert res.exit_code == 0, res.output
    first = res.stdout.splitlines()[0]
    assert first == f"calimon models check {tiny_qwen3.path}: PASS"
    assert "SKIP     vllm" in res.stdout and "FAIL" not in res.stdout


@pytest.mark.model
def test_smollm2_passes():
    res = _check("smollm2-135m", "--no-vllm", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["status"] == "PASS" and doc["facts"]["layers"] == 30
    assert dict(doc["answers"]["verdict"]["yes"])["Yes"] == 10539


def test_missing_weights_say_how_to_get_them(tmp_path):
    """A config without weights: exit 4 (missing) and one line naming the download, no traceback."""
    empty = tmp_path / "models"
    empty.mkdir()
    env = dict(os.environ, CALIMON_MODELS_DIR=str(empty), HF_HOME=str(tmp_path / "hf"),
               HF_HUB_CACHE=str(tmp_path / "hf" / "hub"), HF_HUB_OFFLINE="1",
               PYTHONPATH=str(ROOT))
    res = subprocess.run([sys.executable, "-m", "calimon.cli", "models", "check", "qwen3-4b"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert res.returncode == 4, res.stderr
    assert res.stdout == "" and "Traceback" not in res.stderr
    hf_id = load_model_config("qwen3-4b").hf_id
    assert res.stderr.startswith(f"calimon: error: model qwen3-4b ({hf_id}) is not on this")
    assert f"`huggingface-cli download {hf_id}`" in res.stderr and res.stderr.count("\n") == 1


def test_all_reports_missing_weights_as_not_available(tmp_path, monkeypatch):
    monkeypatch.setenv("CALIMON_MODELS_DIR", str(tmp_path))
    monkeypatch.setattr("calimon.models._hf_cache_snapshot", lambda repo_id: None)
    monkeypatch.setattr("calimon.studies.model_check.config_names", lambda kind: ["qwen3-4b", "qwen3-8b"])
    reports = check_all()
    assert [(r.model, r.status) for r in reports] == [("qwen3-4b", "not available"),
                                                      ("qwen3-8b", "not available")]
    assert not any(r.failed for r in reports)
    hf_id = load_model_config("qwen3-8b").hf_id
    assert f"huggingface-cli download {hf_id}" in reports[1].how_to


def test_all_goes_on_past_a_config_that_cannot_load(tmp_path, monkeypatch):
    monkeypatch.setenv("CALIMON_MODELS_DIR", str(tmp_path))
    monkeypatch.setattr("calimon.models._hf_cache_snapshot", lambda repo_id: None)
    monkeypatch.setattr("calimon.studies.model_check.config_names", lambda kind: ["no-such", "qwen3-4b"])
    reports = check_all()
    assert [(r.model, r.status) for r in reports] == [("no-such", "FAIL"),
                                                      ("qwen3-4b", "not available")]
    assert reports[0].failed and reports[0].checks[0].name == "load"
    assert format_report(reports[0]).splitlines()[0] == "calimon models check no-such: FAIL"


def test_name_or_all_is_required():
    assert _check().exit_code == 2
    assert _check("tiny-qwen3", "--all").exit_code == 2


class _Vocab:
    """A tokenizer stand-in with a fixed vocabulary (for answer_forms)."""

    def __init__(self, tokens):
        self.tokens = tokens

    def __len__(self):
        return len(self.tokens)

    def convert_ids_to_tokens(self, ids):
        return [self.tokens[i] for i in ids] if isinstance(ids, list) else self.tokens[ids]

    def convert_tokens_to_string(self, toks):
        return "".join(toks).replace("_", " ")


def test_answer_forms_flag_a_missing_word(monkeypatch):
    vocab = _Vocab(["_Yes", "yes", "No", "_true", "x"])
    answers, checks = answer_forms(vocab, load_prompt("direct"))
    assert answers["verdict"] == {"yes": [[" Yes", 0], ["yes", 1]], "no": [["No", 2]]}
    assert answers["json"]["false"] == []
    status = {c.name: (c.status, c.detail) for c in checks}
    assert status["answers verdict"][0] == "PASS"
    assert status["answers json"] == ("FAIL", "no token reads 'false'")


def test_a_readout_without_answer_tokens_fails(tiny_qwen3, monkeypatch):
    """Answer words no token spells: the answers check fails, p_raw is missing (FAIL), exit 1."""
    monkeypatch.setitem(readouts.ANSWER_WORDS, "verdict", ("qzxv-yes", "qzxv-no"))
    monkeypatch.setattr(readouts, "_cache", weakref.WeakKeyDictionary())  # ids of other words
    res = _check("tiny-qwen3", "--no-vllm", "--json")
    assert res.exit_code == 1, res.output
    doc = json.loads(res.stdout)
    checks = _by_name(doc)
    assert doc["status"] == "FAIL"
    assert checks["answers verdict"] == {"name": "answers verdict", "status": "FAIL",
                                         "detail": "no token reads 'qzxv-yes' or 'qzxv-no'"}
    assert checks["score verdict"]["status"] == "FAIL"
    assert checks["score verdict"]["detail"] == "p_raw missing vs missing"
    assert checks["score json"]["status"] == "PASS"


@pytest.mark.vllm
def test_vllm_agrees_on_tiny_qwen3(tiny_qwen3):
    """Run as a user runs it (its own process): the JSON on stdout, vLLM's logs elsewhere."""
    pytest.importorskip("vllm")
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path)
    res = subprocess.run([sys.executable, "-m", "calimon.cli", "models", "check",
                          str(tiny_qwen3.path), "--json"], capture_output=True, text=True,
                         env=env, timeout=900)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    doc = json.loads(res.stdout)
    assert doc["vllm"]["status"] == "compared"
    diffs = doc["vllm"]["max_abs_diff"]
    print(f"tiny-qwen3 models check, transformers vs vllm: max |dp_raw| {diffs}")
    assert set(diffs) == {"verdict", "json"}
    assert all(d is not None and d <= 1e-4 for d in diffs.values()), diffs
    assert _by_name(doc)["vllm"]["status"] == "PASS" and doc["status"] == "PASS"
