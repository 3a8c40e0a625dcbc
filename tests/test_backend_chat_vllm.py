"""The chat backend against a real `vllm serve` of the embedded model: its verdict and json
readings agree with the transformers backend's, the sampled readout runs (seeded), and a curve
on the API gives the transformers backend's operating points and asks nothing the second time.

Why the readings differ at all: the API returns the top 20 log-probabilities only, so an answer
surface form outside the top 20 (a rare casing such as " YES") is counted as format mass instead
of answer mass. The server renders the chat template and tokenizes itself, but to the same ids
(checked through vLLM's /tokenize on the benchmark's samples). TOLERANCE bounds the difference
to the full-vocabulary reading (on the demo set: at most 7.9e-3, median 4e-4,
benchmarks/results/chat.md); the same reading restricted to the transformers backend's own top 20
agrees within NUMERIC (fp32 kernels), which shows truncation is the whole difference.
"""

from __future__ import annotations

import json

import pytest
from conftest import toy_samples

from calimon.models import describe_api_model
from calimon.prompts import load_prompt
from calimon.scoring.backends.chat_backend import ChatBackend
from calimon.scoring.monitor import Monitor

pytestmark = [pytest.mark.vllm, pytest.mark.model]

TOLERANCE = 1e-2
NUMERIC = 1e-4


def chat(url, tmp_path, **kw):
    return ChatBackend(describe_api_model("smollm2-135m"), url,
                       journal_path=str(tmp_path / "journal.sqlite"), **kw)


@pytest.mark.parametrize("prompt, readout", [("direct", "verdict"), ("evidence", "json")])
def test_chat_api_agrees_with_transformers(smol_backend, vllm_server, tmp_path,
                                           prompt, readout):
    samples = toy_samples(3)
    template = load_prompt(prompt)
    ref = Monitor(smol_backend, template, readout).score(samples)
    be = chat(vllm_server, tmp_path, prefill="continue_final_message")
    got = Monitor(be, template, readout).score(samples)
    assert [v.status for v in got] == [v.status for v in ref] == ["ok"] * len(samples)
    diff = max(abs(a.p_raw - b.p_raw) for a, b in zip(ref, got, strict=True))
    mass = max(abs(a.format_mass - b.format_mass) for a, b in zip(ref, got, strict=True))
    print(f"{prompt}/{readout} transformers vs chat API: max |dp_raw| {diff:.2e}, "
          f"max |d format_mass| {mass:.2e}")
    assert diff <= TOLERANCE and mass <= TOLERANCE
    assert be.usage["requests"] == len(samples) and be.usage["prompt_tokens"] > 0
    top20 = _top20_readings(smol_backend, template, readout, samples)
    numeric = max(abs(a - b.p_raw) for a, b in zip(top20, got, strict=True))
    print(f"  restricted to the transformers top 20: max |dp_raw| {numeric:.2e}")
    assert numeric <= NUMERIC


def _top20_readings(backend, template, readout, samples) -> list[float]:
    """p_raw from the transformers backend's own top-20 tokens, read as token strings the way
    the chat backend reads an API's top_logprobs."""
    import numpy as np

    from calimon.numerics.readouts import read_top_strings

    mon = Monitor(backend, template, readout)
    encoded = [mon.encoder.encode(s.request, s.response).ids for s in samples]
    logprobs = backend.next_token_logprobs(encoded, mon.encoder.prefix_len)
    tok = backend.tokenizer
    out = []
    for row in logprobs:
        ids = np.argsort(row)[::-1][:20]
        top = [(tok.decode([int(i)]), float(row[i])) for i in ids]
        out.append(read_top_strings(top, readout)[0])
    return out


def test_sampled_and_verbal_run_on_the_api_and_sampling_is_seeded(vllm_server,
                                                                  tmp_path):
    samples = toy_samples(1)
    template = load_prompt("direct")
    runs = [Monitor(chat(vllm_server, tmp_path, journal=False), template, "sampled"
                    ).score(samples) for _ in range(2)]
    for v in runs[0]:
        assert v.extra["samples"] == 10 and v.extra["yes"] + v.extra["no"] + \
            v.extra["unparsed"] == 10
        assert v.status == "parse_failure" or v.p_raw in {i / 10 for i in range(11)} or \
            v.extra["unparsed"] > 0
    assert [v.extra["answers"] for v in runs[0]] == [v.extra["answers"] for v in runs[1]]
    verbal = Monitor(chat(vllm_server, tmp_path), template, "verbal").score(samples)
    assert all(v.status in ("ok", "parse_failure") and v.text is not None for v in verbal)
    assert all(v.p_raw is None or 0 <= v.p_raw <= 1 for v in verbal)


def test_curve_on_the_api_matches_the_transformers_operating_points(vllm_server,
                                                                    tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from calimon.cli import app

    monkeypatch.setenv("CALIMON_API_JOURNAL", str(tmp_path / "journal.sqlite"))
    # both backends must agree whichever way the verdict ranks these samples: a map fitted
    # decreasing is kept (--allow-inverted), on both sides alike
    common = ["curve", "--limit", "40", "--no-binary", "--n-boot", "20", "--quiet",
              "--allow-inverted", "--store", str(tmp_path / "store.sqlite")]
    chat_args = ["--backend", "chat", "--base-url", vllm_server, "--served-model",
                 "smollm2-135m"]
    runs = {}
    for name, extra in [("transformers", []), ("chat", chat_args), ("again", chat_args)]:
        res = CliRunner().invoke(app, [*common, *extra, "--out", str(tmp_path / name)])
        assert res.exit_code == 0, res.output
        runs[name] = json.loads((tmp_path / name / "curve.json").read_text())
    scored = runs["transformers"]["timing"]["scored"]
    assert runs["chat"]["timing"]["api_usage"]["requests"] == scored > 30
    assert runs["again"]["timing"]["api_usage"]["requests"] == 0
    ref, got = runs["transformers"]["operating_points"], runs["chat"]["operating_points"]
    assert [p["name"] for p in ref] == [p["name"] for p in got]
    for a, b in zip(ref, got, strict=True):
        print(f"{a['name']}: transformers {_point(a)}; chat API {_point(b)}")
        assert (a["threshold"] is None) == (b["threshold"] is None)
        if a["threshold"] is not None:
            assert a["threshold"] == pytest.approx(b["threshold"], abs=TOLERANCE)
            assert (a["far"], a["mr"]) == pytest.approx((b["far"], b["mr"]), abs=1e-9)


def _point(p: dict) -> str:
    if p["threshold"] is None:
        return "no threshold"
    return f"threshold {p['threshold']:.5f}, FAR {p['far']:.4f}, MR {p['mr']:.4f}"
