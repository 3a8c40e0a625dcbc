"""HTTP backend: a scripted in-process fake server (retries, timeouts, missing logprobs, bounded
concurrency, token mapping), and a real `vllm serve` of the embedded model (marked vllm)."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from fakes_http import FakeServer

from calimon.errors import BackendError, InputError
from calimon.models import ModelConfig, ModelSource, ResolvedModel
from calimon.scoring.backends.http_backend import HTTPBackend, dense_logprobs


def completion(top: dict[str, float], sampled: str | None = None, text: str = "x"):
    sampled = sampled or max(top, key=top.get)
    return {"choices": [{"text": text, "logprobs": {
        "tokens": [sampled], "token_logprobs": [top[sampled]], "top_logprobs": [top]}}]}


OK = (200, completion({"token_id:5": -0.5, "token_id:7": -1.5}), 0.0)


class TinyTokenizer:
    """The few tokenizer methods the backend uses, over a 40-token byte-level-style vocabulary."""

    pieces = ["<|endoftext|>", "<|im_end|>", "ĠYes", "ĠNo", "Yes", "No"] + \
        [f"t{i}" for i in range(34)]
    eos_token_id = 0

    def __len__(self):
        return len(self.pieces)

    def convert_ids_to_tokens(self, ids):
        return [self.pieces[i] for i in ids]

    def convert_tokens_to_ids(self, piece):
        return self.pieces.index(piece)

    def convert_tokens_to_string(self, pieces):
        return "".join(pieces).replace("Ġ", " ")

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [self.pieces.index(p) for p in text.split()]}


@pytest.fixture(scope="module")
def tok_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("model")
    (folder / "config.json").write_text(json.dumps({"vocab_size": 48}))
    cfg = ModelConfig(version=1, name="tiny", source=ModelSource(kind="local"))
    return ResolvedModel("tiny", folder, "rev0", cfg), TinyTokenizer()


def backend(model_and_tok, url, **kw):
    kw.setdefault("backoff_s", 0.01)
    model, tok = model_and_tok
    return HTTPBackend(model, url, tokenizer=tok, **kw)


def test_dense_logprobs_keeps_returned_entries_and_spreads_the_rest():
    arr = dense_logprobs(10, {2: np.log(0.5), 4: np.log(0.3)})
    assert arr.dtype == np.float32 and arr.shape == (10,)
    assert np.exp(arr[[2, 4]]) == pytest.approx([0.5, 0.3])
    assert np.exp(np.delete(arr, [2, 4])) == pytest.approx(np.full(8, 0.2 / 8))
    assert np.exp(arr.astype(np.float64)).sum() == pytest.approx(1.0)
    full = dense_logprobs(3, {0: np.log(0.5), 1: np.log(0.5)})  # nothing left to spread
    assert np.isneginf(full[2])
    with pytest.raises(BackendError, match="outside the vocabulary"):
        dense_logprobs(10, {12: -1.0})


def test_spread_never_exceeds_the_smallest_top_k_entry():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=200) * 3
    lp = logits - np.log(np.exp(logits).sum())
    top = np.argsort(-lp)[:20]
    arr = dense_logprobs(200, {int(i): float(lp[i]) for i in top})
    assert np.delete(arr, top).max() <= lp[top].min()
    assert set(np.argsort(-arr)[:20]) == set(top.tolist())


def test_token_ids_prompt_and_answer_ids_request(tok_model):
    with FakeServer([OK]) as srv:
        be = backend(tok_model, srv.url)
        out = be.next_token_logprobs([[1, 2, 3], [4, 5]], prefix_len=1)
    assert out.shape == (2, 48)  # config.json's vocab_size, larger than the tokenizer
    assert out[0, 5] == pytest.approx(-0.5) and out[1, 7] == pytest.approx(-1.5)
    assert np.exp(out.astype(np.float64)).sum(axis=1) == pytest.approx([1.0, 1.0])
    sent = sorted(r["prompt"] for r in srv.requests)
    assert sent == [[1, 2, 3], [4, 5]]
    assert all(r["model"] == "fake-model" and r["max_tokens"] == 1 and r["logprobs"] == 20
               and r["temperature"] == 0.0 and r["logprob_token_ids"] == [2, 3, 4, 5]
               for r in srv.requests)
    assert be.forward_calls == 2


def test_top_k_mode_sends_no_token_ids(tok_model):
    with FakeServer([OK]) as srv:
        backend(tok_model, srv.url, answer_ids=False, top_logprobs=7).next_token_logprobs([[1]])
    assert "logprob_token_ids" not in srv.requests[0] and srv.requests[0]["logprobs"] == 7


def test_retries_then_succeeds_on_retryable_statuses(tok_model):
    plan = [(503, {"error": "busy"}, 0.0), (429, {"error": "slow down"}, 0.0), OK]
    with FakeServer(plan) as srv:
        be = backend(tok_model, srv.url, served_model="m", retries=3)
        out = be.next_token_logprobs([[1, 2]])
    assert len(srv.requests) == 3 and out[0, 5] == pytest.approx(-0.5)


def test_gives_up_after_retries_with_the_last_error(tok_model):
    with FakeServer([(500, {"error": "boom"}, 0.0)]) as srv:
        be = backend(tok_model, srv.url, served_model="m", retries=2)
        with pytest.raises(BackendError, match=r"after 3 attempts.*HTTP 500"):
            be.next_token_logprobs([[1, 2]])
    assert len(srv.requests) == 3


def test_client_errors_are_not_retried(tok_model):
    with FakeServer([(400, {"error": "logprobs too large"}, 0.0)]) as srv:
        be = backend(tok_model, srv.url, served_model="m", retries=3)
        with pytest.raises(BackendError, match="HTTP 400.*logprobs too large"):
            be.next_token_logprobs([[1, 2]])
    assert len(srv.requests) == 1


def test_timeout_is_retried_and_reported(tok_model):
    with FakeServer([(200, completion({"token_id:5": -0.5}), 1.0)]) as srv:
        be = backend(tok_model, srv.url, served_model="m", retries=1, timeout_s=0.2)
        start = time.perf_counter()
        with pytest.raises(BackendError, match=r"after 2 attempts.*timeout 0.2 s"):
            be.next_token_logprobs([[1, 2]])
        assert time.perf_counter() - start < 5
    assert len(srv.requests) == 2


@pytest.mark.parametrize("body", [
    {"choices": [{"text": "x", "logprobs": None}]},
    {"choices": [{"text": "x"}]},
    {"choices": [{"text": "x", "logprobs": {"tokens": ["a"], "top_logprobs": []}}]},
])
def test_a_server_without_logprobs_gives_a_clear_error(tok_model, body):
    with FakeServer([(200, body, 0.0)]) as srv:
        be = backend(tok_model, srv.url, served_model="m")
        with pytest.raises(BackendError, match="returned no logprobs"):
            be.next_token_logprobs([[1, 2]])


def test_no_choices_is_an_error(tok_model):
    with FakeServer([(200, {"object": "text_completion"}, 0.0)]) as srv:
        with pytest.raises(BackendError, match="no choices"):
            backend(tok_model, srv.url, served_model="m").next_token_logprobs([[1]])


def test_concurrency_is_bounded(tok_model):
    with FakeServer([(200, completion({"token_id:5": -0.5}), 0.15)]) as srv:
        be = backend(tok_model, srv.url, served_model="m", concurrency=2)
        be.next_token_logprobs([[i + 1] for i in range(6)])
    assert srv.max_in_flight == 2 and len(srv.requests) == 6


def test_text_tokens_are_mapped_back_to_ids(tok_model):
    be = backend(tok_model, "http://127.0.0.1:1/v1", served_model="m")
    tok = be.tokenizer
    yes, no = tok.convert_tokens_to_ids("ĠYes"), tok.convert_tokens_to_ids("ĠNo")
    assert (yes, no) == (2, 3)
    with FakeServer([(200, completion({" Yes": -0.2, " No": -1.8}), 0.0)]) as srv:
        be.base_url = srv.url
        out = be.next_token_logprobs([[1, 2]])
    assert out[0, yes] == pytest.approx(-0.2) and out[0, no] == pytest.approx(-1.8)


def test_generate_returns_ids_cut_at_end_of_turn(tok_model):
    be = backend(tok_model, "http://127.0.0.1:1/v1", served_model="m")
    end = be.tokenizer.convert_tokens_to_ids("<|im_end|>")

    def body(payload):
        toks = ["token_id:10", "token_id:11", f"token_id:{end}"]
        return {"choices": [{"text": "ab", "logprobs": {
            "tokens": toks, "token_logprobs": [-0.1] * 3, "top_logprobs": None}}]}

    with FakeServer([(200, body, 0.0)]) as srv:
        be.base_url = srv.url
        assert be.generate([[1, 2], [3]], max_new_tokens=5) == [[10, 11], [10, 11]]
    assert all(r["max_tokens"] == 5 and r["logprobs"] == 0 for r in srv.requests)


def test_bad_base_url_and_k_are_input_errors(tok_model):
    with pytest.raises(InputError, match="base_url"):
        backend(tok_model, "localhost:8000", served_model="m").next_token_logprobs([[1]])
    with pytest.raises(InputError, match="top_logprobs"):
        backend(tok_model, "http://127.0.0.1:1/v1", served_model="m",
                top_logprobs=0).next_token_logprobs([[1]])


def test_unreachable_server_names_the_url(tok_model):
    be = backend(tok_model, "http://127.0.0.1:9/v1", served_model="m", retries=1)
    with pytest.raises(BackendError, match=r"127.0.0.1:9/v1/completions failed after 2"):
        be.next_token_logprobs([[1]])


# -- a real server: `vllm serve` of the embedded model on loopback (conftest.py) ----------

@pytest.mark.vllm
@pytest.mark.model
def test_real_server_gives_exact_answer_logprobs_and_generates(smol, vllm_server):
    from conftest import toy_samples

    from calimon.numerics.readouts import answer_token_ids
    from calimon.prompts import load_prompt
    from calimon.scoring.monitor import Monitor

    be = HTTPBackend(smol, vllm_server, concurrency=4)
    mon = Monitor(be, load_prompt("direct"), "verdict")
    verdicts = mon.score(toy_samples(2))
    assert [v.status for v in verdicts] == ["ok"] * 4
    assert all(v.p_yes + v.p_no + v.format_mass == pytest.approx(1.0, abs=1e-5)
               for v in verdicts)
    prompts = [mon.encoder.encode(s.request, s.response).ids for s in toy_samples(1)]
    exact = be.next_token_logprobs(prompts)
    pos, neg = answer_token_ids(be.tokenizer, "verdict")
    assert np.isfinite(exact[:, np.concatenate([pos, neg])]).all()
    be.answer_ids = False
    top = be.next_token_logprobs(prompts)
    answers = np.concatenate([pos, neg])
    assert np.exp(top.astype(np.float64)).sum(axis=1) == pytest.approx([1.0, 1.0], abs=1e-5)
    assert (top.max(axis=1) >= exact[:, answers].max(axis=1) - 1e-4).all()
    out = be.generate(prompts, max_new_tokens=8)
    assert len(out) == 2 and all(0 < len(x) <= 8 for x in out)


@pytest.mark.vllm
@pytest.mark.model
def test_real_server_refusal_is_a_clear_unretried_error(smol, vllm_server):
    be = HTTPBackend(smol, vllm_server, answer_ids=False, top_logprobs=500, retries=3)
    with pytest.raises(BackendError, match="HTTP 400"):
        be.next_token_logprobs([[1, 2, 3]])
    assert be.forward_calls == 0
