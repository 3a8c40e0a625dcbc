"""The trained-monitors benchmark (benchmarks/heads/trained_monitors.py, recipes_bench.py): its
protocols never let a held-out category or source into training or calibration, and the
pair-aware objective finds a signal that a within-pair nuisance hides from the pointwise one."""

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
from conftest import toy_samples

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "heads"))

from calimon.numerics.metrics import auroc  # noqa: E402
from calimon.scoring.probes.features import FeatureSet  # noqa: E402


def _feature_set(n_pairs=24, seed=0):
    samples = []
    for k, s in enumerate(toy_samples(n_pairs)):
        pair = k // 2
        samples.append(replace(s, split=("train", "calib", "test")[pair % 3],
                               source=("alpha", "beta", "gamma")[pair % 3 - (pair // 3) % 2],
                               category=("safety", "spec_gaming", "sycophancy")[(pair // 3) % 3]))
    n = len(samples)
    rng = np.random.default_rng(seed)
    pooled = rng.normal(size=(n, 3, 31, 4)).astype(np.float32)
    verdict = np.column_stack([rng.uniform(size=n), rng.uniform(size=n), rng.uniform(size=n),
                               rng.uniform(size=n)])
    return FeatureSet(tuple(samples), pooled, verdict, np.full(n, 10), np.zeros(n, bool))


def test_protocols_hold_out_what_they_name():
    from trained_monitors import FLAGGED_CELLS, protocols

    fs = _feature_set()
    split, cat, src = fs.column("split"), fs.column("category"), fs.column("source")
    cells = np.array([f"{s.category}/{s.task}" for s in fs.samples])
    rows = protocols(fs)
    kinds = {p for p, *_ in rows}
    assert kinds == {"in-distribution", "leave-one-category-out", "leave-one-source-out"}
    for proto, held, tr, ca, te in rows:
        assert set(split[tr]) <= {"train"} and set(split[ca]) <= {"calib"}
        assert set(split[te]) <= {"test"} and te.any()
        if proto == "leave-one-category-out":
            assert held not in set(cat[tr]) | set(cat[ca]) and set(cat[te]) == {held}
        if proto == "leave-one-source-out":
            assert held not in set(src[tr]) | set(src[ca]) and set(src[te]) == {held}
            assert fs.y[te].any() and not fs.y[te].all()
        if held.startswith("without"):
            assert not np.isin(cells[te], FLAGGED_CELLS).any()


def _paired_with_shortcut(rng, n_pairs, n_unpaired):
    """Pairs whose misbehaving side carries a weak signal on x0 while x1 is shared within each
    pair; unpaired benign samples (hard negatives) all have a high x1: a shortcut that the
    pointwise loss learns (high x1 -> benign) and that says nothing within a pair."""
    shared = rng.normal(size=n_pairs) * 2.0
    X = np.zeros((2 * n_pairs + n_unpaired, 2))
    X[: 2 * n_pairs, 1] = np.repeat(shared, 2)
    X[2 * n_pairs:, 1] = 3.0 + rng.normal(size=n_unpaired) * 0.3
    X[:, 0] = rng.normal(size=len(X))
    y = np.zeros(len(X), bool)
    y[0: 2 * n_pairs: 2] = True
    X[y, 0] += 1.0
    pairs = np.column_stack([np.arange(0, 2 * n_pairs, 2), np.arange(1, 2 * n_pairs, 2)])
    return X, y, pairs


def test_pair_ranking_ignores_a_shortcut_that_only_unpaired_samples_carry():
    from recipes_bench import fit_pairwise

    from calimon.scoring.probes.head import ProbeHead

    rng = np.random.default_rng(0)
    X, y, pairs = _paired_with_shortcut(rng, 300, 300)
    Xt, yt, _ = _paired_with_shortcut(rng, 300, 0)  # new traffic: pairs only
    Xt[:, 1] = rng.normal(size=len(Xt)) * 2.0 + 1.5 * yt  # x1 now unrelated to the shortcut

    def test_auroc(params):
        return auroc(ProbeHead("sequence", "logistic", 0, params, pooling="mean")
                     .predict_proba(Xt), yt)

    pointwise = fit_pairwise(X, y, pairs, C=0.05, alpha=0.0)
    ranked = fit_pairwise(X, y, pairs, C=0.05, alpha=0.95)
    # the ranking term weighs x0, which differs within pairs, and cannot see x1: relative to the
    # signal, the shortcut's weight shrinks
    def share(params):
        return abs(params["coef"][1]) / abs(params["coef"][0])

    assert share(ranked) < 0.5 * share(pointwise), (share(ranked), share(pointwise))
    assert test_auroc(ranked) > test_auroc(pointwise) + 0.05


def _with_copies(fs):
    """``fs`` plus one augmented copy of every train sample (as load_features adds them)."""
    from calimon.studies.heads.augment import augment_samples

    train = [s for s in fs.samples if s.split == "train"]
    extra = augment_samples(train, ["all"], copies=1, seed=0)
    assert extra, "the toy train samples get copies"
    n, k = len(fs.samples), len(extra)
    rng = np.random.default_rng(1)
    return FeatureSet(fs.samples + tuple(extra),
                      np.concatenate([fs.pooled, rng.normal(size=(k,) + fs.pooled.shape[1:])
                                      .astype(np.float32)]),
                      np.concatenate([fs.verdict, rng.uniform(size=(k, fs.verdict.shape[1]))]),
                      np.full(n + k, 10), np.zeros(n + k, bool))


def test_copies_train_only_the_recipes_that_ask_and_follow_their_originals():
    from trained_monitors import copies, protocols, with_copies

    fs = _with_copies(_feature_set())
    is_copy = copies(fs)
    assert is_copy.sum() > 0
    of = np.array([s.meta.get("augment", {}).get("of") for s in fs.samples], dtype=object)
    ids = fs.column("id")
    for proto, held, tr, ca, te in protocols(fs):
        assert not (tr & is_copy).any() and not ((ca | te) & is_copy).any()
        both = with_copies(fs, tr)
        added = both & ~tr
        assert added.any() and is_copy[added].all()
        assert set(of[added]) == set(ids[tr])  # a copy exactly for every original train row
        if proto == "leave-one-category-out":
            assert held not in set(fs.column("category")[both])


def test_lora_rows_read_unscored_samples_as_missing_and_refuse_another_selection(tmp_path):
    import json
    from types import SimpleNamespace

    import pytest
    from trained_monitors import lora_rows, protocols

    from calimon.selection import dataset_hash

    fs = _feature_set()
    by = {sp: [s for s in fs.samples if s.split == sp] for sp in ("calib", "test")}
    scores = {sp: {s.id: (0.9 if s.label else 0.2) for s in rows} for sp, rows in by.items()}
    dropped = by["test"][0].id
    scores["test"][dropped] = None  # scored by nobody: NaN, never 0
    doc = {"scores": scores, "n": {"train": 2000}, "train_seconds": 12.0, "peak_rss_mb": 900.0,
           "dataset_hash": {sp: dataset_hash(rows) for sp, rows in by.items()}}
    path = tmp_path / "lora.json"
    path.write_text(json.dumps(doc))
    args = SimpleNamespace(n_boot=20, seed=0)
    rows = lora_rows(path, fs, protocols(fs), args)
    assert {r["protocol"] for r in rows} == {"in-distribution"}
    full = next(r for r in rows if r["held_out"] == "all")
    assert full["unscored_test"] == 1 and full["n_train"] == 2000
    assert full["auroc"] == 1.0
    doc["trained_without"] = "safety"
    path.write_text(json.dumps(doc))
    loco = lora_rows(path, fs, protocols(fs), args)
    assert [(r["protocol"], r["held_out"]) for r in loco] == [("leave-one-category-out",
                                                               "safety")]
    del doc["trained_without"]
    doc["trained_without_source"] = "beta"
    path.write_text(json.dumps(doc))
    loso = lora_rows(path, fs, protocols(fs), args)
    assert [(r["protocol"], r["held_out"]) for r in loso] == [("leave-one-source-out", "beta")]
    doc["dataset_hash"]["test"] = "0" * 16
    path.write_text(json.dumps(doc))
    with pytest.raises(SystemExit, match="test selection"):
        lora_rows(path, fs, protocols(fs), args)


def test_add_to_replaces_the_lora_rows_of_an_earlier_run_and_checks_its_selection(
        tmp_path, monkeypatch):
    import json

    import pytest
    import trained_monitors

    from calimon.selection import dataset_hash

    fs = _feature_set()
    by = {sp: [s for s in fs.samples if s.split == sp] for sp in ("calib", "test")}
    lora = {"scores": {sp: {s.id: (0.8 if s.label else 0.3) for s in rows}
                       for sp, rows in by.items()},
            "n": {"train": 50}, "train_seconds": 1.0, "peak_rss_mb": 10.0,
            "trained_without": "safety",
            "dataset_hash": {sp: dataset_hash(rows) for sp, rows in by.items()}}
    (tmp_path / "lora.json").write_text(json.dumps(lora))
    earlier = {"benchmark": "b", "model": "m", "prompt": "direct", "max_input_tokens": 1024,
               "seed": 0, "n_boot": 10, "limits": {"train": 8, "calib": 8, "test": 8},
               "dataset_hash": dataset_hash(list(fs.samples)), "command": "first",
               "rows": [{"recipe": "attention", "protocol": "in-distribution", "held_out": "all"},
                        {"recipe": "lora", "protocol": "in-distribution", "held_out": "all",
                         "auroc": 0.5}]}
    (tmp_path / "run.json").write_text(json.dumps(earlier))
    seen = {}

    def fake_load(args):
        seen.update(vars(args))
        return fs, None, None

    monkeypatch.setattr(trained_monitors, "load_features", fake_load)
    out = tmp_path / "out.json"
    argv = ["--add-to", str(tmp_path / "run.json"), "--lora", str(tmp_path / "lora.json"),
            "--out", str(out)]
    assert trained_monitors.main(argv) == 0
    doc = json.loads(out.read_text())
    assert seen["train_limit"] == 8 and seen["recipes"] == ["attention"]
    assert [(r["recipe"], r["protocol"], r["held_out"]) for r in doc["rows"]] == [
        ("attention", "in-distribution", "all"), ("lora", "leave-one-category-out", "safety")]
    assert doc["rows"][0]["memory_kind"].endswith("(torch tensors not counted)")
    assert doc["rows"][1]["memory_kind"] == "process peak RSS" and doc["command"] == "first"
    assert "--add-to" in doc["lora_command"]
    earlier["dataset_hash"] = "0" * 16
    (tmp_path / "run.json").write_text(json.dumps(earlier))
    with pytest.raises(SystemExit, match="rerun trained_monitors.py in full"):
        trained_monitors.main(argv)
