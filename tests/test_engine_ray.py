"""Engines: the local engine and `calimon score` on a deterministic stand-in backend, and the
Ray engine against a local run with the real embedded model (same store rows)."""

from __future__ import annotations

import importlib.util
import json
import math
import types

import numpy as np
import pytest
import typer
from conftest import toy_samples
from typer.testing import CliRunner

from calimon.cli.score import register
from calimon.errors import InputError, MissingExtraError
from calimon.progress import paced
from calimon.samples import write_samples
from calimon.scoring.backends import BACKENDS
from calimon.scoring.backends.base import BackendBase
from calimon.scoring.engines import MonitorSpec, export_jsonl, score_samples
from calimon.scoring.store import RunStore

HAS_RAY = importlib.util.find_spec("ray") is not None


class StandInBackend(BackendBase):
    """Deterministic log-probs from the prompt ids; counts calls like a real backend."""

    name = "stand-in"

    def __init__(self, model, scale: float = 1.0):
        from transformers import AutoTokenizer

        self.model_ref, self.scale, self.forward_calls = model, scale, 0
        self.tokenizer = AutoTokenizer.from_pretrained(str(model.path))

    def next_token_logprobs(self, prompts, prefix_len=0):
        self.forward_calls += 1
        from calimon.numerics.readouts import answer_token_ids

        pos, neg = answer_token_ids(self.tokenizer, "verdict")  # cached per tokenizer
        ids = sorted(set(pos.tolist()) | set(neg.tolist()) | set(range(100, 164)))
        out = np.full((len(prompts), len(self.tokenizer)), -np.inf, dtype=np.float32)
        for i, p in enumerate(prompts):
            rng = np.random.default_rng(sum(p) + len(p))
            out[i, ids] = np.log(rng.dirichlet(np.ones(len(ids)))) * self.scale
        return out

    def generate(self, prompts, max_new_tokens):
        self.forward_calls += 1
        return [self.tokenizer('{"misbehavior_detected": true}')["input_ids"] for _ in prompts]


@pytest.fixture
def stand_in(monkeypatch):
    monkeypatch.setitem(BACKENDS, "stand-in", "test_engine_ray:StandInBackend")


def rows(store: RunStore):
    skip = {"seconds", "created"}
    cur = store._db.execute("SELECT * FROM verdicts ORDER BY transcript_hash, readout")
    return [{k: r[k] for k in r.keys() if k not in skip} for r in cur.fetchall()]


def first_key(store: RunStore):
    (key,) = store.keys()
    return key


class FlakyMonitor:
    """Fails any batch of more than one sample, and always on the sample named `bad`."""

    readout = "verdict"

    def __init__(self, bad: str, error: Exception | None = None):
        self.bad, self.error, self.calls = bad, error, 0
        self.backend = types.SimpleNamespace(forward_calls=0)

    def score(self, chunk):
        from calimon.verdict import Verdict

        self.calls += 1
        if self.error is not None:
            raise self.error
        if len(chunk) > 1 or chunk[0].id == self.bad:
            raise RuntimeError("device fault")
        return [Verdict(s.transcript_hash, "verdict", "ok", p_raw=0.25) for s in chunk]


def test_score_chunk_is_public_and_isolates_a_failing_sample():
    from calimon.scoring.engines import ray_engine
    from calimon.scoring.monitor import score_chunk

    samples = toy_samples(2)
    mon = FlakyMonitor(bad="t0-b")
    out = score_chunk(mon, samples)
    assert [v.transcript_hash for v in out] == [s.transcript_hash for s in samples]
    assert [v.status for v in out] == ["ok", "error", "ok", "ok"]
    assert out[1].p_raw is None and out[1].error == "RuntimeError: device fault"
    assert mon.calls == 1 + len(samples)  # the batch, then one call per sample
    with pytest.raises(InputError, match="bad"):  # a library error is raised, not recorded
        score_chunk(FlakyMonitor(bad="", error=InputError("bad input")), samples)
    worker = object.__new__(ray_engine.ScoringWorker)  # a Ray actor's scoring, without Ray
    worker.monitor = FlakyMonitor(bad="t1-m")
    rows, _ = worker.score([s.to_dict() for s in samples])
    assert [r["status"] for r in rows] == ["ok", "ok", "error", "ok"]


def test_spec_round_trips_through_json():
    spec = MonitorSpec(model="m", backend="http", prompt="evidence", readout="json",
                       options={"base_url": "http://127.0.0.1:8000/v1"}, max_input_tokens=512)
    assert MonitorSpec.from_json(spec.to_json()) == spec


def chunk_count(n: int, largest: int) -> int:
    """Model calls of a local run over ``n`` samples with unbounded pace (`no_pace`): the
    paced chunks double from one sample, up to ``largest``."""
    return len(list(paced(range(n), largest)))


@pytest.fixture
def no_pace(monkeypatch):
    """Paced chunks that never shrink for time (a loaded machine cannot change the count)."""
    monkeypatch.setattr("calimon.progress.PACE_SECONDS", math.inf)


def test_local_engine_scores_once_then_reuses_the_store(smol, stand_in, no_pace, tmp_path):
    spec = MonitorSpec(model="smollm2-135m", backend="stand-in", options={"scale": 1.0})
    samples = toy_samples(3)
    with RunStore(tmp_path / "s.sqlite") as st:
        first = score_samples(spec, samples, st, chunk_size=4)
        assert (first.scored, first.reused, first.model_calls) == (6, 0, chunk_count(6, 4))
        again = score_samples(spec, samples, st)
        assert (again.scored, again.reused, again.model_calls) == (0, 6, 0)
        assert again.readings == first.readings and first.status_counts() == {"ok": 6}
        out = export_jsonl(samples, first.readings, tmp_path / "x.jsonl", key=first_key(st))
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [x["id"] for x in lines] == [s.id for s in samples]
    assert all(x["status"] == "ok" and x["model"] == "smollm2-135m" and 0 <= x["p_raw"] <= 1
               for x in lines)


def test_bad_engine_and_chunk_size_are_input_errors(smol, stand_in, tmp_path):
    spec = MonitorSpec(backend="stand-in")
    with RunStore(tmp_path / "s.sqlite") as st:
        with pytest.raises(InputError, match="engine"):
            score_samples(spec, toy_samples(1), st, engine="spark")
        with pytest.raises(InputError, match="chunk_size"):
            score_samples(spec, toy_samples(1), st, chunk_size=0)


@pytest.mark.skipif(HAS_RAY, reason="ray is installed here")
def test_missing_ray_names_the_install_line(smol, stand_in, tmp_path):
    with RunStore(tmp_path / "s.sqlite") as st, pytest.raises(MissingExtraError, match="ray"):
        score_samples(MonitorSpec(backend="stand-in"), toy_samples(1), st, engine="ray")


def cli():
    app = typer.Typer()
    register(app)
    app.command("noop")(lambda: None)  # keeps "score" a named subcommand
    return app


def test_score_command_writes_store_and_export(smol, stand_in, no_pace, tmp_path):
    bench = write_samples(toy_samples(2), tmp_path / "b.jsonl")
    args = ["score", "--backend", "stand-in", "--benchmark", str(bench), "--readout", "binary",
            "--store", str(tmp_path / "s.sqlite"), "--export", str(tmp_path / "out.jsonl"),
            "--json"]
    res = CliRunner().invoke(cli(), args)
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output)
    assert summary["scored"] == 4 and summary["statuses"] == {"ok": 4}
    assert summary["model_calls"] == chunk_count(4, 32) and summary["engine"] == "local"
    exported = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [x["decision"] for x in exported] == [True] * 4
    again = json.loads(CliRunner().invoke(cli(), args).output)
    assert again["scored"] == 0 and again["model_calls"] == 0


def test_score_command_errors_are_one_line(smol, tmp_path):
    bench = write_samples(toy_samples(1), tmp_path / "b.jsonl")
    res = CliRunner().invoke(cli(), ["score", "--backend", "http", "--benchmark", str(bench),
                                     "--store", str(tmp_path / "s.sqlite")])
    assert res.exit_code == 2 and "--base-url" in res.output
    res = CliRunner().invoke(cli(), ["score", "--backend", "nope", "--benchmark", str(bench)])
    assert res.exit_code == 2 and "unknown backend 'nope'" in res.output


@pytest.mark.model
@pytest.mark.ray
@pytest.mark.slow  # two actors load the model: ~4 min on the shared 2-core machine
@pytest.mark.skipif(not HAS_RAY, reason="needs ray (pip install 'calimon[ray]')")
def test_ray_run_lands_the_same_rows_as_a_local_run(smol, tmp_path):
    spec = MonitorSpec(model="smollm2-135m", options={"device": "cpu"})
    samples = toy_samples(3)
    with RunStore(tmp_path / "local.sqlite") as local, RunStore(tmp_path / "ray.sqlite") as rs:
        ref = score_samples(spec, samples, local, chunk_size=2)
        got = score_samples(spec, samples, rs, engine="ray", workers=2, chunk_size=2)
        # the same forward passes as the local engine (on CPU one prompt per pass, so 6)
        assert got.scored == 6 and got.model_calls == ref.model_calls == 6 and got.engine == "ray"
        assert rows(rs) == rows(local)
        assert {h: v.p_raw for h, v in got.readings.items()} == \
            {h: v.p_raw for h, v in ref.readings.items()}
        again = score_samples(spec, samples, rs, engine="ray", workers=2, chunk_size=2)
        assert again.scored == 0 and again.model_calls == 0
