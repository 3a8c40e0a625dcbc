"""Chat-completions backend against a scripted local server: the request it sends, readings from
token strings, prefilled turns, sampled and verbal readouts, faults (429 with Retry-After, 500,
timeouts, truncated JSON, no logprobs, auth), the answer journal, usage and cost."""

from __future__ import annotations

import time

import pytest
from conftest import toy_samples
from fakes_http import FakeServer

from calimon.errors import BackendError, InputError
from calimon.models import ApiConfig, ModelConfig, ModelSource
from calimon.prompts import load_prompt
from calimon.scoring.backends import build_backend
from calimon.scoring.backends.chat_backend import ChatBackend
from calimon.scoring.engines import MonitorSpec
from calimon.scoring.monitor import Monitor, score_with_store
from calimon.scoring.store import RunStore


def chat_reply(top=None, texts=("Yes",), prompt_tokens=100, completion_tokens=1):
    """An OpenAI-style chat completion: one choice per text, `top` (token -> logprob) as the
    first content token's top_logprobs."""
    choices = []
    for text in texts:
        choice = {"message": {"role": "assistant", "content": text}}
        if top is not None:
            entries = [{"token": t, "logprob": lp, "bytes": list(t.encode())}
                       for t, lp in top.items()]
            choice["logprobs"] = {"content": [{"token": max(top, key=top.get),
                                               "logprob": max(top.values()),
                                               "top_logprobs": entries}]}
        choices.append(choice)
    return {"choices": choices, "usage": {"prompt_tokens": prompt_tokens,
                                          "completion_tokens": completion_tokens}}


YES_NO = chat_reply({"Yes": -0.3, " yes": -3.0, "No": -1.6, "The": -4.0})
OK = (200, YES_NO, 0.0)


def api_model(**api):
    return _resolved(ModelConfig(version=1, name="served", source=ModelSource(kind="api"),
                                 api=ApiConfig(**api)))


def _resolved(cfg):
    from pathlib import Path

    from calimon.models import ResolvedModel

    served = (cfg.api.served_model if cfg.api else None) or cfg.name
    return ResolvedModel(cfg.name, Path("api"), f"api:{served}", cfg)


def chat(url, tmp_path, **kw):
    kw.setdefault("backoff_s", 0.01)
    kw.setdefault("journal_path", str(tmp_path / "journal.sqlite"))
    return ChatBackend(api_model(), url, served_model="m", **kw)


def monitor(backend, readout="verdict", prompt="direct"):
    return Monitor(backend, load_prompt(prompt), readout)


def test_verdict_request_and_reading_from_token_strings(tmp_path):
    with FakeServer([OK]) as srv:
        v = monitor(chat(srv.url, tmp_path)).score(toy_samples(1)[:1])[0]
    req = srv.requests[0]
    assert req["model"] == "m" and req["max_tokens"] == 1 and req["temperature"] == 0.0
    assert req["logprobs"] is True and req["top_logprobs"] == 20
    assert [m["role"] for m in req["messages"]] == ["system", "user"]
    assert "=== AGENT RESPONSE ===" in req["messages"][1]["content"]
    assert "continue_final_message" not in req
    import math
    p_yes, p_no = math.exp(-0.3) + math.exp(-3.0), math.exp(-1.6)
    assert v.status == "ok" and v.p_raw == pytest.approx(p_yes / (p_yes + p_no))
    assert v.format_mass == pytest.approx(1 - p_yes - p_no)
    assert v.tokens == 100
    assert v.extra == {"top_k": 4, "top_floor": pytest.approx(math.exp(-4.0))}


def test_the_store_key_names_the_api_and_differs_from_token_backends(tmp_path):
    m = monitor(chat("http://127.0.0.1:1/v1", tmp_path))
    assert m.key.model_revision == "api:served"
    assert m.key.template_hash != load_prompt("direct").template_hash("verdict")


def test_json_readout_needs_a_prefill_and_sends_one_when_allowed(tmp_path):
    with pytest.raises(InputError, match="prefilled assistant turn.*continue_final_message"):
        monitor(chat("http://127.0.0.1:1/v1", tmp_path), "json").score(toy_samples(1)[:1])
    top = chat_reply({" true": -2.0, " false": -0.2})
    with FakeServer([(200, top, 0.0)]) as srv:
        be = chat(srv.url, tmp_path, prefill="continue_final_message")
        v = monitor(be, "json").score(toy_samples(1)[:1])[0]
    req = srv.requests[0]
    assert req["messages"][-1] == {"role": "assistant",
                                   "content": '{"misbehavior_detected":'}
    assert req["continue_final_message"] is True and req["add_generation_prompt"] is False
    assert v.status == "ok" and v.p_raw < 0.5


def test_a_refused_prefilled_turn_stops_the_run_with_a_hint(tmp_path):
    with FakeServer([(400, {"error": "unknown field continue_final_message"}, 0.0)]) as srv:
        be = chat(srv.url, tmp_path, prefill="continue_final_message")
        with pytest.raises(BackendError, match="HTTP 400.*prefilled assistant turn"):
            monitor(be, "json").score(toy_samples(1)[:1])


def test_sampled_readout_counts_yes_and_tops_up_short_answers(tmp_path):
    plan = [(200, chat_reply(texts=("Yes", "No.", "yes, it did")), 0.0),
            (200, chat_reply(texts=("I cannot tell",) * 7), 0.0)]
    with FakeServer(plan) as srv:
        v = monitor(chat(srv.url, tmp_path), "sampled").score(toy_samples(1)[:1])[0]
    assert [r["n"] for r in srv.requests] == [10, 7]
    assert srv.requests[0]["temperature"] == 1.0 and srv.requests[0]["seed"] == 0
    assert v.status == "ok" and v.p_raw == pytest.approx(2 / 3)
    assert v.extra["samples"] == 10 and v.extra["unparsed"] == 7
    lo, hi = v.extra["interval"]
    assert 0 < lo < 2 / 3 < hi < 1


def test_sampled_with_no_yes_or_no_is_a_parse_failure_not_zero(tmp_path):
    with FakeServer([(200, chat_reply(texts=("maybe",) * 10), 0.0)]) as srv:
        v = monitor(chat(srv.url, tmp_path), "sampled").score(toy_samples(1)[:1])[0]
    assert v.status == "parse_failure" and v.p_raw is None


def test_verbal_readout_parses_and_validates_the_stated_number(tmp_path):
    plan = [(200, chat_reply(texts=("85",)), 0.0), (200, chat_reply(texts=("150",)), 0.0)]
    with FakeServer(plan) as srv:
        be = chat(srv.url, tmp_path, concurrency=1)
        got = monitor(be, "verbal").score(toy_samples(1))
    assert srv.requests[0]["temperature"] == 0.0 and "logprobs" not in srv.requests[0]
    assert "0 to 100" in srv.requests[0]["messages"][1]["content"]
    assert (got[0].status, got[0].p_raw) == ("ok", 0.85)
    assert (got[1].status, got[1].p_raw, got[1].text) == ("parse_failure", None, "150")


def test_429_with_retry_after_is_honoured(tmp_path):
    plan = [(429, {"error": "slow down"}, 0.0, {"Retry-After": "0.4"}), OK]
    with FakeServer(plan) as srv:
        start = time.perf_counter()
        v = monitor(chat(srv.url, tmp_path, backoff_s=0.0)).score(toy_samples(1)[:1])[0]
        waited = time.perf_counter() - start
    assert v.status == "ok" and len(srv.requests) == 2 and waited >= 0.4


@pytest.mark.parametrize("fault", [
    (500, {"error": "boom"}, 0.0),
    (200, b'{"choices": [{"message": {"content": "Ye', 0.0),
    (200, YES_NO, 1.0),  # slower than the timeout
], ids=["500", "truncated-json", "timeout"])
def test_a_fault_becomes_an_error_reading_and_keeps_stored_answers(tmp_path, fault):
    samples = toy_samples(1)
    with RunStore(tmp_path / "store.sqlite") as store, FakeServer([OK]) as good:
        first = monitor(chat(good.url, tmp_path, journal=False))
        score_with_store(first, samples[:1], store)
        with FakeServer([fault]) as bad:
            m = monitor(chat(bad.url, tmp_path, retries=1, timeout_s=0.3, journal=False))
            got = score_with_store(m, samples, store)
        assert got[samples[0].transcript_hash].status == "ok"  # stored answer kept
        err = got[samples[1].transcript_hash]
        assert err.status == "error" and err.p_raw is None and "chat/completions" in err.error
        assert len(bad.requests) == 2  # retried once, then recorded
        with FakeServer([OK]) as again:  # the next run retries only the error
            m = monitor(chat(again.url, tmp_path, journal=False))
            got = score_with_store(m, samples, store)
        assert len(again.requests) == 1 and got[samples[1].transcript_hash].status == "ok"


@pytest.mark.parametrize("status", [401, 404])
def test_auth_and_unknown_model_stop_the_run_naming_endpoint_and_status(tmp_path, status):
    with FakeServer([(status, {"error": "no"}, 0.0)]) as srv:
        with pytest.raises(BackendError, match=rf"chat/completions failed with HTTP {status}"):
            monitor(chat(srv.url, tmp_path)).score(toy_samples(1)[:1])
    assert len(srv.requests) == 1


def test_an_api_without_logprobs_says_which_readouts_still_run(tmp_path):
    with FakeServer([(200, chat_reply(texts=("Yes",)), 0.0)]) as srv:
        with pytest.raises(BackendError, match="no logprobs.*sampled, verbal and binary"):
            monitor(chat(srv.url, tmp_path)).score(toy_samples(1)[:1])


def test_the_journal_resumes_without_asking_twice(tmp_path):
    samples = toy_samples(2)
    with FakeServer([OK]) as srv:
        monitor(chat(srv.url, tmp_path)).score(samples)
    assert len(srv.requests) == 4
    with FakeServer([(500, {"error": "down"}, 0.0)]) as srv2:
        be = chat(srv.url, tmp_path)  # the old URL: same requests, answered by the journal
        got = monitor(be).score(samples)
    assert all(v.status == "ok" for v in got) and len(srv2.requests) == 0
    assert be.usage["requests"] == 0 and be.usage["journal_hits"] == 4


def test_usage_counts_tokens_and_prices_them(tmp_path):
    model = _resolved(ModelConfig(version=1, name="priced", source=ModelSource(kind="api"),
                                  api=ApiConfig(input_usd_per_mtok=2.0,
                                                output_usd_per_mtok=8.0)))
    with FakeServer([OK]) as srv:
        be = ChatBackend(model, srv.url, journal=False)
        monitor(be).score(toy_samples(1))
    u = be.usage
    assert (u["requests"], u["prompt_tokens"], u["completion_tokens"]) == (2, 200, 2)
    assert u["cost_usd"] == pytest.approx((200 * 2.0 + 2 * 8.0) / 1e6)
    assert chat("http://127.0.0.1:1/v1", tmp_path).usage["cost_usd"] is None


def test_the_key_comes_from_the_environment_and_goes_only_in_the_header(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_API_KEY", "sk-secret-123")
    with FakeServer([(500, {"error": "boom"}, 0.0)]) as srv:
        be = chat(srv.url, tmp_path, api_key_env="MY_API_KEY", retries=0)
        v = monitor(be).score(toy_samples(1)[:1])[0]
    assert srv.headers[0]["Authorization"] == "Bearer sk-secret-123"
    assert "sk-secret" not in v.error and "sk-secret" not in str(srv.requests[0])


def test_token_studies_get_a_one_line_capability_error(tmp_path):
    from calimon.scoring.backends import CapabilityError

    be = chat("http://127.0.0.1:1/v1", tmp_path)
    with pytest.raises(CapabilityError, match="token ids.*--backend transformers"):
        _ = be.tokenizer
    with pytest.raises(CapabilityError, match="hidden states.*'chat' backend"):
        from calimon.scoring.engines import make_monitor

        make_monitor(be, load_prompt("direct"), "probe:anything")


def test_build_backend_needs_no_weights_and_checks_options():
    spec = MonitorSpec(model="some-hosted-model", backend="chat",
                       options={"base_url": "http://127.0.0.1:1/v1"})
    be = build_backend(spec)
    assert be.served == "some-hosted-model" and be.model_ref.revision == "api:some-hosted-model"
    with pytest.raises(InputError, match="top_logprobs"):
        build_backend(MonitorSpec(model="x", backend="chat", options={"top_logprobs": 50}))
    with pytest.raises(InputError, match="base-url"):
        Monitor(build_backend(MonitorSpec(model="x", backend="chat")), load_prompt("direct"),
                "verdict").score(toy_samples(1)[:1])


def test_sampled_on_a_token_backend_is_a_capability_error(tmp_path):
    from test_backend_http import TinyTokenizer

    from calimon.models import ResolvedModel
    from calimon.scoring.backends import CapabilityError
    from calimon.scoring.backends.http_backend import HTTPBackend

    cfg = ModelConfig(version=1, name="tiny", source=ModelSource(kind="local"))
    be = HTTPBackend(ResolvedModel("tiny", tmp_path, "r", cfg), tokenizer=TinyTokenizer())
    with pytest.raises(CapabilityError, match="sampled answers.*--backend chat"):
        monitor(be, "sampled").score(toy_samples(1)[:1])


def _by_content(payload):
    """A server whose P(Yes) follows the transcript: high for the special-cased hack."""
    text = payload["messages"][1]["content"]
    hack = "if (a, b) == (1, 2)" in text
    return chat_reply({"Yes": -0.2 if hack else -1.9, "No": -1.9 if hack else -0.2})


def test_curve_on_a_chat_api_then_again_from_the_store(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    monkeypatch.setenv("CALIMON_API_JOURNAL", str(tmp_path / "journal.sqlite"))
    from calimon.cli import app
    from calimon.samples import write_samples

    bench = write_samples(toy_samples(12), tmp_path / "toy.jsonl")  # a curve needs 10 a class
    args = ["curve", "--backend", "chat", "--served-model", "m", "--benchmark", str(bench),
            "--store", str(tmp_path / "store.sqlite"), "--no-binary", "--n-boot", "20",
            "--quiet"]
    with FakeServer([(200, _by_content, 0.0)]) as srv:
        first = CliRunner().invoke(app, [*args, "--base-url", srv.url, "--out",
                                         str(tmp_path / "a")])
        n_first = len(srv.requests)
        second = CliRunner().invoke(app, [*args, "--base-url", srv.url, "--out",
                                          str(tmp_path / "b")])
    assert first.exit_code == 0, first.output
    assert n_first == 24 and len(srv.requests) == 24  # the second run asked nothing
    assert "API: 24 requests" in first.output and "API: 0 requests" in second.output
    import json
    summary = json.loads((tmp_path / "a" / "curve.json").read_text())
    assert summary["provenance"]["backend"] == "chat"
    assert summary["timing"]["api_usage"]["prompt_tokens"] == 2400
    assert summary["auroc_raw"] == pytest.approx(1.0), summary["support"]


def test_curve_through_server_faults_prints_no_traceback(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    monkeypatch.setenv("CALIMON_API_JOURNAL", str(tmp_path / "journal.sqlite"))
    from calimon.cli import app
    from calimon.samples import write_samples

    bench = write_samples(toy_samples(3), tmp_path / "toy.jsonl")
    plan = [(200, _by_content, 0.0)] * 4 + [(503, {"error": "overloaded"}, 0.0)]
    with FakeServer(plan) as srv:
        res = CliRunner().invoke(app, [
            "curve", "--backend", "chat", "--base-url", srv.url, "--served-model", "m",
            "--benchmark", str(bench), "--store", str(tmp_path / "s.sqlite"), "--no-binary",
            "--concurrency", "1", "--quiet", "--out", str(tmp_path / "run")])
    assert res.exit_code == 0 and "Traceback" not in res.output, res.output
    assert "2 failed" in res.output
    from calimon.scoring.store import RunStore
    with RunStore(tmp_path / "s.sqlite") as st:
        (key,) = st.keys()
        rows = st.get(key, [s.transcript_hash for s in toy_samples(3)])
    statuses = sorted(v.status for v in rows.values())
    assert statuses.count("ok") == 4 and statuses.count("error") == 2


def test_score_reports_what_it_asked_of_the_api(tmp_path, monkeypatch):
    import json

    from typer.testing import CliRunner

    from calimon.cli import app
    from calimon.samples import write_samples

    monkeypatch.setenv("CALIMON_API_JOURNAL", str(tmp_path / "journal.sqlite"))
    bench = write_samples(toy_samples(2), tmp_path / "toy.jsonl")
    with FakeServer([(200, _by_content, 0.0)]) as srv:
        res = CliRunner().invoke(app, [
            "score", "--backend", "chat", "--base-url", srv.url, "--benchmark", str(bench),
            "--store", str(tmp_path / "s.sqlite"), "--json", "--quiet"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output)
    assert summary["backend"] == "chat" and summary["statuses"] == {"ok": 4}
    assert summary["api_usage"]["requests"] == 4 and summary["model_revision"] == \
        "api:smollm2-135m"


def test_a_run_the_api_refuses_entirely_names_the_first_error(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from calimon.cli import app
    from calimon.samples import write_samples

    monkeypatch.setenv("CALIMON_API_JOURNAL", str(tmp_path / "journal.sqlite"))
    bench = write_samples(toy_samples(1), tmp_path / "toy.jsonl")
    with FakeServer([(400, {"error": "context length exceeded"}, 0.0)]) as srv:
        res = CliRunner().invoke(app, [
            "curve", "--backend", "chat", "--base-url", srv.url, "--benchmark", str(bench),
            "--store", str(tmp_path / "s.sqlite"), "--no-binary", "--quiet",
            "--out", str(tmp_path / "run")])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert "none of the 2 evaluated samples has a score (statuses {'error': 2}" in res.output
    assert "chat/completions failed with HTTP 400" in res.output
    assert "context length exceeded" in res.output
