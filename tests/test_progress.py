"""Progress a person trusts (issue 39, item 2): the bar moves every few seconds (paced chunks,
the first of one sample), one bar at a time (library bars silenced), a line when a benchmark
is built, and a line on interrupt and on resume, with the readings done before the interrupt
kept in the store. Timing is read off a fake clock that a stand-in backend advances, so the
figures do not depend on the machine's load."""

from __future__ import annotations

import io
import json
import types

import pytest
from conftest import toy_samples
from test_engine_ray import StandInBackend
from typer.testing import CliRunner

from calimon.progress import PACE_SECONDS, Bars, next_chunk_size, paced
from calimon.samples import write_samples
from calimon.scoring.backends import BACKENDS
from calimon.scoring.engines import MonitorSpec, Scorer
from calimon.scoring.store import RunStore


class FakeClock:
    """Seconds that pass only when a stand-in backend says its work took them."""

    now = 0.0

    def perf_counter(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr("calimon.progress.time", types.SimpleNamespace(perf_counter=fake.perf_counter))
    TimedBackend.clock = fake
    return fake


class TimedBackend(StandInBackend):
    """The stand-in backend, each prompt taking ``per_sample`` seconds of the fake clock; the
    ``interrupt_at``-th call is a Ctrl-C (KeyboardInterrupt) instead."""

    clock: FakeClock = FakeClock()
    per_sample = 1.0
    interrupt_at: int | None = None

    def next_token_logprobs(self, prompts, prefix_len=0):
        if self.interrupt_at is not None and self.forward_calls + 1 >= self.interrupt_at:
            self.clock.now += self.per_sample  # part of the chunk in flight, then Ctrl-C
            raise KeyboardInterrupt
        self.clock.now += self.per_sample * len(prompts)
        return super().next_token_logprobs(prompts, prefix_len)


class Recorder:
    """A progress that keeps every bar opened, every tick (with the fake time) and every note."""

    def __init__(self, clock: FakeClock):
        self.clock, self.bars, self.ticks, self.notes, self.events = clock, [], [], [], []

    def __call__(self, label: str, total: int):
        self.bars.append((label, total))
        self.events.append(("bar", label, self.clock.now))
        return lambda n: self.ticks.append((self.clock.now, n))

    def note(self, message: str) -> None:
        self.notes.append(message)
        self.events.append(("note", message, self.clock.now))


def _score(smol, store, backend, progress, samples):
    spec = MonitorSpec(model="smollm2-135m", backend="stand-in")
    scorer = Scorer(spec, store, progress=progress, backend=backend)
    return scorer.score(samples, label="direct/verdict"), scorer


def test_paced_chunks_double_from_one_and_follow_the_time_per_item():
    assert next_chunk_size(1, 0.0, 32) == 2  # no time measured: double
    assert next_chunk_size(16, 0.1, 32) == 32  # capped at the largest
    assert next_chunk_size(8, 8 * PACE_SECONDS, 32) == 1  # one item takes the whole pace
    assert next_chunk_size(4, 4.0, 32, pace=2.0) == 2
    now = [0.0]
    sizes = []
    for chunk in paced(list(range(20)), 8, pace=2.0, clock=lambda: now[0]):
        sizes.append(len(chunk))
        now[0] += 0.5 * len(chunk)  # half a second per item: four items fill the pace
    assert sizes[0] == 1 and sum(sizes) == 20 and max(sizes) == 4
    with pytest.raises(ValueError):
        next(paced([1], 0))


@pytest.mark.parametrize("per_sample", [1.0, 5.0])
def test_the_bar_moves_within_the_pace_or_after_every_sample(smol, clock, tmp_path,
                                                             monkeypatch, per_sample):
    monkeypatch.setattr(TimedBackend, "per_sample", per_sample)
    samples = toy_samples(20)  # 40 transcripts: more than one old chunk of 32
    rec = Recorder(clock)
    with RunStore(tmp_path / "s.sqlite") as st:
        readings, _ = _score(smol, st, TimedBackend(smol), rec, samples)
    assert rec.bars == [("direct/verdict", 40)] and len(readings) == 40
    assert sum(n for _, n in rec.ticks) == 40
    times = [0.0] + [t for t, _ in rec.ticks]
    assert rec.ticks[0] == (per_sample, 1)  # the first sample moves the bar
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    # every update within the pace, or after a single sample when one takes longer
    assert max(gaps) <= max(PACE_SECONDS, per_sample)
    if per_sample > PACE_SECONDS:
        assert {n for _, n in rec.ticks} == {1}


class LazyBackend(TimedBackend):
    """The timed stand-in with weights that take ``load_seconds`` to load on first use."""

    load_seconds = 10.0

    def __init__(self, model):
        super().__init__(model)
        self.loaded = False

    @property
    def model(self):
        if not self.loaded:
            self.clock.now += self.load_seconds
            self.loaded = True
        return object()


def test_the_weights_load_before_the_bar_opens_with_a_line_saying_so(smol, clock, tmp_path):
    rec = Recorder(clock)
    with RunStore(tmp_path / "s.sqlite") as st:
        _score(smol, st, LazyBackend(smol), rec, toy_samples(2))
    assert rec.events[:2] == [("note", "loading the weights of smollm2-135m", 0.0),
                              ("bar", "direct/verdict", LazyBackend.load_seconds)]
    # the bar's first update: one sample after it opened (its rate counts scoring only)
    assert rec.ticks[0] == (LazyBackend.load_seconds + TimedBackend.per_sample, 1)
    again = Recorder(clock)
    with RunStore(tmp_path / "s2.sqlite") as st:
        backend = LazyBackend(smol)
        backend.loaded = True
        _score(smol, st, backend, again, toy_samples(2))
    assert again.notes == []  # loaded already: nothing to say


def test_an_interrupt_keeps_the_chunks_done_and_the_rerun_says_what_it_reused(smol, clock,
                                                                               tmp_path,
                                                                               monkeypatch):
    samples = toy_samples(20)
    monkeypatch.setattr(TimedBackend, "interrupt_at", 4)  # well before 32 samples are done
    rec = Recorder(clock)
    with RunStore(tmp_path / "s.sqlite") as st:
        backend = TimedBackend(smol)
        with pytest.raises(KeyboardInterrupt):
            _score(smol, st, backend, rec, samples)
        done = sum(n for _, n in rec.ticks)
        (key,) = st.keys()
        assert done > 0 and st.count(key) == done
        assert rec.notes[-1] == (f"interrupted: {done} readings kept in the store "
                                 f"(direct/verdict {done} of 40); the same command resumes "
                                 "from them")
        monkeypatch.setattr(TimedBackend, "interrupt_at", None)
        again = Recorder(clock)
        readings, scorer = _score(smol, st, TimedBackend(smol), again, samples)
    assert again.notes == [f"direct/verdict: {done} of 40 readings reused from the store; "
                           f"{40 - done} to score"]
    assert again.bars == [("direct/verdict", 40 - done)] and len(readings) == 40
    assert sum(n for _, n in again.ticks) == 40 - done


def test_ctrl_c_in_calimon_curve_prints_what_was_kept_and_the_rerun_what_was_reused(
        smol, clock, tmp_path, monkeypatch):
    from calimon.cli import app

    monkeypatch.setitem(BACKENDS, "stand-in", "test_progress:TimedBackend")
    monkeypatch.setattr(TimedBackend, "interrupt_at", 3)
    bench = write_samples(toy_samples(20), tmp_path / "toy.jsonl")
    args = ["curve", "--model", str(smol.path), "--benchmark", str(bench), "--backend",
            "stand-in", "--no-binary", "--n-boot", "10", "--allow-inverted", "--store",
            str(tmp_path / "s.sqlite"), "--out", str(tmp_path / "run")]
    res = CliRunner().invoke(app, args)
    assert res.exit_code != 0
    line = next(ln for ln in res.stderr.splitlines() if ln.startswith("interrupted:"))
    kept = int(line.split()[1])
    assert kept > 0 and line.endswith("the same command resumes from them")
    with RunStore(tmp_path / "s.sqlite") as st:
        assert st.count() == kept
    monkeypatch.setattr(TimedBackend, "interrupt_at", None)
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert f"direct/verdict: {kept} of 40 readings reused from the store" in res.stderr
    assert "Loading weights" not in res.stderr


def test_one_bar_at_a_time_and_no_library_bar_inside_it(monkeypatch, capsys):
    from tqdm import tqdm
    from transformers.utils import logging as tf_logging

    from calimon.cli.common import progress_factory

    monkeypatch.setattr(tf_logging, "_tqdm_active", True)  # restored after the test
    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)
    bars = progress_factory(False)
    tick = bars("direct/verdict", 5)
    tick(2)
    for _ in tf_logging.tqdm(range(3), desc="Loading weights"):  # as from_pretrained draws it
        pass
    assert "Loading weights" not in capsys.readouterr().err
    bars("direct/binary", 3)  # a second bar closes the first
    assert len([b for b in tqdm._instances if not b.disable]) == 1
    bars.close()


def test_quiet_still_silences_library_bars(monkeypatch, capsys):
    from transformers.utils import logging as tf_logging

    from calimon.cli.common import progress_factory

    monkeypatch.setattr(tf_logging, "_tqdm_active", True)
    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)
    assert progress_factory(True) is None
    for _ in tf_logging.tqdm(range(3), desc="Loading weights"):
        pass
    assert "Loading weights" not in capsys.readouterr().err


def test_notes_go_above_the_bar():
    stream = io.StringIO()
    bars = Bars(stream)
    bars("x", 2)(1)
    bars.note("built benchmark y in 3 s")
    bars.close()
    assert "built benchmark y in 3 s\n" in stream.getvalue()


def build_tiny(out_dir, progress=None):
    """A stand-in auto-built benchmark: two pairs, with one bar of its own."""
    from pathlib import Path

    tick = progress("tiny: pairs", 2) if progress else None
    if tick:
        tick(2)
    return write_samples(toy_samples(2), Path(out_dir) / "samples.jsonl")


def test_building_a_benchmark_on_first_use_says_so(tmp_path, monkeypatch):
    from calimon.data import registry

    monkeypatch.setenv("CALIMON_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setitem(registry.BUILDERS, "tiny-pairs", "test_progress:build_tiny")
    monkeypatch.setattr(registry, "AUTO_BUILD", {*registry.AUTO_BUILD, "tiny-pairs"})
    rec = Recorder(FakeClock())
    samples = registry.load_benchmark("tiny-pairs", progress=rec)
    assert len(samples) == 4 and rec.bars == [("tiny: pairs", 2)]
    assert rec.notes[0].startswith("building benchmark tiny-pairs into ")
    assert rec.notes[0].endswith("(first use only)")
    assert rec.notes[1].startswith("built benchmark tiny-pairs in ")
    rec.notes.clear()
    assert len(registry.load_benchmark("tiny-pairs", progress=rec)) == 4
    assert rec.notes == []  # built already: nothing to say


def test_curve_json_is_unchanged_by_pacing(smol, clock, tmp_path, monkeypatch):
    """Paced chunks change when readings are committed, not what they are."""
    from calimon.studies.curve.run import CurveSettings, run_curve

    monkeypatch.setitem(BACKENDS, "stand-in", "test_progress:TimedBackend")
    bench = write_samples(toy_samples(20), tmp_path / "toy.jsonl")
    docs = []
    for pace in (PACE_SECONDS, 1e9):
        monkeypatch.setattr("calimon.progress.PACE_SECONDS", pace)
        run = run_curve(CurveSettings(model=str(smol.path), benchmark=str(bench),
                                      backend="stand-in", binary_prompts=(), n_boot=10,
                                      allow_inverted=True, store=tmp_path / f"{pace}.sqlite",
                                      out=tmp_path / f"run{pace}"))
        docs.append(json.loads((run.out / "curve.json").read_text()))
    assert docs[0]["mr"] == docs[1]["mr"] and docs[0]["far"] == docs[1]["far"]


def test_code_checks_inside_a_step_move_its_bar(monkeypatch):
    """`data build amb-open` ticks once per cell; a cell's thousands of sandboxed checks count
    on the open bar as they run (`pulsing` around the cell, `pulse` in `run_checked`)."""
    from calimon.data.codegen import results
    from calimon.progress import pulse, pulsing
    from calimon.sandbox import SandboxResult

    monkeypatch.setenv("CALIMON_SANDBOX_CACHE", "off")
    monkeypatch.setattr(results, "run_python", lambda code, timeout_s, hash_seed: SandboxResult(
        returncode=0, stdout="", stderr="", timed_out=False, seconds=0.0))
    stream = io.StringIO()
    bars = Bars(stream)
    bars.PULSE_EVERY = 0.0
    tick = bars("amb-open: cells", 2)
    with pulsing(bars, "humaneval_cells code checks"):
        for _ in range(3):
            results.run_checked("print(1)", timeout_s=1.0)
    pulse()  # outside a block: counts nowhere
    tick(2)
    assert "humaneval_cells code checks: 3" in stream.getvalue()
    seen = []
    with pulsing(lambda label, total: None, "checks"):  # a progress without pulse: nothing
        pulse()
    with pulsing(types.SimpleNamespace(pulse=lambda what, n: seen.append((what, n))), "c"):
        pulse()
        pulse()
    assert seen == [("c", 1), ("c", 2)]
