"""The recipe of a sequence head, chosen by pair-grouped cross-validation on its training data.

Candidates, every one scored on the same pair-grouped folds (`make_folds`, the two transcripts
of a pair never split) at the layer sweep's ``C`` (`SWEEP_C`), rows weighted as the head will be
(reviewed labels) and the out-of-fold AUROC weighted the same way:

1. a logistic head at every `STRIDE`-th layer (0, 2, 4, ...) in each pooling the features hold
   (``last``, ``mean``, ``max``), then at the two layers beside the best of them (its pooling);
2. two layers concatenated: the best single candidate's layer with each of the next
   `CONCAT_OTHERS` best layers of its pooling at least two layers away;
3. the MLP (`calimon.scoring.probes.head.fit_mlp`) at the best single candidate's layer and
   pooling, from `MLP_MIN_ROWS` training rows on (below, 37k weights on a few hundred rows
   only overfit, and its fits would dominate the search's cost);
4. the attention-pooled probe at each layer whose per-token states the features hold (its L2
   weight the best of `ATTENTION_WDS` on the same folds).

The choice is the **one-standard-error rule**: the best CV AUROC's standard error is the spread
of its per-fold AUROCs over sqrt(folds); of the candidates within one standard error of the best,
the simplest (one-layer logistic, then two layers, then the MLP, then attention), and among those
the highest CV AUROC. A flag that pins the layer, pooling or estimator leaves only the candidates
that match it. ``C`` is then chosen for the recipe as before (`fit_sequence_head`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from calimon.calibration.crossfit import make_folds
from calimon.errors import InputError
from calimon.numerics.metrics import auroc
from calimon.scoring.probes.capture import POOLINGS
from calimon.scoring.probes.features import FeatureSet
from calimon.scoring.probes.head import ATTENTION_POOLING, ProbeHead, fit_logistic, fit_mlp

SWEEP_C = 0.01
STRIDE = 2
CONCAT_OTHERS = 2
MLP_MIN_ROWS = 1000
ATTENTION_WDS = (10.0, 100.0, 1000.0)  # L2 weight x n: C = 0.1, 0.01, 0.001 of logistic heads
ATTENTION_EPOCHS = 15
RULE = ("one-standard-error rule: of the candidates whose pair-grouped CV AUROC is within one "
        "standard error (per-fold spread / sqrt(folds)) of the best, the simplest "
        "(logistic on one layer < two layers < mlp < attention), then the highest CV AUROC")
_ORDER = {"logistic": 0, "mlp": 2, "attention": 3}


@dataclass(frozen=True)
class Recipe:
    """What a sequence head reads and how: estimator, layers (concatenated when several) and
    pooling (``attention`` for an attention head)."""

    estimator: str
    layers: tuple[int, ...]
    pooling: str

    @property
    def label(self) -> str:
        """``"logistic 11 max"``, ``"logistic 11+17 max"``, ``"attention 15"``."""
        at = "+".join(str(k) for k in self.layers)
        return f"{self.estimator} {at}" + ("" if self.estimator == "attention"
                                          else f" {self.pooling}")

    @property
    def complexity(self) -> int:
        """The rule's order: one-layer logistic 0, two layers 1, mlp 2, attention 3."""
        return _ORDER[self.estimator] + (len(self.layers) > 1)


@dataclass(frozen=True)
class Candidate:
    """A recipe's pooled out-of-fold AUROC and the standard error of its per-fold AUROCs."""

    recipe: Recipe
    cv_auroc: float
    cv_se: float
    weight_decay: float | None = None  # an attention candidate's L2 weight (the best tried)


@dataclass(frozen=True)
class RecipeChoice:
    """Every candidate (in the order tried), the chosen recipe, the rule and the reason."""

    candidates: tuple[Candidate, ...]
    chosen: Recipe
    reason: str
    n_splits: int
    C: float = SWEEP_C
    pinned: dict = field(default_factory=dict)
    seconds: float = 0.0
    rule: str = RULE

    def ref(self):
        """The card's `RecipeRef`."""
        from calimon.scoring.probes.artifacts import RecipeCandidate, RecipeRef

        def num(v):
            return None if v is None or not np.isfinite(v) else round(float(v), 6)

        return RecipeRef(rule=self.rule, chosen=self.chosen.label, reason=self.reason,
                         pinned=self.pinned, C=self.C, n_splits=self.n_splits,
                         seconds=round(self.seconds, 3),
                         candidates=[RecipeCandidate(recipe=c.recipe.label,
                                                     cv_auroc=num(c.cv_auroc),
                                                     cv_se=num(c.cv_se))
                                     for c in self.candidates])


def weighted_auroc(p: np.ndarray, y: np.ndarray, w: np.ndarray | None = None) -> float:
    """AUROC of scores ``p`` (rows weighted by ``w`` when given); NaN with one class."""
    y = np.asarray(y, dtype=bool)
    if y.all() or not y.any():
        return float("nan")
    if w is None:
        return auroc(p, y)
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, p, sample_weight=w))


def cv_candidate(fit_predict: Callable, n: int, y: np.ndarray, folds: np.ndarray, k: int,
                 w: np.ndarray | None) -> tuple[float, float]:
    """(pooled out-of-fold AUROC, standard error of the per-fold AUROCs) of
    ``fit_predict(train_idx, test_idx) -> scores of test_idx``."""
    oof = np.full(n, np.nan)
    per = []
    for f in range(k):
        tr, te = np.flatnonzero(folds != f), np.flatnonzero(folds == f)
        oof[te] = fit_predict(tr, te)
        ok = te[np.isfinite(oof[te])]
        per.append(weighted_auroc(oof[ok], y[ok], None if w is None else w[ok]))
    ok = np.isfinite(oof)
    per = np.array([a for a in per if np.isfinite(a)])
    se = float(per.std(ddof=1) / np.sqrt(per.size)) if per.size > 1 else float("nan")
    return weighted_auroc(oof[ok], y[ok], None if w is None else w[ok]), se


def _pooled_fitter(X: np.ndarray, y: np.ndarray, w: np.ndarray | None, estimator: str,
                   C: float, seed: int) -> Callable:
    def fit_predict(tr, te):
        if estimator == "mlp":
            params = fit_mlp(X[tr], y[tr], weight_decay=1.0 / C / max(tr.size, 1), seed=seed,
                             sample_weight=None if w is None else w[tr])
        else:
            params = fit_logistic(X[tr], y[tr], C=C,
                                  sample_weight=None if w is None else w[tr])
        return ProbeHead("sequence", estimator, 0, params, pooling="mean").predict_proba(X[te])
    return fit_predict


def _attention_fitter(fs: FeatureSet, layer: int, y: np.ndarray, wd: float, seed: int):
    from calimon.scoring.probes.attention import attention_scores, fit_attention_probe

    states = [fs.token_states(i, layer) for i in range(len(fs.samples))]

    def fit_predict(tr, te):
        params = fit_attention_probe([states[i] for i in tr], y[tr], weight_decay=wd,
                                     epochs=ATTENTION_EPOCHS, seed=seed)
        return attention_scores(params, [states[i] for i in te])
    return fit_predict


def features_of(fs: FeatureSet, recipe: Recipe) -> np.ndarray:
    """The pooled features a (non-attention) recipe reads: its layers' states, concatenated."""
    parts = [fs.X(k, recipe.pooling) for k in recipe.layers]
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)


def choose(candidates: Sequence[Candidate]) -> tuple[Recipe, str]:
    """The one-standard-error rule (module docstring): the chosen recipe and why."""
    ok = [c for c in candidates if np.isfinite(c.cv_auroc)]
    if not ok:
        raise InputError("no candidate recipe has a defined CV AUROC (one class per fold?)",
                         field="samples")
    best = max(ok, key=lambda c: (c.cv_auroc, -c.recipe.complexity))
    se = best.cv_se if np.isfinite(best.cv_se) else 0.0
    near = [c for c in ok if c.cv_auroc >= best.cv_auroc - se]
    pick = min(near, key=lambda c: (c.recipe.complexity, -c.cv_auroc, c.recipe.layers))
    why = (f"best CV AUROC {best.cv_auroc:.4f} ({best.recipe.label}, SE {se:.4f}); "
           f"{len(near)} candidate(s) within one SE")
    if pick is best:
        return pick.recipe, why + f"; {pick.recipe.label} is the simplest of them"
    return pick.recipe, why + (f"; the simplest of them is {pick.recipe.label} "
                        f"(CV AUROC {pick.cv_auroc:.4f})")


def search_recipe(fs: FeatureSet, *, layers: Sequence[int] | None = None,
                  poolings: Sequence[str] = POOLINGS,
                  estimators: Sequence[str] = ("logistic", "mlp", "attention"),
                  concat: bool = True, n_splits: int = 5, seed: int = 0, C: float = SWEEP_C,
                  sample_weight: np.ndarray | None = None, pinned: dict | None = None,
                  mlp_min_rows: int = MLP_MIN_ROWS) -> RecipeChoice:
    """Score the candidate recipes on ``fs`` (the training rows only) and choose one by the
    one-standard-error rule (module docstring). ``layers``/``poolings``/``estimators``: the
    candidates allowed (a pinned flag leaves one); attention only at layers whose per-token
    states ``fs`` holds."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):  # many small fits: threads only contend (15x slower on 2 cores)
        return _search(fs, layers, poolings, estimators, concat, n_splits, seed, C,
                       sample_weight, pinned, mlp_min_rows)


def _search(fs, layers, poolings, estimators, concat, n_splits, seed, C, sample_weight,
            pinned, mlp_min_rows) -> RecipeChoice:
    start = time.perf_counter()
    y, w = fs.y, sample_weight
    folds, k, _ = make_folds(y, list(fs.groups), n_splits, seed)
    n = len(fs.samples)
    layers = list(range(fs.num_layers + 1) if layers is None else layers)
    cands: list[Candidate] = []

    def add(recipe: Recipe, fit_predict: Callable) -> Candidate:
        c = Candidate(recipe, *cv_candidate(fit_predict, n, y, folds, k, w))
        cands.append(c)
        return c

    pooled_ests = [e for e in estimators if e != "attention"]
    singles: list[Candidate] = []

    def single(layer: int, pool: str) -> None:
        r = Recipe("logistic", (layer,), pool)
        singles.append(add(r, _pooled_fitter(features_of(fs, r), y, w, "logistic", C, seed)))

    def best_single() -> Candidate:
        return max(singles, key=lambda c: (np.nan_to_num(c.cv_auroc, nan=-1.0),
                                           -c.recipe.layers[0]))

    if pooled_ests:
        coarse = layers[::STRIDE] if len(layers) > 2 * STRIDE else layers
        for p in poolings:
            for layer in coarse:
                single(layer, p)
        top = best_single()
        for layer in (top.recipe.layers[0] - 1, top.recipe.layers[0] + 1):
            if layer in layers and layer not in coarse:
                single(layer, top.recipe.pooling)
    if singles:
        top = best_single()
        (best_layer,), pool = top.recipe.layers, top.recipe.pooling
        if concat and len(layers) > 1:
            others = sorted((c for c in singles if c.recipe.pooling == pool
                             and abs(c.recipe.layers[0] - best_layer) >= 2),
                            key=lambda c: -np.nan_to_num(c.cv_auroc, nan=-1.0))
            for c in others[:CONCAT_OTHERS]:
                r = Recipe("logistic", (best_layer, c.recipe.layers[0]), pool)
                add(r, _pooled_fitter(features_of(fs, r), y, w, "logistic", C, seed))
        if "mlp" in pooled_ests and n >= mlp_min_rows:
            r = Recipe("mlp", (best_layer,), pool)
            add(r, _pooled_fitter(features_of(fs, r), y, w, "mlp", C, seed))
        if "logistic" not in pooled_ests:
            cands[:] = [c for c in cands if c.recipe.estimator != "logistic"]
    if "attention" in estimators and w is None:  # attention fits class-balanced rows only
        for layer in [k_ for k_ in fs.token_layers if k_ in layers]:
            tried = [Candidate(Recipe("attention", (layer,), ATTENTION_POOLING),
                               *cv_candidate(_attention_fitter(fs, layer, y, wd, seed), n, y,
                                             folds, k, None), weight_decay=wd)
                     for wd in ATTENTION_WDS]
            cands.append(max(tried, key=lambda c: np.nan_to_num(c.cv_auroc, nan=-1.0)))
    if not cands:
        raise InputError(f"no candidate recipe for estimators {list(estimators)} on these "
                         "features (attention needs per-token states)", field="estimator")
    chosen, reason = choose(cands)
    return RecipeChoice(tuple(cands), chosen, reason, k, C, dict(pinned or {}),
                        time.perf_counter() - start)
