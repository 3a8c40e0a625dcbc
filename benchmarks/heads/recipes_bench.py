"""The recipes `trained_monitors.py` compares. Each is ``fit(fs_train, seed) -> score`` where
``score(fs)`` gives one P(misbehavior) per sample (NaN where it cannot score). Every
hyper-parameter is chosen by pair-grouped CV on ``fs_train`` alone.

- ``verdict``: the prompted judge's P(Yes) from the same capture pass (nothing trained).
- ``logistic`` / ``mlp``: one mean-pooled layer (picked by CV), the shipped head's recipe.
- ``multilayer``: mean-pooled states of several layers concatenated, one logistic head.
- ``pairwise``: the picked layer, a logistic head whose loss adds a within-pair ranking term
  (misbehaving above its own benign twin), its share alpha chosen by CV.
- ``token``: a token head trained on gold spans, its aggregation to a transcript score by CV.
- ``attention``: an attention-pooled probe on layer 15's per-token states (McKenzie et al.
  2025), its L2 weight by CV.
- ``augmented``: the ``logistic`` recipe on train plus one rewritten copy of every train
  transcript, both classes (`calimon.studies.heads.augment`: neutral notes, fake verdicts,
  instructions, reviewer notes, role markers). ``uses_copies`` tells the harness to add them.
"""

from __future__ import annotations

import numpy as np

from calimon.calibration.crossfit import make_folds
from calimon.numerics.metrics import auroc
from calimon.scoring.probes.head import ProbeHead, standardizer
from calimon.studies.heads.train import (
    ATTENTION_EPOCHS,
    ATTENTION_WDS,
    fit_attention_head,
    fit_sequence_head,
    fit_token_head,
    head_scores,
    layer_sweep,
)

SWEEP_LAYERS = (4, 8, 12, 15, 17, 20, 24, 28)
MULTI_LAYERS = (8, 12, 16, 20, 24, 28)
TOKEN_LAYER = 15
TOKEN_CAP = 60_000  # training tokens per fit (every positive kept, negatives subsampled)
CS = (0.001, 0.01, 0.1)


def _best_layer(fs, seed: int) -> int:
    sweep = layer_sweep(fs, layers=SWEEP_LAYERS, poolings=("mean",), n_splits=3, seed=seed)
    return sweep.best("mean").layer


def verdict(fs_train, seed: int):
    """The prompted judge's own P(Yes): no training."""
    return lambda fs: fs.verdict[:, 0].astype(float)


def _single(estimator: str):
    def fit(fs_train, seed: int):
        layer = _best_layer(fs_train, seed)
        head = fit_sequence_head(fs_train, layer, "mean", estimator=estimator, Cs=CS,
                                 n_splits=3, seed=seed).head
        return lambda fs: head_scores(head, fs)
    fit.uses_torch = estimator == "mlp"
    return fit


def _concat(fs) -> np.ndarray:
    return np.concatenate([fs.X(layer, "mean") for layer in MULTI_LAYERS], axis=1)


def multilayer(fs_train, seed: int):
    """Several mean-pooled layers side by side, one logistic head, C by CV."""
    from calimon.scoring.probes.head import fit_logistic
    from calimon.studies.heads.train import oof_scores

    X, y, g = _concat(fs_train), fs_train.y, fs_train.groups
    cv = {C: auroc(oof_scores(X, y, g, C=C, n_splits=3, seed=seed), y) for C in CS}
    best = max(cv, key=lambda c: (cv[c], -c))
    head = ProbeHead("sequence", "logistic", 0, fit_logistic(X, y, C=best), pooling="mean")
    return lambda fs: head.predict_proba(_concat(fs))


def _pair_index(fs) -> np.ndarray:
    """(k, 2) rows of (misbehaving, benign) twins of the same pair."""
    rows: dict[str, dict[bool, int]] = {}
    for i, s in enumerate(fs.samples):
        rows.setdefault(s.pair_id, {})[bool(s.label)] = i
    return np.array([[r[True], r[False]] for r in rows.values() if len(r) == 2], dtype=np.int64)


def fit_pairwise(X: np.ndarray, y: np.ndarray, pairs: np.ndarray, *, C: float, alpha: float
                 ) -> dict[str, np.ndarray]:
    """(1 - alpha) x the mean logistic loss of every sample + alpha x the mean logistic loss of
    the within-pair margins w.(x_m - x_b), on standardized X, L2 ||w||^2 / (2 C n); L-BFGS
    from zero. A direction that is constant within pairs is seen by the first term only, so
    as alpha grows the L2 term shrinks its weight (a shortcut carried by unpaired samples)."""
    from scipy.optimize import minimize
    from scipy.special import expit

    mean, scale = standardizer(X)
    Z = (X - mean) / scale
    D = Z[pairs[:, 0]] - Z[pairs[:, 1]] if len(pairs) else np.zeros((0, Z.shape[1]))
    t = np.where(y, 1.0, -1.0)
    n = len(y)

    def loss(theta):
        w, b = theta[:-1], theta[-1]
        m = t * (Z @ w + b)
        d = D @ w
        nd = max(len(D), 1)
        val = ((1 - alpha) * np.logaddexp(0, -m).sum() / n
               + alpha * np.logaddexp(0, -d).sum() / nd)
        val += (w @ w) / (2 * C * n)
        gm = -(1 - alpha) * t * expit(-m) / n
        gd = -alpha * expit(-d) / nd
        grad_w = Z.T @ gm + D.T @ gd + w / (C * n)
        return val, np.r_[grad_w, gm.sum()]

    res = minimize(loss, np.zeros(Z.shape[1] + 1), jac=True, method="L-BFGS-B",
                   options={"maxiter": 500})
    return {"mean": mean, "scale": scale, "coef": res.x[:-1], "intercept": np.array([res.x[-1]])}


def pairwise(fs_train, seed: int):
    """The picked layer with the pair-ranking term; (C, weight) by pair-grouped CV."""
    layer = _best_layer(fs_train, seed)
    X, y = fs_train.X(layer, "mean"), fs_train.y
    folds, k, _ = make_folds(y, list(fs_train.groups), 3, seed)
    grid = [(C, alpha) for C in CS for alpha in (0.0, 0.5, 0.9)]
    cv = {}
    for C, alpha in grid:
        oof = np.empty(len(y))
        for f in range(k):
            tr, te = folds != f, folds == f
            sub = fs_train.subset(tr)
            params = fit_pairwise(X[tr], y[tr], _pair_index(sub), C=C, alpha=alpha)
            oof[te] = ProbeHead("sequence", "logistic", layer, params,
                                pooling="mean").predict_proba(X[te])
        cv[(C, alpha)] = auroc(oof, y)
    C, alpha = max(cv, key=lambda g: (cv[g], -g[0], -g[1]))
    head = ProbeHead("sequence", "logistic", layer,
                     fit_pairwise(X, y, _pair_index(fs_train), C=C, alpha=alpha), pooling="mean")
    return lambda fs: head_scores(head, fs)


def token_span_figures(head, fs, rows: np.ndarray) -> dict:
    """Character F1 and hit@1 of a token head's spans (its CV-picked threshold) against the
    gold spans of the misbehaving samples among ``rows``."""
    from calimon.numerics.span_metrics import span_metrics
    from calimon.studies.heads.train import span_rows, token_probs

    sub = fs.subset(rows)
    got = span_rows(sub, [token_probs(head, sub, i) for i in range(len(sub.samples))],
                    head.span_threshold)
    if not got:
        return {}
    m = span_metrics(got).overall
    return {"span_f1": round(float(m.f1), 4), "span_hit_at_1": round(float(m.hit_at_1), 4),
            "span_n": len(got), "span_threshold": head.span_threshold}


def token(fs_train, seed: int):
    """A token head on gold spans (layer 15), aggregation by out-of-fold AUROC; its scorer
    also reports span figures (``span_figures(fs, rows)``)."""
    head = fit_token_head(fs_train, TOKEN_LAYER, n_splits=3, max_tokens=TOKEN_CAP, seed=seed).head

    def score(fs):
        return head_scores(head, fs)

    score.span_figures = lambda fs, rows: token_span_figures(head, fs, rows)
    return score


def attention(fs_train, seed: int):
    """Attention pooling over layer 15's tokens; the L2 weight by pair-grouped CV
    (`calimon.studies.heads.train.fit_attention_head`, the recipe `calimon heads train --estimator
    attention` saves)."""
    head = fit_attention_head(fs_train, TOKEN_LAYER, weight_decays=ATTENTION_WDS,
                              epochs=ATTENTION_EPOCHS, n_splits=3, seed=seed).head
    return lambda fs: head_scores(head, fs)


attention.uses_torch = True


def augmented(fs_train, seed: int):
    """The single-layer logistic recipe on train and its rewritten copies (added by the
    harness: ``uses_copies``)."""
    return _single("logistic")(fs_train, seed)


augmented.uses_copies = True

RECIPES = {"verdict": verdict, "logistic": _single("logistic"), "mlp": _single("mlp"),
           "multilayer": multilayer, "pairwise": pairwise, "token": token, "attention": attention,
           "augmented": augmented}
DEFAULT = ("verdict", "logistic", "multilayer", "pairwise", "token", "attention",
           "augmented")  # mlp: slow on 2 cores
