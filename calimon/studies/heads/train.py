"""Fitting heads from cached features: pair-grouped cross-validation, the layer sweep, the
sequence head, the attention head and the token head. Everything here is deterministic given
``seed``.

Validation folds come from :func:`calimon.calibration.crossfit.make_folds` (scikit-learn's
``StratifiedGroupKFold`` over pair ids), so the two transcripts of a pair are always in the same
fold; standardization is refitted inside every training fold.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from calimon.calibration.crossfit import make_folds
from calimon.errors import InputError
from calimon.numerics.metrics import auroc
from calimon.scoring.probes.attention import attention_scores, fit_attention_probe
from calimon.scoring.probes.capture import POOLINGS
from calimon.scoring.probes.features import FeatureSet
from calimon.scoring.probes.head import (
    AGGREGATES,
    ATTENTION_POOLING,
    ProbeHead,
    aggregate,
    fit_logistic,
    fit_mlp,
)
from calimon.scoring.probes.labels import span_offsets
from calimon.studies.heads.recipe import (
    ATTENTION_EPOCHS,
    ATTENTION_WDS,
    SWEEP_C,
    Recipe,
    RecipeChoice,
    features_of,
    search_recipe,
)

DEFAULT_CS = (0.001, 0.01, 0.1, 1.0)


def _fit(X, y, estimator: str, C: float, seed: int,
         sample_weight: np.ndarray | None = None) -> dict[str, np.ndarray]:
    if estimator == "logistic":
        return fit_logistic(X, y, C=C, sample_weight=sample_weight)
    if estimator == "mlp":
        return fit_mlp(X, y, weight_decay=1.0 / C / max(len(y), 1), seed=seed,
                       sample_weight=sample_weight)
    raise InputError(f"expected 'logistic' or 'mlp', got {estimator!r}", field="estimator")


def oof_scores(X: np.ndarray, y: np.ndarray, groups: Sequence, *, C: float = SWEEP_C,
               estimator: str = "logistic", n_splits: int = 5, seed: int = 0,
               sample_weight: np.ndarray | None = None,
               folds: tuple[np.ndarray, int] | None = None) -> np.ndarray:
    """Out-of-fold P(misbehavior) of a sequence head: each sample scored by a head fitted
    without its pair (weighted by ``sample_weight`` when given; default class-balanced).
    ``folds``: `make_folds`'s (fold per sample, count) when already made."""
    y = np.asarray(y, dtype=bool)
    folds, k = folds or make_folds(y, list(groups), n_splits, seed)[:2]
    out = np.empty(y.shape[0])
    for f in range(k):
        tr, te = folds != f, folds == f
        w = None if sample_weight is None else sample_weight[tr]
        params = _fit(X[tr], y[tr], estimator, C, seed, w)
        out[te] = ProbeHead("sequence", estimator, 0, params, pooling="mean").predict_proba(X[te])
    return out


@dataclass(frozen=True)
class SweepRow:
    """Cross-validated AUROC at one (layer, pooling)."""

    layer: int
    pooling: str
    cv_auroc: float


@dataclass(frozen=True)
class LayerSweep:
    """The layer sweep's rows and the settings it ran with."""

    rows: tuple[SweepRow, ...]
    C: float
    n_splits: int
    n_samples: int

    def best(self, pooling: str | None = None) -> SweepRow:
        """Highest cross-validated AUROC (ties: the shallower layer)."""
        rows = [r for r in self.rows if pooling is None or r.pooling == pooling]
        if not rows:
            raise InputError(f"the sweep has no rows for pooling {pooling!r}", field="pooling")
        return max(rows, key=lambda r: (r.cv_auroc, -r.layer))

    def table(self) -> dict[str, dict[int, float]]:
        """``{pooling: {layer: cv_auroc}}``."""
        out: dict[str, dict[int, float]] = {}
        for r in self.rows:
            out.setdefault(r.pooling, {})[r.layer] = r.cv_auroc
        return out


def layer_sweep(fs: FeatureSet, *, layers: Sequence[int] | None = None,
                poolings: Sequence[str] = POOLINGS, C: float = SWEEP_C, n_splits: int = 5,
                seed: int = 0) -> LayerSweep:
    """Pair-grouped cross-validated AUROC of a logistic sequence head at every (layer,
    pooling), on the samples of ``fs`` (pass the train split only)."""
    layers = range(fs.num_layers + 1) if layers is None else layers
    y, g = fs.y, fs.groups
    rows = [SweepRow(int(layer), p, auroc(oof_scores(fs.X(layer, p), y, g, C=C,
                                                     n_splits=n_splits, seed=seed), y))
            for p in poolings for layer in layers]
    return LayerSweep(tuple(rows), C, n_splits, len(fs.samples))


@dataclass(frozen=True)
class SequenceFit:
    """A fitted sequence head, the chosen C and the CV AUROC of every C tried."""

    head: ProbeHead
    C: float
    cv_auroc: dict[float, float] = field(default_factory=dict)


def fit_sequence_head(fs: FeatureSet, layer: int, pooling: str = "mean", *,
                      estimator: str = "logistic", Cs: Sequence[float] = DEFAULT_CS,
                      n_splits: int = 5, seed: int = 0,
                      sample_weight: np.ndarray | None = None,
                      layers: Sequence[int] | None = None) -> SequenceFit:
    """Pick C by pair-grouped CV AUROC on ``fs``, then fit on all of ``fs`` (rows weighted by
    ``sample_weight`` when given). ``layers``: several layers' pooled states, concatenated
    (the first is ``layer``)."""
    layers = tuple(layers) if layers and len(layers) > 1 else ()
    X = features_of(fs, Recipe(estimator, layers or (layer,), pooling))
    y, g = fs.y, fs.groups
    folds = make_folds(y, list(g), n_splits, seed)[:2]  # once for every C
    scores = {float(C): auroc(oof_scores(X, y, g, C=C, estimator=estimator, folds=folds,
                                         seed=seed, sample_weight=sample_weight), y)
              for C in Cs}
    best = max(scores, key=lambda c: (np.nan_to_num(scores[c], nan=-1.0), -c))
    head = ProbeHead("sequence", estimator, int(layer),
                     _fit(X, y, estimator, best, seed, sample_weight), pooling=pooling,
                     layers=layers)
    return SequenceFit(head, best, scores)


def fit_sequence(fs: FeatureSet, layer: int | None = None, pooling: str | None = None, *,
                 estimator: str | None = None, seed: int = 0,
                 sample_weight: np.ndarray | None = None, concat: bool = True,
                 estimators: Sequence[str] = ("logistic", "mlp", "attention"),
                 layers: Sequence[int] | None = None,
                 ) -> tuple[SequenceFit | AttentionFit, RecipeChoice | None]:
    """A sequence head as ``calimon heads train`` fits one: its recipe (layer, pooling, one or
    two layers, estimator) chosen by `calimon.studies.heads.recipe.search_recipe` on ``fs``
    among those ``layer``/``pooling``/``estimator`` leave (each None: free), then its C (or an
    attention head's L2 weight) by pair-grouped CV AUROC, rows weighted by ``sample_weight``.
    With all three given (or a given layer and ``layers``) nothing is searched and the choice
    is None."""
    if layer is not None and pooling is not None and estimator is not None:
        choice, recipe = None, Recipe(estimator, tuple(layers or (layer,)), pooling)
    else:
        pinned = {k: v for k, v in (("layer", layer), ("pooling", pooling),
                                    ("estimator", estimator)) if v is not None}
        choice = search_recipe(
            fs, layers=[layer] if layer is not None else None,
            poolings=[pooling] if pooling is not None else POOLINGS,
            estimators=[estimator] if estimator is not None else estimators,
            concat=concat and layer is None, seed=seed, sample_weight=sample_weight,
            pinned=pinned, **({"mlp_min_rows": 0} if estimator == "mlp" else {}))
        recipe = choice.chosen
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        return _fit_recipe(fs, recipe, choice, seed, sample_weight)


def _fit_recipe(fs, recipe: Recipe, choice, seed: int, sample_weight):
    if recipe.estimator == "attention":
        if choice is None:
            return fit_attention_head(fs, recipe.layers[0], seed=seed), choice
        return _attention_from(fs, choice, seed), choice
    return fit_sequence_head(fs, recipe.layers[0], recipe.pooling, estimator=recipe.estimator,
                             seed=seed, sample_weight=sample_weight,
                             layers=recipe.layers), choice


def _attention_from(fs: FeatureSet, choice: RecipeChoice, seed: int) -> AttentionFit:
    """The chosen attention candidate fitted on all of ``fs`` at the L2 weight its CV chose."""
    from calimon.scoring.probes.attention import fit_attention_probe

    c = next(c for c in choice.candidates if c.recipe == choice.chosen)
    layer = c.recipe.layers[0]
    params = fit_attention_probe([fs.token_states(i, layer) for i in range(len(fs.samples))],
                                 fs.y, weight_decay=c.weight_decay, epochs=ATTENTION_EPOCHS,
                                 seed=seed)
    head = ProbeHead("sequence", "attention", int(layer), params, pooling=ATTENTION_POOLING)
    return AttentionFit(head, float(c.weight_decay), {float(c.weight_decay): c.cv_auroc})


@dataclass(frozen=True)
class AttentionFit:
    """A fitted attention head, the chosen L2 weight and the CV AUROC of every weight tried."""

    head: ProbeHead
    weight_decay: float
    cv_auroc: dict[float, float] = field(default_factory=dict)


def fit_attention_head(fs: FeatureSet, layer: int, *,
                       weight_decays: Sequence[float] = ATTENTION_WDS,
                       epochs: int = ATTENTION_EPOCHS, n_splits: int = 3,
                       seed: int = 0) -> AttentionFit:
    """An attention-pooled probe (`calimon.scoring.probes.attention`) on the per-token states of
    ``layer``: the L2 weight by pair-grouped CV AUROC on ``fs`` (ties: the larger weight),
    then fitted on all of ``fs``."""
    y = fs.y
    states = [fs.token_states(i, layer) for i in range(len(fs.samples))]
    folds, k, _ = make_folds(y, list(fs.groups), n_splits, seed)
    cv = {}
    for wd in weight_decays:
        oof = np.full(len(y), np.nan)
        for f in range(k):
            tr, te = np.flatnonzero(folds != f), np.flatnonzero(folds == f)
            params = fit_attention_probe([states[i] for i in tr], y[tr], weight_decay=wd,
                                         epochs=epochs, seed=seed)
            oof[te] = attention_scores(params, [states[i] for i in te])
        ok = np.isfinite(oof)
        cv[float(wd)] = auroc(oof[ok], y[ok])
    best = max(cv, key=lambda w: (np.nan_to_num(cv[w], nan=-1.0), w))
    params = fit_attention_probe(states, y, weight_decay=best, epochs=epochs, seed=seed)
    head = ProbeHead("sequence", "attention", int(layer), params, pooling=ATTENTION_POOLING)
    return AttentionFit(head, best, cv)


# -- token head -------------------------------------------------------------------------------

def token_matrix(fs: FeatureSet, layer: int, rows: Sequence[int], *, max_tokens: int | None,
                 seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Stacked token states and 0/1 labels of the samples ``rows`` (ignored tokens dropped).
    Above ``max_tokens``, negatives are subsampled (seeded); every positive is kept."""
    X = [fs.token_states(i, layer) for i in rows]
    y = [fs.token_labels(i) for i in rows]
    X = np.concatenate(X) if X else np.empty((0, fs.hidden_size), np.float16)
    y = np.concatenate(y) if y else np.empty(0, np.int8)
    keep = y >= 0
    X, y = X[keep], y[keep].astype(bool)
    if max_tokens is not None and y.size > max_tokens:
        rng = np.random.default_rng(seed)
        neg = np.flatnonzero(~y)
        n_neg = max(max_tokens - int(y.sum()), 0)
        pick = np.sort(np.r_[np.flatnonzero(y), rng.choice(neg, min(n_neg, neg.size),
                                                           replace=False)])
        X, y = X[pick], y[pick]
    return X.astype(np.float32), y


def token_probs(head: ProbeHead, fs: FeatureSet, i: int) -> np.ndarray:
    """A token head's P(misbehavior) per response token of sample ``i``."""
    return head.predict_proba(fs.token_states(i, head.layer).astype(np.float32))


@dataclass(frozen=True)
class TokenFit:
    """A fitted token head with its out-of-fold figures and training token counts."""

    head: ProbeHead
    cv_auroc: dict[str, float]  # sequence AUROC of each aggregation, out of fold
    cv_span_f1: dict[float, float]  # char F1 of spans at each threshold, out of fold
    n_tokens: int
    n_positive_tokens: int


def span_rows(fs: FeatureSet, probs: Sequence[np.ndarray], threshold: float) -> list:
    """One span row (`calimon.numerics.span_metrics.span_row_from_sample`) per misbehaving sample of
    ``fs`` with gold spans: its token-score spans at ``threshold`` against the gold ones."""
    from calimon.numerics.span_metrics import span_row_from_sample, spans_from_token_scores

    rows = []
    for i, s in enumerate(fs.samples):
        if s.label and s.gold_spans:
            pred = spans_from_token_scores(span_offsets(fs.offsets[i]), probs[i], threshold,
                                           text=s.response)
            rows.append(span_row_from_sample(s, pred))
    return rows


def span_f1(fs: FeatureSet, probs: Sequence[np.ndarray], threshold: float) -> float:
    """Micro character F1 of token-score spans on the misbehaving samples of ``fs``."""
    from calimon.numerics.span_metrics import span_metrics

    rows = span_rows(fs, probs, threshold)
    return span_metrics(rows).overall.f1 if rows else float("nan")


def fit_token_head(fs: FeatureSet, layer: int, *, C: float = 0.1, n_splits: int = 3,
                   max_tokens: int | None = 200_000, seed: int = 0,
                   thresholds: Sequence[float] = tuple(np.round(np.arange(0.05, 1.0, 0.05), 2))
                   ) -> TokenFit:
    """A per-token logistic probe on gold-span labels. Out-of-fold (pair-grouped) token
    scores choose the aggregation (best sequence AUROC) and the span threshold (best char F1);
    the final head is fitted on all of ``fs``."""
    y_seq = fs.y
    if not any(s.label and s.gold_spans for s in fs.samples):
        raise InputError("a token head needs misbehaving samples with gold spans", field="samples")
    folds, k, _ = make_folds(y_seq, list(fs.groups), n_splits, seed)
    oof: list[np.ndarray] = [np.empty(0)] * len(fs.samples)
    for f in range(k):
        tr = np.flatnonzero(folds != f)
        X, y = token_matrix(fs, layer, tr, max_tokens=max_tokens, seed=seed)
        head = ProbeHead("token", "logistic", layer, fit_logistic(X, y, C=C))
        for i in np.flatnonzero(folds == f):
            oof[i] = token_probs(head, fs, int(i))
    cv_auroc = {}
    for how in AGGREGATES:
        s = np.array([aggregate(p, how) for p in oof])
        ok = np.isfinite(s)
        cv_auroc[how] = auroc(s[ok], y_seq[ok])
    best_agg = max(AGGREGATES, key=lambda a: np.nan_to_num(cv_auroc[a], nan=-1.0))
    cv_f1 = {float(t): span_f1(fs, oof, float(t)) for t in thresholds}
    best_t = max(cv_f1, key=lambda t: (np.nan_to_num(cv_f1[t], nan=-1.0), t))
    X, y = token_matrix(fs, layer, range(len(fs.samples)), max_tokens=max_tokens, seed=seed)
    head = ProbeHead("token", "logistic", int(layer), fit_logistic(X, y, C=C),
                     aggregate=best_agg, span_threshold=best_t)
    return TokenFit(head, cv_auroc, cv_f1, int(y.size), int(y.sum()))


def head_scores(head: ProbeHead, fs: FeatureSet) -> np.ndarray:
    """Transcript scores of a head on cached features (NaN where a token head has no tokens)."""
    if head.estimator == "attention":
        return head.score_states([fs.token_states(i, head.layer)
                                  for i in range(len(fs.samples))])
    if head.kind == "sequence":
        return head.predict_proba(head.pooled_features(fs.X))
    return np.array([head.sequence_score(token_probs(head, fs, i))
                     for i in range(len(fs.samples))])
