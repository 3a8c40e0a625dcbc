"""The window truncation policy (calimon.scoring.windows): overlapping windows cover a long response,
each fits the input limit, their readings aggregate (max by default) into one per transcript,
probe spans shift back into the whole response, the store key and curve.json record it."""

import pytest

from calimon.errors import ConfigError
from calimon.prompts import PromptEncoder, load_prompt
from calimon.samples import Sample
from calimon.scoring.store import MonitorKey
from calimon.scoring.windows import (
    WindowedMonitor,
    WindowPolicy,
    parse_truncation,
    truncation_record,
    window_spans,
)
from calimon.verdict import Verdict

LIMIT = 420


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from calimon.models import resolve_model

    return AutoTokenizer.from_pretrained(str(resolve_model("smollm2-135m").path))


class _Marked:
    """A stand-in monitor: p_raw 0.9 when the response tokens it reads hold 'MARK' (a span
    on it), else 0.1 + a little per character so windows are told apart."""

    readout = "verdict"

    def __init__(self, tokenizer):
        self.encoder = PromptEncoder(tokenizer, load_prompt("direct"), "verdict", LIMIT)
        self.key = MonitorKey("m", "r", "direct", "abcd", "verdict")
        self.seen: list[Sample] = []

    def score(self, samples):
        self.seen.extend(samples)
        out = []
        for s in samples:
            enc = self.encoder.encode(s.request, s.response)
            read = self.encoder.tokenizer.decode(enc.ids[enc.response_start:enc.response_end])
            at = s.response.find("MARK") if "MARK" in read else -1
            p = 0.9 if at >= 0 else 0.1 + len(s.response) * 1e-6
            spans = [[at, at + 4, 0.8]] if at >= 0 else []
            out.append(Verdict(transcript_hash=s.transcript_hash, readout="verdict",
                               status="truncated" if enc.truncation else "ok", p_raw=p,
                               tokens=len(enc.ids), truncation=enc.truncation and {"x": 1},
                               extra={"spans": spans}))
        return out


def _long(marked_at: float = 0.5, words: int = 900) -> Sample:
    parts = [f"line {i} of the answer," for i in range(words)]
    parts.insert(int(words * marked_at), "MARK")
    return Sample(id="long", request="Write a function.", response=" ".join(parts),
                  label=True, category="c", task="code", pair_id="p")


def test_window_spans_cover_everything_with_overlap():
    spans = window_spans(1000, 300, 0.25)
    assert spans[0][0] == 0 and spans[-1][1] == 1000
    assert all(b - a == 300 for a, b in spans)
    assert all(nxt[0] < cur[1] for cur, nxt in zip(spans, spans[1:], strict=False))
    assert window_spans(200, 300, 0.25) == [(0, 200)]


def test_a_fitting_transcript_is_scored_unchanged(tokenizer):
    inner = _Marked(tokenizer)
    mon = WindowedMonitor(inner, WindowPolicy())
    short = Sample(id="s", request="r", response="MARK short", label=True, category="c",
                   task="t", pair_id="p")
    (v,) = mon.score([short])
    assert v == inner.score([short])[0] and "windows" not in v.extra


def test_a_long_transcript_is_read_in_windows_that_fit_and_keep_the_mark(tokenizer):
    inner = _Marked(tokenizer)
    sample = _long()
    assert inner.encoder.encode(sample.request, sample.response).truncation.dropped_response
    cut = inner.score([sample])[0]
    assert cut.p_raw < 0.5  # head_tail drops the middle, where the mark is
    inner.seen.clear()
    (v,) = WindowedMonitor(inner, WindowPolicy()).score([sample])
    windows = inner.seen
    assert len(windows) == v.extra["windows"]["windows"] >= 3
    for w in windows:  # every window fits: nothing of its response is cut
        assert inner.encoder.encode(w.request, w.response).truncation is None
        assert w.request == sample.request
    chars = v.extra["windows"]["window_chars"]
    assert chars[0][0] == 0 and chars[-1][1] == len(sample.response)
    assert all(b[0] < a[1] for a, b in zip(chars, chars[1:], strict=False))  # overlapping
    assert v.p_raw == pytest.approx(0.9) and v.status == "ok" and v.truncation is None
    assert v.transcript_hash == sample.transcript_hash
    at = sample.response.index("MARK")
    assert v.extra["spans"] == [[at, at + 4, 0.8]]  # shifted back, joined across windows
    assert v.tokens == sum(len(inner.encoder.encode(w.request, w.response).ids)
                           for w in windows)


def test_mean_aggregate_and_policy_parsing(tokenizer):
    inner = _Marked(tokenizer)
    (v,) = WindowedMonitor(inner, parse_truncation("window:mean")).score([_long()])
    ps = v.extra["windows"]["p_windows"]
    assert v.p_raw == pytest.approx(sum(ps) / len(ps)) and v.p_raw < max(ps)
    assert parse_truncation("head_tail") is None
    assert parse_truncation("window:max:0.5") == WindowPolicy(0.5, "max")
    for bad in ("middle", "window:median", "window:max:1.5", "window:max:x"):
        with pytest.raises(ConfigError):
            parse_truncation(bad)


def test_the_store_key_and_the_record_name_the_policy(tokenizer):
    inner = _Marked(tokenizer)
    a, b = WindowedMonitor(inner, WindowPolicy()), WindowedMonitor(inner, WindowPolicy(0.5))
    assert len({inner.key.template_hash, a.key.template_hash, b.key.template_hash}) == 3
    assert a.key.readout == inner.key.readout and a.encoder is inner.encoder
    assert truncation_record(inner) == {"policy": "head_tail"}
    assert truncation_record(a) == {"policy": "window", "overlap": 0.25, "aggregate": "max"}


def test_the_spec_builds_a_windowed_monitor_and_settings_refuse_a_bad_policy():
    from calimon.scoring.engines import MonitorSpec, RunSettings

    spec = RunSettings(truncation="window:mean").spec()
    assert spec.truncation == "window:mean"
    assert MonitorSpec.from_json(spec.to_json()) == spec
    with pytest.raises(ConfigError):
        RunSettings(truncation="windows")


def test_a_curve_run_reads_windows_and_records_the_policy(smol, tmp_path, monkeypatch):
    import json

    from test_engine_ray import StandInBackend  # noqa: F401 - the backend the run names

    from calimon.samples import write_samples
    from calimon.scoring.backends import BACKENDS
    from calimon.scoring.store import RunStore
    from calimon.studies.curve.run import CurveSettings, run_curve

    monkeypatch.setitem(BACKENDS, "stand-in", "test_engine_ray:StandInBackend")
    rows = []
    for i in range(24):
        long = " ".join(f"step {k} of task {i} ran." for k in range(80 if i % 3 == 0 else 2))
        for label in (True, False):
            rows.append(Sample(id=f"s{i}-{int(label)}", request=f"Task {i}.",
                               response=f"{long} {'failed' if label else 'passed'}",
                               label=label, category="safety", task="qa", pair_id=f"s{i}"))
    bench = write_samples(rows, tmp_path / "long.jsonl")
    settings = CurveSettings(model=str(smol.path), benchmark=str(bench), backend="stand-in",
                             binary_prompts=(), n_boot=10, max_input_tokens=400,
                             truncation="window", allow_inverted=True,
                             store=tmp_path / "s.sqlite", out=tmp_path / "run")
    run = run_curve(settings)
    doc = json.loads((run.out / "curve.json").read_text())
    assert doc["provenance"]["truncation"] == {"policy": "window", "overlap": 0.25,
                                               "aggregate": "max"}
    with RunStore(tmp_path / "s.sqlite") as st:
        (key,) = st.keys()
        got = st.get(key, [s.transcript_hash for s in rows])
    windowed = [v for v in got.values() if "windows" in v.extra]
    assert len(windowed) == 16 and all(v.extra["windows"]["windows"] > 1 for v in windowed)
    assert all(v.p_raw == max(v.extra["windows"]["p_windows"]) for v in windowed)


@pytest.mark.model
@pytest.mark.parametrize("readout", ["verdict", "probe:amb-open-monitor"])
def test_prompted_and_probe_monitors_read_windows_on_smollm2(smol_backend, readout):
    from calimon.scoring.engines import MonitorSpec

    spec = MonitorSpec(readout=readout, max_input_tokens=400, truncation="window")
    mon = spec.build(smol_backend)
    sample = _long(marked_at=0.3, words=60)  # about 4 windows
    (v,) = mon.score([sample])
    info = v.extra["windows"]
    assert info["windows"] > 1 and v.p_raw == max(info["p_windows"])
    parts = [w for w, _ in mon.windows(sample)]
    direct = mon.inner.score(parts)  # each window read as a transcript of its own
    assert [d.p_raw for d in direct] == pytest.approx(info["p_windows"], abs=1e-6)
    if readout.startswith("probe:"):  # spans and token scores back in the whole response
        n = len(sample.response)
        assert all(0 <= a < b <= n for a, b, _ in v.extra["spans"])
        offsets = v.extra["token_scores"]["offsets"]
        assert offsets == sorted(offsets) and offsets[-1][1] == n
        assert len(offsets) == len({tuple(o) for o in offsets})
