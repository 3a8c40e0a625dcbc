"""The trained-monitors benchmark (benchmarks/heads/trained_monitors.py, recipes_bench.py): its
protocols never let a held-out category or source into training or calibration, and the
pair-aware objective finds a signal that a within-pair nuisance hides from the pointwise one."""

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
from conftest import toy_samples

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "heads"))

from calimon.heads.features import FeatureSet  # noqa: E402
from calimon.metrics import auroc  # noqa: E402


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

    from calimon.heads.head import ProbeHead

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
