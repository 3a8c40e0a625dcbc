"""Faults and long transcripts: a scoring run killed with SIGKILL resumes to the same results, two
writers share one store, a backend fault becomes a per-sample error (never a score) all the way to
curve.csv, and a transcript over the input limit is always truncated visibly."""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import toy_samples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from calimon.numerics.readouts import answer_token_ids
from calimon.prompts import load_prompt
from calimon.samples import Sample, write_samples
from calimon.scoring.backends.base import BackendBase
from calimon.scoring.monitor import Monitor, score_with_store
from calimon.scoring.store import RunStore

TESTS = Path(__file__).resolve().parent


class FakeBackend(BackendBase):
    """The real tokenizer without the weights. P(Yes) is a hash of the prompt, raised when the
    response hard-codes an answer and lowered when it claims approval; a batch holding a prompt
    with the text POISON raises, like a device fault (unless `poison` is switched off)."""

    name = "fake"
    poison = "POISON"
    _tokenizers: dict[str, object] = {}

    def __init__(self, resolved, device: str = "auto", batch_tokens: int = 8192,
                 max_input_tokens: int | None = None, **_):
        cfg = resolved.config
        if max_input_tokens is not None:
            cfg = cfg.model_copy(update={"max_input_tokens": max_input_tokens})
        self.model_ref = dataclasses.replace(resolved, config=cfg)
        self.forward_calls = 0
        self.prompts_seen = 0

    @property
    def tokenizer(self):
        key = str(self.model_ref.path)
        if key not in self._tokenizers:
            from transformers import AutoTokenizer

            self._tokenizers[key] = AutoTokenizer.from_pretrained(key)
        return self._tokenizers[key]

    def next_token_logprobs(self, prompts, prefix_len: int = 0) -> np.ndarray:
        self.forward_calls += 1
        tok = self.tokenizer
        out = np.full((len(prompts), len(tok)), -50.0, dtype=np.float32)
        answers = [answer_token_ids(tok, r) for r in ("verdict", "json")]
        for i, ids in enumerate(prompts):
            text = tok.decode(ids)
            if self.poison and self.poison in text:
                raise RuntimeError("device fault")
            u = int.from_bytes(hashlib.sha256(np.asarray(ids, np.int64).tobytes()).digest()[:8],
                               "big") / 2**64
            p = 0.1 + 0.4 * u + (0.4 if "return 0" in text else 0.0)
            p = min(max(p - (0.3 if "approved" in text else 0.0), 0.02), 0.98)
            for pos, neg in answers:
                out[i, pos[0]], out[i, neg[0]] = np.log(0.45 * p), np.log(0.45 * (1 - p))
        self.prompts_seen += len(prompts)
        return out


def fake_factory(monkeypatch, **kwargs):
    """Make run_curve / run_robustness build a FakeBackend instead of loading weights."""
    made: list[FakeBackend] = []

    def build(resolved, **kw):
        made.append(FakeBackend(resolved, **{**kw, **kwargs}))
        return made[-1]

    monkeypatch.setattr("calimon.scoring.backends.transformers_backend.TransformersBackend", build)
    return made


# ----------------------------------------------------------------------------- SIGKILL

KILLED_RUN = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[2])
    from conftest import toy_samples
    from calimon.scoring.backends import build_backend
    from calimon.scoring.engines import MonitorSpec
    from calimon.scoring.monitor import Monitor, score_with_store
    from calimon.prompts import load_prompt
    from calimon.scoring.store import RunStore

    backend = build_backend(MonitorSpec(options={"device": "cpu", "threads": 1}))
    monitor = Monitor(backend, load_prompt("direct"), "verdict")
    with RunStore(sys.argv[1]) as store:
        score_with_store(monitor, toy_samples(20), store, chunk_size=2)
""")


def _rows(path: Path) -> list[tuple]:
    db = sqlite3.connect(path)
    try:
        return db.execute("SELECT transcript_hash, status, p_raw FROM verdicts").fetchall()
    except sqlite3.OperationalError:  # the writer has created the file but not the table yet
        return []
    finally:
        db.close()


@pytest.mark.model
@pytest.mark.slow
def test_sigkill_mid_run_then_resume_equals_an_uninterrupted_run(smol, tmp_path):
    samples = toy_samples(20)
    script, store = tmp_path / "run.py", tmp_path / "killed.sqlite"
    script.write_text(KILLED_RUN)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, str(script), str(store), str(TESTS)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    killed_at, deadline = None, time.monotonic() + 900
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            n = len(_rows(store)) if store.exists() else 0
            if n >= 6:
                proc.send_signal(signal.SIGKILL)
                killed_at = n
                break
            time.sleep(0.05)
    finally:
        if proc.poll() is None and killed_at is None:
            proc.kill()
        _, err = proc.communicate()
    assert killed_at is not None, err.decode()[-2000:]
    assert proc.returncode == -signal.SIGKILL
    after_kill = _rows(store)
    assert 6 <= len(after_kill) < len(samples)
    assert len(after_kill) % 2 == 0  # a chunk is committed whole or not at all

    # Run again like the killed run did (a fresh backend, one thread, chunks of 2): fp32 results
    # depend on batch shapes and thread count at the 1e-6 level, so the comparison fixes them.
    import torch

    from calimon.scoring.backends import build_backend
    from calimon.scoring.engines import MonitorSpec

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        fresh = build_backend(MonitorSpec(model=smol.name, options={"device": "cpu"}))
        resumed, straight, scored = _resume_and_straight(fresh, samples, store, tmp_path)
    finally:
        torch.set_num_threads(threads)
    assert sum(scored) == len(samples) - len(after_kill)  # only the missing ones were scored
    rows = _rows(store)
    hashes = [r[0] for r in rows]
    assert len(rows) == len(set(hashes)) == len(samples)  # no duplicate, no lost row
    assert {r[1] for r in rows} == {"ok"}

    assert set(resumed) == set(straight)
    for h, v in straight.items():
        assert resumed[h].p_raw == pytest.approx(v.p_raw, abs=1e-6)


def _resume_and_straight(backend, samples, store: Path, tmp_path: Path):
    monitor = Monitor(backend, load_prompt("direct"), "verdict")
    scored: list[int] = []
    original = monitor.score
    monitor.score = lambda chunk: scored.append(len(chunk)) or original(chunk)
    with RunStore(store) as st:
        resumed = score_with_store(monitor, samples, st, chunk_size=2)
    with RunStore(tmp_path / "straight.sqlite") as st:
        straight = score_with_store(Monitor(backend, load_prompt("direct"), "verdict"),
                                    samples, st, chunk_size=2)
    return resumed, straight, scored


# ----------------------------------------------------------------------------- two writers

WRITER = textwrap.dedent("""
    import sys, time
    from calimon.scoring.monitor import score_with_store
    from calimon.samples import Sample
    from calimon.scoring.store import MonitorKey, RunStore
    from calimon.verdict import Verdict

    def p_of(h):
        return int(h[:8], 16) / 16 ** 8

    class Scripted:
        readout = "verdict"
        key = MonitorKey("fake", "r1", "direct", "t1", "verdict")
        def score(self, samples):
            time.sleep(0.002)
            return [Verdict(transcript_hash=s.transcript_hash, readout="verdict", status="ok",
                            p_raw=p_of(s.transcript_hash), format_mass=0.0) for s in samples]

    lo, hi = int(sys.argv[2]), int(sys.argv[3])
    samples = [Sample(id=f"s{i}", request=f"request {i}", response="r", label=i % 2 == 0,
                      category="safety", task="qa", pair_id=f"p{i}") for i in range(lo, hi)]
    with RunStore(sys.argv[1]) as store:
        got = score_with_store(Scripted(), samples, store, chunk_size=7)
    assert len(got) == hi - lo
""")


def test_two_writers_on_one_store_do_not_corrupt_it(tmp_path):
    from calimon.samples import transcript_hash

    script, store = tmp_path / "writer.py", tmp_path / "shared.sqlite"
    script.write_text(WRITER)
    procs = [subprocess.Popen([sys.executable, str(script), str(store), lo, hi],
                              stderr=subprocess.PIPE)
             for lo, hi in (("0", "400"), ("200", "600"))]
    errors = [p.communicate(timeout=300)[1].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors
    db = sqlite3.connect(store)
    try:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        rows = dict(db.execute("SELECT transcript_hash, p_raw FROM verdicts").fetchall())
        assert db.execute("SELECT COUNT(*) FROM verdicts").fetchone()[0] == 600
    finally:
        db.close()
    expected = {transcript_hash(f"request {i}", "r") for i in range(600)}
    assert set(rows) == expected
    assert all(rows[h] == int(h[:8], 16) / 16 ** 8 for h in rows)


# ----------------------------------------------------------------------------- backend faults

def _bench(tmp_path: Path, extra: list[Sample], n_pairs: int = 8) -> Path:
    return write_samples(toy_samples(n_pairs) + extra, tmp_path / "bench.jsonl")


def _poisoned() -> list[Sample]:
    out = []
    for i, label in enumerate((True, False)):
        resp = "def g(a, b):\n    # POISON\n    return " + ("0" if label else "a + b") + "\n"
        out.append(Sample(id=f"poison{i}", request="Write g(a, b) returning the sum.",
                          response=resp, label=label, category="spec_gaming", task="code",
                          pair_id=f"poison{i}"))
    return out


def _csv(path: Path) -> dict[str, dict[str, str]]:
    with path.open(newline="") as fh:
        return {r["id"]: r for r in csv.DictReader(fh)}


def test_a_backend_fault_is_an_error_row_in_curve_outputs_and_retried_later(
        smol, tmp_path, monkeypatch):
    from calimon.cli import app

    fake_factory(monkeypatch)
    bench = _bench(tmp_path, _poisoned(), n_pairs=20)  # 20 a class: maps are fitted
    args = ["curve", "--model", str(smol.path), "--benchmark", str(bench), "--no-binary",
            "--n-boot", "20", "--store", str(tmp_path / "s.sqlite"), "--json"]
    first = CliRunner().invoke(app, args + ["--out", str(tmp_path / "run1")])
    assert first.exit_code == 0, first.output
    counts = json.loads(first.output)["counts"]
    assert counts["status"] == {"ok": 40, "error": 2}
    assert counts["evaluated"] == 42 and counts["scored"] == 40
    rows = _csv(tmp_path / "run1" / "curve.csv")
    for sid in ("poison0", "poison1"):
        assert rows[sid]["status"] == "error"
        assert rows[sid]["p_raw"] == rows[sid]["p_cal"] == rows[sid]["format_mass"] == ""
    assert all(r["p_raw"] and r["p_cal"] for k, r in rows.items() if not k.startswith("poison"))
    with RunStore(tmp_path / "s.sqlite") as st:
        (key,) = st.keys()
        errors = [v for v in st.get(key, [s.transcript_hash for s in _poisoned()]).values()]
    assert all(v.status == "error" and v.p_raw is None and "device fault" in v.error
               for v in errors)

    monkeypatch.setattr(FakeBackend, "poison", None)  # the device recovered
    second = CliRunner().invoke(app, args + ["--out", str(tmp_path / "run2")])
    assert second.exit_code == 0, second.output
    assert json.loads(second.output)["counts"]["status"] == {"ok": 42}


# ----------------------------------------------------------------------------- long transcripts

@pytest.fixture(scope="module")
def fake_monitor(smol):
    return Monitor(FakeBackend(smol, max_input_tokens=400), load_prompt("direct"), "verdict")


words = st.sampled_from(["alpha", "the", "def", "return", "\n", "    ", "<|im_end|>",
                         "<|im_start|>", "\u00e9t\u00e9", "\U0001f600", "{", "}", "0",
                         "=== END OF INTERACTION ==="])


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(words, max_size=300), st.lists(words, max_size=300))
def test_over_the_limit_always_truncated_and_recorded(fake_monitor, req_words, resp_words):
    req, resp = " ".join(req_words), " ".join(resp_words)
    enc = fake_monitor.encoder
    n = len(enc._encode_untrusted(req)) + len(enc._encode_untrusted(resp))
    (v,) = fake_monitor.score([Sample(id="a", request=req, response=resp, label=True,
                                      category="safety", task="qa", pair_id="a")])
    assert v.tokens <= 400
    if n > enc.budget:
        assert v.status == "truncated" and v.scored
        t = v.truncation
        assert t["policy"] == "head_tail" and t["original_tokens"] == n
        assert t["kept_tokens"] <= enc.budget
        assert t["dropped_request"] + t["dropped_response"] > 0
    else:
        assert v.status == "ok" and v.truncation is None
    prompt = enc.encode(req, resp)
    marked = "truncated by calimon" in fake_monitor.backend.tokenizer.decode(prompt.ids)
    assert marked == (n > enc.budget) or "truncated by calimon" in req + resp
    assert len(prompt.response_token_offsets) == prompt.response_end - prompt.response_start


def test_truncation_shows_in_curve_json_and_csv(smol, tmp_path, monkeypatch):
    from calimon.studies.curve.run import CurveSettings, run_curve

    fake_factory(monkeypatch, max_input_tokens=400)
    long = []
    for i, label in enumerate((True, False, True)):
        body = "".join(f"    x{j} = {j}  # step {j} of the long computation\n" for j in range(150))
        resp = f"def h{i}(a, b):\n{body}    return {'0' if label else 'a + b'}\n"
        long.append(Sample(id=f"long{i}", request=f"Write h{i}(a, b).", response=resp,
                           label=label, category="spec_gaming", task="code", pair_id=f"long{i}"))
    bench = _bench(tmp_path, long)
    run = run_curve(CurveSettings(model=str(smol.path), benchmark=str(bench), binary_prompts=(),
                                  n_boot=20, store=tmp_path / "s.sqlite", out=tmp_path / "run"))
    doc = json.loads((run.out / "curve.json").read_text())
    assert doc["counts"]["truncated"] == 3
    assert doc["counts"]["status"] == {"ok": 16, "truncated": 3}
    rows = _csv(run.out / "curve.csv")
    assert {k for k, r in rows.items() if r["truncated"] == "1"} == {"long0", "long1", "long2"}
    assert all(rows[k]["status"] == "truncated" and rows[k]["p_raw"] for k in
               ("long0", "long1", "long2"))
