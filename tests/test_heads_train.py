import numpy as np
import pytest

from calimon.errors import InputError
from calimon.numerics.metrics import auroc
from calimon.samples import Sample
from calimon.scoring.probes.features import FeatureSet
from calimon.studies.heads.evaluate import curve_figures, evaluate_readout, transfer_matrix
from calimon.studies.heads.train import (
    fit_attention_head,
    fit_sequence,
    fit_sequence_head,
    fit_token_head,
    head_scores,
    layer_sweep,
    oof_scores,
    token_matrix,
)

H, LAYERS, SIGNAL_LAYER = 8, 4, 2


def _synthetic(n_pairs=40, seed=0) -> FeatureSet:
    """Pairs whose mean-pooled layer 2 (and the gold tokens at token layer 2) carry the label."""
    rng = np.random.default_rng(seed)
    samples, pooled, tokens, offsets = [], [], [], []
    for k in range(n_pairs):
        cat = ("safety", "sycophancy")[k % 2]
        for label in (True, False):
            words = 12
            text = " ".join(f"w{j}" for j in range(words))
            offs = []
            pos = 0
            for j in range(words):
                w = f"w{j}"
                offs.append((pos, pos + len(w)))
                pos += len(w) + 1
            gold = ((offs[4][0], offs[6][1]),) if label else ()
            samples.append(Sample(id=f"p{k}-{'m' if label else 'b'}", request=f"r{k}",
                                  response=text, label=label, category=cat, task="qa",
                                  pair_id=f"p{k}", gold_spans=gold, split="train"))
            f = rng.normal(size=(3, LAYERS + 1, H))
            f[1, SIGNAL_LAYER, 0] += 2.5 if label else 0.0
            pooled.append(f)
            t = rng.normal(size=(words, 1, H))
            if label:
                t[4:7, 0, 1] += 3.0
            tokens.append(t.astype(np.float16))
            offsets.append(np.array(offs, dtype=np.int32))
    n = len(samples)
    return FeatureSet(tuple(samples), np.array(pooled, np.float32), np.full((n, 4), 0.5),
                      np.full(n, 50), np.zeros(n, np.int8), (SIGNAL_LAYER,), tuple(tokens),
                      tuple(offsets))


def test_layer_sweep_finds_the_informative_layer():
    fs = _synthetic()
    sweep = layer_sweep(fs, poolings=("mean", "max"), n_splits=4)
    assert len(sweep.rows) == 2 * (LAYERS + 1)
    best = sweep.best()
    assert (best.layer, best.pooling) == (SIGNAL_LAYER, "mean") and best.cv_auroc > 0.85
    assert sweep.table()["max"][SIGNAL_LAYER] < 0.8
    with pytest.raises(InputError, match="pooling"):
        sweep.best("last")


def test_out_of_fold_scores_never_see_their_pair():
    fs = _synthetic(10)
    X = fs.X(SIGNAL_LAYER, "mean").copy()
    y = fs.y
    # make one pair perfectly predictable only from its own rows: OOF must not exploit it
    X[0, 3], X[1, 3] = 50.0, -50.0
    a = oof_scores(X, y, fs.groups, n_splits=5)
    b = oof_scores(X, y, fs.groups, n_splits=5)
    assert np.array_equal(a, b) and a.shape == y.shape
    assert 0.0 < a[0] < 1.0


def test_sequence_head_picks_C_and_scores():
    fs = _synthetic()
    fit = fit_sequence_head(fs, SIGNAL_LAYER, "mean", Cs=(0.01, 1.0), n_splits=4)
    assert set(fit.cv_auroc) == {0.01, 1.0} and fit.C in fit.cv_auroc
    p = head_scores(fit.head, fs)
    assert p[fs.y].mean() > p[~fs.y].mean() + 0.3


def test_fit_sequence_searches_for_its_layer_unless_given_one():
    fs = _synthetic()
    fit, choice = fit_sequence(fs, None, "mean", estimators=("logistic",))
    assert choice is not None and fit.head.layer == choice.chosen.layers[0] == SIGNAL_LAYER
    given, none = fit_sequence(fs, 0, "mean", estimator="logistic")
    assert none is None and given.head.layer == 0


def test_features_concat_keeps_both_sets_rows_in_order():
    a, b = _synthetic(3, seed=0), _synthetic(2, seed=1)
    both = a.concat(b)
    assert both.samples == a.samples + b.samples and len(both.tokens) == 10
    assert np.array_equal(both.X(SIGNAL_LAYER, "mean")[6:], b.X(SIGNAL_LAYER, "mean"))
    narrow = FeatureSet(b.samples, b.pooled[:, :, :2], b.verdict, b.n_tokens, b.truncated,
                        b.token_layers, b.tokens, b.offsets)
    with pytest.raises(InputError, match="same model"):
        a.concat(narrow)


def test_token_head_learns_gold_tokens_and_spans():
    fs = _synthetic()
    X, y = token_matrix(fs, SIGNAL_LAYER, range(len(fs.samples)), max_tokens=None)
    assert y.sum() == 3 * 40 and X.shape == (len(fs.samples) * 12, H)
    X2, y2 = token_matrix(fs, SIGNAL_LAYER, range(len(fs.samples)), max_tokens=300)
    assert y2.sum() == y.sum() and y2.size == 300
    fit = fit_token_head(fs, SIGNAL_LAYER, n_splits=3)
    assert fit.cv_auroc[fit.head.aggregate] > 0.9
    assert fit.cv_span_f1[fit.head.span_threshold] > 0.8
    assert fit.head.kind == "token" and fit.n_positive_tokens == 120


def test_attention_head_picks_its_weight_by_cv_and_reads_the_gold_tokens():
    fs, held_out = _synthetic(seed=0), _synthetic(seed=1)
    fit = fit_attention_head(fs, SIGNAL_LAYER, weight_decays=(1.0, 1e4), epochs=60)
    assert set(fit.cv_auroc) == {1.0, 1e4} and fit.weight_decay in fit.cv_auroc
    assert fit.cv_auroc[fit.weight_decay] > 0.9
    assert fit.head.estimator == "attention" and fit.head.pooling == "attention"
    assert auroc(head_scores(fit.head, held_out), held_out.y) > 0.9
    with pytest.raises(InputError, match="no per-token states at layer 0"):
        fit_attention_head(fs, 0)


def test_token_head_needs_gold_spans():
    fs = _synthetic(4)
    bare = FeatureSet(tuple(Sample(**{**s.to_dict(), "gold_spans": ()}) for s in fs.samples),
                      fs.pooled, fs.verdict, fs.n_tokens, fs.truncated, fs.token_layers,
                      fs.tokens, fs.offsets)
    with pytest.raises(InputError, match="gold spans"):
        fit_token_head(bare, SIGNAL_LAYER)


def test_evaluate_readout_calibrates_on_calib_and_counts_unscored():
    rng = np.random.default_rng(1)
    y = rng.random(400) < 0.4
    p = np.clip(0.3 + 0.3 * y + 0.2 * rng.random(400), 0, 1)
    p_test = p.copy()
    p_test[:5] = np.nan
    r = evaluate_readout("x", p[:200], y[:200], p_test, y)
    assert r.n_unscored == 5 and r.n_test == 395
    assert r.auroc_raw > 0.9 and r.ece_cal < r.ece_raw
    assert 0.0 <= r.mr_at_far <= 1.0 and r.to_dict()["name"] == "x"
    inverted = evaluate_readout("inv", 1 - p[:200], y[:200], 1 - p, y)
    assert inverted.auroc_raw < 0.1  # an inverted raw score shows, whatever the map does


def test_transfer_matrix_cells():
    fs = _synthetic()
    X, y = fs.X(SIGNAL_LAYER, "mean"), fs.y
    cats = fs.column("category")
    rows = {"all": np.arange(40), "safety": np.flatnonzero(cats[:40] == "safety")}
    cols = {"safety": 40 + np.flatnonzero(cats[40:] == "safety"), "all": np.arange(40, 80)}

    def fit_and_score(tr, te):
        sub = fs.subset(tr)
        return fit_sequence_head(sub, SIGNAL_LAYER, "mean", Cs=(0.1,), n_splits=2).head \
            .predict_proba(X[te])

    cells = transfer_matrix(fit_and_score, rows, cols, y)
    assert [(c.train, c.test) for c in cells] == [("all", "safety"), ("all", "all"),
                                                  ("safety", "safety"), ("safety", "all")]
    assert all(c.auroc > 0.7 for c in cells)
    assert curve_figures(np.array([0.5]), np.array([True]))[0] != curve_figures(
        np.array([0.5]), np.array([True]))[0]  # NaN without both classes
