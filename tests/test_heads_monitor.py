import json

import numpy as np
import pytest
from conftest import toy_samples

from calimon.prompts import load_prompt
from calimon.provenance import ProvenanceMismatchError
from calimon.scoring.engines import make_monitor
from calimon.scoring.monitor import Monitor
from calimon.scoring.probes.artifacts import (
    BaseModelRef,
    HeadCard,
    PromptRef,
    TrainingRef,
    save_head,
)
from calimon.scoring.probes.features import extract_features
from calimon.scoring.probes.head import ProbeHead, fit_logistic
from calimon.studies.heads.train import token_matrix

pytestmark = pytest.mark.model
LAYER = 6


def _card(backend, name, kind, fs):
    ref = backend.model_ref
    prompt = load_prompt("direct")
    return HeadCard(version=1, name=name, kind=kind, estimator="logistic", layer=LAYER,
                    base_model=BaseModelRef(name=ref.name, revision=ref.revision,
                                            hidden_size=backend.hidden_size,
                                            num_layers=backend.num_layers),
                    prompt=PromptRef(name="direct", template_hash=prompt.template_hash("verdict"),
                                     max_input_tokens=1024),
                    training=TrainingRef(benchmark="toy", dataset_hash="t", split="train",
                                         n_samples=len(fs.samples), n_positive=int(fs.y.sum()),
                                         categories=["spec_gaming"], seed=0),
                    weights_file="", weights_sha256="", calimon_version="0", created="now")


@pytest.fixture(scope="module")
def heads(smol_backend, tmp_path_factory):
    root = tmp_path_factory.mktemp("heads")
    feats = tmp_path_factory.mktemp("features")
    fs = extract_features(smol_backend, load_prompt("direct"), toy_samples(4),
                          token_layers=(LAYER,), cache_root=feats)
    seq = ProbeHead("sequence", "logistic", LAYER, fit_logistic(fs.X(LAYER, "mean"), fs.y),
                    pooling="mean")
    save_head(seq, _card(smol_backend, "toy-seq", "sequence", fs), root)
    X, y = token_matrix(fs, LAYER, range(len(fs.samples)), max_tokens=None)
    tok = ProbeHead("token", "logistic", LAYER, fit_logistic(X, y, C=0.1), span_threshold=0.5)
    save_head(tok, _card(smol_backend, "toy-token", "token", fs), root)
    other = ProbeHead("sequence", "logistic", LAYER, {**seq.params, "coef": -seq.params["coef"]},
                      pooling="mean")
    save_head(other, _card(smol_backend, "toy-other", "sequence", fs), root)
    return root, fs, seq, tok


def test_head_and_verdict_from_one_forward_pass(smol_backend, heads):
    root, fs, seq, _ = heads
    mon = make_monitor(smol_backend, load_prompt("direct"), "probe:toy-seq", heads_root=root)
    samples = toy_samples(4)
    calls = smol_backend.forward_calls
    verdicts, readings = mon.score_with_verdict(samples)
    head_passes = smol_backend.forward_calls - calls
    calls = smol_backend.forward_calls
    plain = Monitor(smol_backend, load_prompt("direct"), "verdict",
                    max_input_tokens=1024).score(samples)
    # head and verdict together cost exactly the passes of the verdict alone
    assert head_passes == smol_backend.forward_calls - calls == len(samples)  # batch 1 on CPU
    assert [v.p_raw for v in verdicts] == pytest.approx([v.p_raw for v in plain], abs=1e-6)
    expected = seq.predict_proba(fs.X(LAYER, "mean"))
    assert [r.p_raw for r in readings] == pytest.approx(expected.tolist(), abs=1e-5)
    assert all(r.readout == "probe:toy-seq" and r.status == "ok" for r in readings)
    assert readings[0].extra["verdict"]["p_raw"] == pytest.approx(plain[0].p_raw, abs=1e-6)


def test_key_names_the_head_and_hashes_its_weights(smol_backend, heads):
    root = heads[0]
    a = make_monitor(smol_backend, load_prompt("direct"), "probe:toy-seq", heads_root=root)
    b = make_monitor(smol_backend, load_prompt("direct"), "probe:toy-other", heads_root=root)
    plain = Monitor(smol_backend, load_prompt("direct"), "verdict")
    assert a.key.readout == "probe:toy-seq" and a.key.prompt == "direct"
    assert len({a.key.template_hash, b.key.template_hash, plain.key.template_hash}) == 3
    assert a.encoder.prefix_len == plain.encoder.prefix_len


def test_token_head_gives_spans_inside_the_response(smol_backend, heads):
    root = heads[0]
    mon = make_monitor(smol_backend, load_prompt("direct"), "probe:toy-token", heads_root=root)
    samples = toy_samples(2)
    for s, r in zip(samples, mon.score(samples), strict=True):
        assert r.scored and 0.0 <= r.p_raw <= 1.0
        for start, end, score in r.extra["spans"]:
            assert s.response[start:end].strip() and score > 0.5
        segs = r.extra["segments"]
        assert segs and [s.response[a:b] for a, b, _, _ in segs] == list(r.evidence)
        assert [x[2] for x in segs] == sorted((x[2] for x in segs), reverse=True)
        assert all(p is None for *_, p in segs)  # no precision map beside this head


def test_a_bundle_scores_with_its_sequence_head_and_points_with_its_token_head(
        smol_backend, heads):
    from calimon.scoring.probes.bundle import BundleCard, BundleModelRef, save_bundle

    root, fs, seq, tok = heads
    ref = smol_backend.model_ref
    save_bundle(BundleCard(version=1, name="toy-bundle",
                           base_model=BundleModelRef(name=ref.name, revision=ref.revision),
                           sequence_head="toy-seq", token_head="toy-token", recipe="logistic",
                           command="test", calimon_version="0", created="now"), root)
    prompt = load_prompt("direct")
    mon = make_monitor(smol_backend, prompt, "probe:toy-bundle", heads_root=root)
    seq_only = make_monitor(smol_backend, prompt, "probe:toy-seq", heads_root=root)
    tok_only = make_monitor(smol_backend, prompt, "probe:toy-token", heads_root=root)
    samples = toy_samples(2)
    calls = smol_backend.forward_calls
    got = mon.score(samples)
    assert smol_backend.forward_calls - calls == len(samples)  # one pass serves both heads
    assert [r.p_raw for r in got] == pytest.approx([r.p_raw for r in seq_only.score(samples)],
                                                   abs=1e-6)
    for a, b in zip(got, tok_only.score(samples), strict=True):
        assert a.readout == "probe:toy-bundle" and a.extra["bundle"] == "toy-bundle"
        assert a.extra["spans"] == b.extra["spans"] and a.evidence == b.evidence
        assert a.extra["token_scores"] == b.extra["token_scores"]
    assert len({mon.key.template_hash, seq_only.key.template_hash,
                tok_only.key.template_hash}) == 3


def test_wrong_prompt_or_unknown_head_refused(smol_backend, heads):
    root = heads[0]
    with pytest.raises(ProvenanceMismatchError, match="head prompt 'direct' vs run 'evidence'"):
        make_monitor(smol_backend, load_prompt("evidence"), "probe:toy-seq", heads_root=root)
    with pytest.raises(Exception, match="no head 'nope'"):
        make_monitor(smol_backend, load_prompt("direct"), "probe:nope", heads_root=root)


def test_feature_cache_serves_repeats_without_the_model(smol_backend, heads, tmp_path):
    _, fs, _, _ = heads
    calls = smol_backend.forward_calls
    cache = tmp_path / "f"
    first = extract_features(smol_backend, load_prompt("direct"), toy_samples(2),
                             token_layers=(LAYER,), cache_root=cache)
    mid = smol_backend.forward_calls
    again = extract_features(smol_backend, load_prompt("direct"), toy_samples(2),
                             cache_root=cache)
    assert mid > calls and smol_backend.forward_calls == mid
    assert np.array_equal(first.pooled, again.pooled) and again.tokens == ()
    assert np.allclose(first.pooled, fs.pooled[:4], rtol=1e-3, atol=1e-3)


def test_curve_runs_on_a_probe_readout(smol_backend, heads, tmp_path, monkeypatch):
    from calimon.samples import write_samples
    from calimon.studies.curve.run import CurveSettings, run_curve

    monkeypatch.setenv("CALIMON_HEADS_DIR", str(heads[0]))
    bench = write_samples(toy_samples(6), tmp_path / "toy.jsonl")
    run = run_curve(CurveSettings(benchmark=str(bench), readout="probe:toy-seq",
                                  binary_prompts=(), n_boot=10, store=tmp_path / "s.sqlite",
                                  out=tmp_path / "run"), backend=smol_backend)
    doc = json.loads((run.out / "curve.json").read_text())
    assert doc["provenance"]["readout"] == "probe:toy-seq"
    assert doc["counts"]["scored"] == 12


def test_curve_on_a_token_head_writes_token_scores_and_the_report_shows_them(
        smol_backend, heads, tmp_path, monkeypatch):
    from calimon.report import build_report
    from calimon.samples import write_samples
    from calimon.studies.curve.run import CurveSettings, run_curve

    monkeypatch.setenv("CALIMON_HEADS_DIR", str(heads[0]))
    samples = toy_samples(10)  # the class-size rule's minimum for a curve (class_support)
    bench = write_samples(samples, tmp_path / "toy.jsonl")
    run = run_curve(CurveSettings(benchmark=str(bench), readout="probe:toy-token",
                                  binary_prompts=(), n_boot=10, store=tmp_path / "s.sqlite",
                                  out=tmp_path / "run"), backend=smol_backend)
    lines = [json.loads(x) for x in (run.out / "token_scores.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in lines) == sorted(s.id for s in samples)
    mon = make_monitor(smol_backend, load_prompt("direct"), "probe:toy-token",
                       heads_root=heads[0])
    direct = {s.id: r.extra["token_scores"] for s, r in zip(samples[:2], mon.score(samples[:2]),
                                                            strict=True)}
    by_id = {s.id: s for s in samples}
    for rec in lines:
        assert len(rec["offsets"]) == len(rec["scores"]) > 0
        assert all(0 <= a < b <= len(by_id[rec["id"]].response) for a, b in rec["offsets"]
                   if a >= 0)
        if rec["id"] in direct:
            assert rec["scores"] == pytest.approx(direct[rec["id"]]["scores"], abs=1e-4)
    rep = build_report(run.out)
    page = rep.html.read_text()
    assert page.count("probe token scores") == len(samples)
    assert not [n for n in rep.notes if n.startswith("token")]


ATT_LAYER = 3


def test_an_attention_head_trained_by_heads_train_scores_live_as_on_cached_features(
        smol_backend, heads, tmp_path, monkeypatch):
    """`heads train --estimator attention` saves a head whose live readings (one capture pass)
    equal its scores on the cached features; bundled with the token head of another layer, one
    pass captures both layers and each part reads as it does alone."""
    from dataclasses import replace

    from calimon.samples import write_samples
    from calimon.scoring.probes.bundle import BundleCard, BundleModelRef, save_bundle
    from calimon.studies.heads.train import head_scores
    from calimon.studies.heads.workflow import HeadTrainSettings, train_head

    root = heads[0]
    monkeypatch.setenv("CALIMON_FEATURES_DIR", str(tmp_path / "features"))
    samples = [replace(s, split="train" if i < 12 else "test")
               for i, s in enumerate(toy_samples(8))]
    bench = write_samples(samples, tmp_path / "toy.jsonl")
    done = train_head(HeadTrainSettings(name="toy-att", benchmark=str(bench),
                                        model="smollm2-135m", prompt="direct",
                                        estimator="attention", layer=ATT_LAYER,
                                        evaluate=False, out=root, device="cpu"),
                      backend=smol_backend)
    card = done.card
    assert (card.kind, card.estimator, card.pooling, card.layer) == \
        ("sequence", "attention", "attention", ATT_LAYER)
    assert card.training.params["weight_decay"] in card.training.params["weight_decays"]
    assert card.training.n_samples == 12 and card.metrics["cv_auroc"] is not None
    prompt = load_prompt("direct")
    mon = make_monitor(smol_backend, prompt, "probe:toy-att", heads_root=root)
    assert mon.capture_spec.layers == () and mon.capture_spec.token_layers == (ATT_LAYER,)
    live = [r.p_raw for r in mon.score(samples)]
    fs = extract_features(smol_backend, prompt, samples, token_layers=(ATT_LAYER,),
                          cache_root=tmp_path / "features")
    from calimon.scoring.probes.artifacts import load_head

    head, _ = load_head("toy-att", model_ref=smol_backend.model_ref, root=root)
    assert live == pytest.approx(head_scores(head, fs).tolist(), abs=2e-3)  # cache: float16

    ref = smol_backend.model_ref
    save_bundle(BundleCard(version=1, name="att-bundle",
                           base_model=BundleModelRef(name=ref.name, revision=ref.revision),
                           sequence_head="toy-att", token_head="toy-token", recipe="attention",
                           command="test", calimon_version="0", created="now"), root)
    both = make_monitor(smol_backend, prompt, "probe:att-bundle", heads_root=root)
    assert both.capture_spec.token_layers == (ATT_LAYER, LAYER)
    calls = smol_backend.forward_calls
    got = both.score(samples[:2])
    assert smol_backend.forward_calls - calls == 2
    assert [r.p_raw for r in got] == pytest.approx(live[:2], abs=1e-6)
    tok = make_monitor(smol_backend, prompt, "probe:toy-token", heads_root=root)
    for a, b in zip(got, tok.score(samples[:2]), strict=True):
        assert a.extra["token_scores"] == b.extra["token_scores"] and a.evidence == b.evidence


def test_the_shipped_monitor_scores_on_a_fresh_checkout_without_training(smol_backend):
    """heads/smollm2-135m/amb-open-monitor.bundle.yaml (benchmarks/heads/ship_monitor.sh): its
    parts load (hashes checked) and one pass gives a score and spans per transcript."""
    mon = make_monitor(smol_backend, load_prompt("direct"), "probe:amb-open-monitor")
    card = mon.bundle.card
    assert "ship_monitor.sh" in card.command and card.training["benchmark"] == "amb-open"
    assert mon.head.estimator == "attention" and mon.span_head.kind == "token"
    assert mon.capture_spec.token_layers == tuple(sorted({mon.head.layer, mon.span_head.layer}))
    got = mon.score(toy_samples(1))
    assert all(r.status == "ok" and 0 < r.p_raw < 1 for r in got)
    assert all(len(r.extra["token_scores"]["scores"]) > 0 for r in got)


@pytest.mark.slow  # a head trained, then two curve runs on the model
def test_heads_trained_on_max_pooling_and_on_two_layers_score_in_a_curve_as_in_training(
        smol_backend, heads, tmp_path, monkeypatch):
    """A max-pooled head from `heads train` (recipe pinned) and a head on two concatenated
    layers: `calimon curve --readout probe:NAME` scores each transcript as the head scores its
    cached features in training (`head_scores`), and the card records the recipe."""
    from dataclasses import replace

    from calimon.run_folder import read_curve_csv
    from calimon.samples import write_samples
    from calimon.studies.curve.run import CurveSettings, run_curve
    from calimon.studies.heads.train import fit_sequence_head, head_scores
    from calimon.studies.heads.workflow import HeadTrainSettings, train_head

    root = heads[0]
    monkeypatch.setenv("CALIMON_FEATURES_DIR", str(tmp_path / "features"))
    monkeypatch.setenv("CALIMON_HEADS_DIR", str(root))
    samples = [replace(s, split="train" if i < 12 else "test")
               for i, s in enumerate(toy_samples(10))]
    bench = write_samples(samples, tmp_path / "toy.jsonl")
    done = train_head(HeadTrainSettings(name="toy-max", benchmark=str(bench),
                                        model="smollm2-135m", prompt="direct", layer=LAYER,
                                        pooling="max", evaluate=False, out=root,
                                        device="cpu"), backend=smol_backend)
    card = done.card
    assert (card.estimator, card.layer, card.pooling) == ("logistic", LAYER, "max")
    recipe = card.training.recipe  # the estimator was free: logistic against the MLP
    assert recipe.pinned == {"layer": LAYER, "pooling": "max"} and recipe.chosen.endswith("max")
    prompt = load_prompt("direct")
    fs = extract_features(smol_backend, prompt, samples, cache_root=tmp_path / "features")
    train = fs.subset(np.arange(12))
    two = fit_sequence_head(train, 9, "last", layers=(9, 3), n_splits=3, Cs=(0.1,)).head
    save_head(two, _card(smol_backend, "toy-two", "sequence", train).model_copy(
        update={"layer": 9}), root)
    from calimon.scoring.probes.artifacts import load_head

    for name in ("toy-max", "toy-two"):
        head, saved = load_head(name, model_ref=smol_backend.model_ref, root=root)
        assert saved.layers == ([9, 3] if name == "toy-two" else None)
        run = run_curve(CurveSettings(benchmark=str(bench), readout=f"probe:{name}",
                                      split=None, binary_prompts=(), n_boot=10,
                                      store=tmp_path / f"{name}.sqlite",
                                      out=tmp_path / name), backend=smol_backend)
        got = {r.id: r.p_raw for r in read_curve_csv(run.out / "curve.csv")}
        want = dict(zip((s.id for s in samples), head_scores(head, fs).tolist(), strict=True))
        assert set(got) == set(want)
        assert [got[k] for k in want] == pytest.approx(list(want.values()), abs=1e-5)
