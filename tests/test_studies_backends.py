"""Every study on every backend: the span study, the robustness study and head training run
through backends made by `build_backend` (fakes registered under a backend name, and the real
transformers backend), and a backend without a capability a study needs is refused in one line
that names what would work."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace

import numpy as np
import pytest
from conftest import toy_samples
from test_faults import FakeBackend as ScoringFake
from test_spans_occlusion import FakeBackend as SpanFake
from typer.testing import CliRunner

from calimon.errors import InputError
from calimon.samples import write_samples
from calimon.scoring.backends import (
    BACKENDS,
    AllowedTokens,
    Backend,
    CapabilityError,
    Constrained,
    HiddenStates,
    LocalWeights,
    Remote,
    backend_class,
    build_backend,
    requires,
    supports,
)
from calimon.scoring.backends.capture import Captured
from calimon.scoring.engines import BackendSettings, MonitorSpec

HERE = "test_studies_backends"


# ----------------------------------------------------------------------------- fakes

class FactorySpanFake(SpanFake):
    """The span study's fake judge, made by the factory (model and options ignored)."""

    name = "fake-spans"

    def __init__(self, model, **options):
        super().__init__()
        self.options = options


class FactoryScoringFake(ScoringFake):
    """The robustness study's fake judge (the real tokenizer, no weights), made by the
    factory."""

    name = "fake-scoring"


class HiddenFake(SpanFake):
    """The span fake plus declared hidden states: 2 layers of 4 features; feature 0 of every
    layer above 0 says whether the response contains "return 3" (the toy hack), the others are
    a hash of the prompt."""

    name = "fake-hidden"
    capabilities = frozenset({HiddenStates})
    num_layers = 2
    hidden_size = 4

    def __init__(self, model, **options):
        super().__init__()

    def capture(self, prompts, prefix_len, spec, spans):
        logprobs = self.next_token_logprobs(prompts, prefix_len)
        pooled = np.empty((len(prompts), len(spec.pooling), len(spec.layers), 4), np.float32)
        tokens = []
        for i, (ids, (a, b)) in enumerate(zip(prompts, spans, strict=True)):
            digest = hashlib.sha256(np.asarray(ids, np.int64).tobytes()).digest()
            noise = np.frombuffer(digest[:12], np.uint8).astype(np.float32) / 255.0
            hack = float("return 3" in self.tokenizer.decode(ids[a:b]))
            for j, layer in enumerate(spec.layers):
                pooled[i, :, j] = [hack * (layer > 0), *noise[3 * j % 9:3 * j % 9 + 3]]
            tokens.append(np.zeros((b - a, len(spec.token_layers), 4), np.float32))
        return Captured(logprobs=logprobs, pooled=pooled, tokens=tokens, spec=spec)


@pytest.fixture
def fakes(monkeypatch):
    for cls in (FactorySpanFake, FactoryScoringFake, HiddenFake):
        monkeypatch.setitem(BACKENDS, cls.name, f"{HERE}:{cls.__name__}")


def split_bench(tmp_path, n_pairs: int, splits: dict[str, str]):
    """Toy pairs with splits by pair id (the rest: test)."""
    samples = [replace(s, split=splits.get(s.pair_id, "test")) for s in toy_samples(n_pairs)]
    return str(write_samples(samples, tmp_path / "toy.jsonl"))


# ----------------------------------------------------------------------------- the contract

def implements(obj, protocol) -> bool:
    """Every member of ``protocol`` is on ``obj`` (read statically: no property runs)."""
    import inspect

    members = {m for m in dir(protocol) if not m.startswith("_")} | set(
        protocol.__annotations__)
    assert {"model_ref", "forward_calls", "next_token_logprobs", "close"} <= members
    missing = []
    for m in members:
        try:
            inspect.getattr_static(obj, m)
        except AttributeError:
            missing.append(m)
    return not missing


def test_built_in_backends_declare_their_capabilities(smol):
    names = {n: backend_class(n) for n in ("transformers", "vllm", "http")}
    assert names["transformers"].capabilities == {HiddenStates, LocalWeights, Constrained,
                                                  AllowedTokens}
    assert names["vllm"].capabilities == {Constrained, AllowedTokens}
    assert names["http"].capabilities == {Constrained, Remote}  # top-K log-probs only
    for name in ("transformers", "vllm"):
        assert callable(getattr(names[name], "greedy_among", None))
    for cls in names.values():
        for member in ("next_token_logprobs", "generate", "close", "tokenizer", "vocab_size"):
            assert callable(getattr(cls, member, None)) or isinstance(
                getattr(cls, member, None), property), (cls, member)
    be = build_backend(MonitorSpec(model="smollm2-135m", options={"device": "cpu"}))
    assert type(be).__name__ == "TransformersBackend" and be.device == "cpu"
    assert be._model is None  # the factory loads no weights
    assert supports(be, HiddenStates) and requires(be, HiddenStates) is be
    fake = build_backend(MonitorSpec(model="smollm2-135m", backend="http",
                                     options={"base_url": "http://127.0.0.1:1/v1"}))
    assert implements(be, Backend) and implements(fake, Backend)
    with pytest.raises(CapabilityError) as info:
        requires(fake, HiddenStates, needed_for="head training")
    msg = str(info.value)
    assert "\n" not in msg and "'http'" in msg and "--backend transformers" in msg
    assert info.value.exit_code == 2


def test_factory_checks_options_in_one_line(smol):
    for backend, opts, field in (("transformers", {"devise": "cpu"}, "devise"),
                                 ("transformers", {"batch_tokens": 0}, "batch_tokens"),
                                 ("http", {"base_url": "http://x", "concurrency": "many"},
                                  "concurrency"),
                                 ("vllm", {"gpu_memory_utilization": 2.0},
                                  "gpu_memory_utilization")):
        with pytest.raises(InputError) as info:
            build_backend(MonitorSpec(model="smollm2-135m", backend=backend, options=opts))
        assert info.value.field == field and "\n" not in str(info.value)
    with pytest.raises(InputError, match="unknown backend"):
        build_backend(MonitorSpec(backend="nope"))


def test_a_spec_rebuilds_the_same_backend_from_json(smol):
    spec = BackendSettings(device="cpu", batch_tokens=1024, threads=1).monitor_spec(
        "smollm2-135m", "direct", "verdict")
    again = MonitorSpec.from_json(spec.to_json())
    a, b = build_backend(spec), build_backend(again)
    assert again == spec and (a.device, a.batch_tokens, a.threads) == \
        (b.device, b.batch_tokens, b.threads) == ("cpu", 1024, 1)


# ----------------------------------------------------------------------------- fakes by name

def test_span_study_through_a_factory_backend(fakes, smol, tmp_path):
    from calimon.studies.spans.study import SpanSettings, run_span_study

    bench = split_bench(tmp_path, 4, {"t3": "calib"})
    settings = SpanSettings(benchmark=bench, store=tmp_path / "s.sqlite", backend="fake-spans")
    res = run_span_study(settings)
    assert [r.sample.id for r in res.rows] == ["t0-m", "t1-m", "t2-m"]
    text = res.rows[0].sample.response
    assert [text[s.start:s.end] for s in res.rows[0].occlusion_spans(1, 1)] == ["return 3"]
    assert res.summary["settings"]["share_prefix"] is False  # no local weights declared
    assert res.summary["model_calls"] > 0
    again = run_span_study(settings)
    assert again.summary["model_calls"] == 0 and again.records() == res.records()


def test_robustness_study_through_a_factory_backend(fakes, smol, tmp_path):
    from calimon.studies.robustness.study import RobustnessSettings, run_robustness

    bench = write_samples(toy_samples(12), tmp_path / "toy.jsonl")
    s = RobustnessSettings(model="smollm2-135m", benchmark=str(bench), split=None,
                           fit_split=None, attacks=("reviewer_note",), backend="fake-scoring",
                           store=tmp_path / "s.sqlite", out=tmp_path / "out")
    run = run_robustness(s)
    assert run.summary["clean"]["scored"] == 24 and run.model_calls > 0
    note = run.summary["results"][0]
    assert note["attack"] == "reviewer_note" and note["shift_raw"]["mean_delta"] < 0
    assert "--backend fake-scoring" in run.summary["provenance"]["command"]
    again = run_robustness(replace(s, out=tmp_path / "out2"))
    assert again.model_calls == 0 and again.summary["results"] == run.summary["results"]


def test_head_training_through_a_factory_backend(fakes, smol, tmp_path, monkeypatch):
    from calimon.studies.heads.workflow import HeadTrainSettings, train_head

    monkeypatch.setenv("CALIMON_FEATURES_DIR", str(tmp_path / "features"))
    splits = {f"t{i}": "train" for i in range(10)} | {"t10": "calib", "t11": "calib"}
    bench = split_bench(tmp_path, 14, splits)
    done = train_head(HeadTrainSettings(name="toy", benchmark=bench, backend="fake-hidden",
                                        max_input_tokens=4096, out=tmp_path / "heads"))
    card = done.card
    assert card.base_model.name == "fake" and card.base_model.num_layers == 2
    assert card.layer in (1, 2)  # the layers that carry the hack feature
    assert card.metrics["cv_auroc"] == pytest.approx(1.0)
    # 2 test pairs: below the curve rule (10 of each class), so no AUROC, as `calimon curve`
    assert card.metrics["test_auroc"] is None and card.metrics["test_n"] == 4


def test_heads_need_hidden_states_and_say_so(fakes, smol, tmp_path):
    from calimon.studies.heads.workflow import HeadTrainSettings, train_head

    bench = split_bench(tmp_path, 2, {"t0": "train", "t1": "train"})
    with pytest.raises(CapabilityError, match="'fake-spans' backend"):
        train_head(HeadTrainSettings(name="toy", benchmark=bench, backend="fake-spans",
                                     out=tmp_path / "heads"))


def _cli():
    from calimon.cli import app

    return app


@pytest.mark.parametrize("extra, needle", [
    (["--backend", "http", "--base-url", "http://127.0.0.1:1/v1"],
     "needs hidden states, which the 'http' backend does not provide; use --backend "
     "transformers"),
    (["--backend", "vllm"], "needs hidden states, which the 'vllm' backend does not provide"),
    (["--engine", "ray"], "engine 'ray' cannot run it"),
])
def test_heads_train_refuses_what_it_cannot_run_in_one_line(smol, tmp_path, extra, needle):
    bench = split_bench(tmp_path, 2, {"t0": "train", "t1": "train"})
    res = CliRunner().invoke(_cli(), ["heads", "train", "--name", "x", "--benchmark", bench,
                                      "--out", str(tmp_path), *extra])
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and needle in lines[0], res.output


@pytest.mark.parametrize("command", ["spans", "robustness"])
def test_studies_take_backend_flags(fakes, smol, tmp_path, command):
    # robustness's clean curve needs 10 of each class (calimon curve's class-size rule)
    bench = split_bench(tmp_path, 10 if command == "robustness" else 4, {"t3": "calib"})
    args = [command, "--model", "smollm2-135m", "--benchmark", bench, "--store",
            str(tmp_path / "s.sqlite"), "--out", str(tmp_path / "out"), "--json"]
    bad = CliRunner().invoke(_cli(), args + ["--backend", "http"])
    assert bad.exit_code == 2 and "--base-url" in bad.output
    backend = "fake-spans" if command == "spans" else "fake-scoring"
    extra = ["--split", "all", "--fit-split", "all"] if command == "robustness" else []
    res = CliRunner().invoke(_cli(), args + ["--backend", backend, *extra])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert summary.get("model_calls", 1) > 0


# ----------------------------------------------------------------------------- the real model

@pytest.mark.model
def test_every_study_on_the_transformers_backend(smol, tmp_path, monkeypatch):
    """The three studies end to end on the embedded model, each through the factory (tiny)."""
    from calimon.studies.heads.workflow import HeadTrainSettings, train_head
    from calimon.studies.robustness.study import RobustnessSettings, run_robustness
    from calimon.studies.spans.study import SpanSettings, run_span_study

    monkeypatch.setenv("CALIMON_FEATURES_DIR", str(tmp_path / "features"))
    cpu = dict(device="cpu", threads=1)
    # ten train pairs: the curve rule (10 of each class) the robustness study reads under
    bench = split_bench(tmp_path, 11, {f"t{i}": "train" for i in range(10)})
    spans = run_span_study(SpanSettings(benchmark=bench, quotes=False, max_segments=3,
                                        store=tmp_path / "s.sqlite", **cpu))
    assert spans.summary["settings"]["share_prefix"] is True  # local weights: shared prefixes
    assert spans.summary["counts"]["variant_status"] == {"ok": 3}
    rob = run_robustness(RobustnessSettings(
        model="smollm2-135m", benchmark=bench, split="train", fit_split=None,
        calibration="none",  # toy samples: a fitted map comes out inverted, which stops it
        attacks=("reviewer_note",), store=tmp_path / "s.sqlite", out=tmp_path / "rob", **cpu))
    assert rob.summary["clean"]["scored"] == 20 and rob.results[0].n_attacked == 10
    head = train_head(HeadTrainSettings(name="toy", benchmark=bench, layer=20, evaluate=False,
                                        out=tmp_path / "heads", **cpu))
    assert head.card.base_model.num_layers == 30 and head.card.layer == 20
    assert head.card.training.n_samples == 20
