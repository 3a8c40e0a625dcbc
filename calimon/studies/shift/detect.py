"""Classifier two-sample test between calibration transcripts and new ones (no labels needed).

A logistic regression learns to tell the two sets apart from the cheap feature view
(:mod:`calimon.studies.shift.features`). Its out-of-fold probabilities (stratified K-fold on the domain)
give the **domain AUROC**: 0.5 when the sets are exchangeable, 1 when they never overlap. The
**permutation p-value** refits the same out-of-fold procedure on ``B`` random relabellings of the
domain: ``p = (1 + #{AUROC_perm >= AUROC_obs}) / (B + 1)``, exact under the null that the pooled
transcripts are exchangeable (whatever the classifier). **What drives it**: the out-of-fold AUROC
of each feature group alone.

Out-of-fold probabilities ``q(x) = P(new | x)`` of the calibration rows give density ratios
``w(x) = q / (1 - q) * n_calib / n_new`` (``q`` clipped to ``[clip, 1 - clip]``), used by
:mod:`calimon.studies.shift.certify`; for them the classifier's regularization is chosen by out-of-fold
log loss among ``WEIGHT_CS`` (the test itself uses C = 1, fixed, so its p-value stays exact).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from calimon.errors import InputError
from calimon.progress import Progress
from calimon.studies.shift.features import FeatureView

DEFAULT_PERMUTATIONS = 200
CLIP = 0.01  # domain probabilities are clipped to [CLIP, 1 - CLIP] for density ratios
OUTSIDE_Q = 0.99  # a new transcript with P(new | x) above this has no calibration neighbour


def _auroc(y: np.ndarray, p: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, p))


def oof_domain_probs(X: np.ndarray, d: np.ndarray, *, folds: int = 5, seed: int = 0,
                     C: float = 1.0, groups: np.ndarray | None = None) -> np.ndarray:
    """Out-of-fold ``P(new | x)`` from a logistic regression, K-fold stratified on ``d`` and,
    with ``groups``, grouped (both members of a pair are always in the same fold:
    scikit-learn's `StratifiedGroupKFold` folds, computed by `calimon.studies.shift.folds`)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold

    from calimon.studies.shift.folds import stratified_group_splits

    k = int(min(folds, np.bincount(d).min()))
    if k < 2:
        raise InputError("the shift check needs at least 2 transcripts on each side",
                         field="transcripts")
    if groups is None:
        splits = StratifiedKFold(k, shuffle=True, random_state=seed).split(X, d)
    else:
        k = int(min(k, len(np.unique(groups[d == 0])), len(np.unique(groups[d == 1]))))
        if k < 2:
            raise InputError("the shift check needs at least 2 pairs on each side",
                             field="transcripts")
        splits = stratified_group_splits(d, groups, k, seed)
    out = np.empty(d.size)
    for tr, te in splits:
        clf = LogisticRegression(C=C, max_iter=500)
        clf.fit(X[tr], d[tr])
        out[te] = clf.predict_proba(X[te])[:, 1]
    return out


WEIGHT_CS = (0.01, 0.1, 1.0)


def _ratio_probs(view: FeatureView, d: np.ndarray, g: np.ndarray | None, folds: int, seed: int,
                 q1: np.ndarray, tick: Callable[[int], None] = lambda n: None
                 ) -> tuple[np.ndarray, float]:
    """Out-of-fold domain probabilities for the density ratios: the regularization among
    ``WEIGHT_CS`` with the lowest out-of-fold log loss (an overfitted classifier gives extreme
    probabilities, hence wild weights, even with no shift). ``q1``: the C = 1 probabilities."""
    from sklearn.metrics import log_loss

    best = (log_loss(d, q1), 1.0, q1)
    for c in WEIGHT_CS:
        if c == 1.0:
            continue
        q = oof_domain_probs(view.X, d, folds=folds, seed=seed, groups=g, C=c)
        tick(1)
        best = min(best, (log_loss(d, q), c, q), key=lambda t: t[0])
    return best[2], best[1]


def _permuted(d: np.ndarray, groups: np.ndarray | None, rng) -> np.ndarray:
    """Domain labels permuted over the exchangeable units: rows, or whole groups."""
    if groups is None:
        return rng.permutation(d)
    _, first, inverse = np.unique(groups, return_index=True, return_inverse=True)
    return rng.permutation(d[first])[inverse]


@dataclass(frozen=True, eq=False)
class ShiftReport:
    """The diagnosis of one calibration set against one new set.

    ``auroc``: out-of-fold domain AUROC; ``p_value``: permutation p-value over
    ``permutations`` relabellings (seeded by ``seed``); ``by_group``: AUROC of each feature group
    alone; ``outside_share``: share of new transcripts with ``P(new | x) > 0.99`` (no calibration
    neighbour); ``weights``: density ratio per calibration row (input order), see module doc.
    """

    n_calib: int
    n_new: int
    auroc: float
    p_value: float
    permutations: int
    by_group: dict[str, float]
    outside_share: float
    groups: tuple[str, ...]
    seed: int
    alpha_test: float
    weights_C: float
    weights: np.ndarray = field(repr=False)
    q_new: np.ndarray = field(repr=False)

    @property
    def shifted(self) -> bool:
        """True when the permutation test rejects exchangeability at ``alpha_test``."""
        return self.p_value <= self.alpha_test

    @property
    def driver(self) -> str | None:
        """The feature group whose AUROC alone is highest, when that is above 0.5 (a group at
        or below chance tells the sets apart no better than a coin, so it drives nothing)."""
        best = max(self.by_group, key=lambda g: self.by_group[g], default=None)
        return best if best is not None and self.by_group[best] > 0.5 else None

    def ess_share(self) -> float:
        """Kish effective sample size of all calibration rows over their count."""
        w = self.weights
        return float(w.sum() ** 2 / (w ** 2).sum() / w.size)

    def line(self) -> str:
        """The one-line summary printed by the commands that apply thresholds."""
        verdict = "SHIFT DETECTED" if self.shifted else "no shift detected"
        # a driver only for a shift that was found, and only a group above chance
        driver = f"driven by {self.driver}; " if self.shifted and self.driver else ""
        return (f"shift check: {verdict} (domain AUROC {self.auroc:.3f}, p = {self.p_value:.3g}, "
                f"{self.permutations} permutations; {driver}"
                f"{self.n_calib} calibration vs {self.n_new} new transcripts)")

    def to_dict(self) -> dict[str, Any]:
        """The report as a JSON-ready dict: the test's figures and a summary of the weights."""
        return {"n_calib": self.n_calib, "n_new": self.n_new, "auroc": self.auroc,
                "p_value": self.p_value, "permutations": self.permutations,
                "shifted": self.shifted, "alpha_test": self.alpha_test,
                "by_group": self.by_group, "driver": self.driver,
                "outside_share": self.outside_share, "groups": list(self.groups),
                "seed": self.seed, "ess_share_all_calib": self.ess_share(),
                "weights_C": self.weights_C,
                "weights": {"min": float(self.weights.min()), "max": float(self.weights.max()),
                            "mean": float(self.weights.mean())}}


def two_sample_test(view: FeatureView, *, permutations: int = DEFAULT_PERMUTATIONS,
                    folds: int = 5, seed: int = 0, alpha_test: float = 0.05,
                    groups: Any = None, stop_hits: int | None = None,
                    progress: Progress | None = None) -> ShiftReport:
    """Domain-classifier two-sample test on ``view`` (calibration rows first, then new).

    ``stop_hits``: stop permuting once that many relabellings reach the observed AUROC, with
    the p-value ``hits / b`` after ``b`` relabellings (Besag & Clifford, Biometrika 1991: still
    exact under the null); a shifted set, which no relabelling reaches, runs them all. The
    report's ``permutations`` is the number run.

    ``groups`` (one key per row, e.g. the pair id): rows that are not exchangeable on their
    own, such as the two members of a pair that share a request. Folds then keep a group
    together and the permutations move whole groups; without this, a pair's twin in the
    training folds gives its domain away and the test fires on data with no shift.

    Runs with one BLAS thread: the fits are small, and on a shared machine threads spinning
    for a core cost several times the work (measured: 13 s against 113 s wall for 50
    permutations of 2,000 transcripts). ``progress``: one bar over the classifier's
    out-of-fold fits (`calimon.progress`)."""
    from threadpoolctl import threadpool_limits

    from calimon.progress import ticker

    d = view.domain.astype(int)
    g = None
    if groups is not None:
        g = np.asarray([f"{k}\x00{dom}" for k, dom in zip(groups, d, strict=True)], dtype=object)
    fits = 1 + max(permutations, 0) + len(view.groups) + len(WEIGHT_CS) - 1
    tick = ticker(progress, "shift check: domain classifier fits", fits)
    with threadpool_limits(1):
        return _two_sample_test(view, d, g, permutations, folds, seed, alpha_test, stop_hits,
                                tick or (lambda n: None))


def _two_sample_test(view: FeatureView, d: np.ndarray, g: np.ndarray | None, permutations: int,
                     folds: int, seed: int, alpha_test: float,
                     stop_hits: int | None, tick: Callable[[int], None]) -> ShiftReport:
    if permutations < 0:
        raise InputError(f"expected permutations >= 0, got {permutations}",
                         field="permutations")
    q = oof_domain_probs(view.X, d, folds=folds, seed=seed, groups=g)
    obs = _auroc(d, q)
    tick(1)
    rng = np.random.default_rng(seed)
    hits, ran, p_value = 0, 0, None
    for _ in range(permutations):
        dp = _permuted(d, g, rng)
        ran += 1
        if min(np.bincount(dp, minlength=2)) < 2:
            hits += 1  # a degenerate relabelling counts against the observed statistic
        else:
            hits += _auroc(dp, oof_domain_probs(view.X, dp, folds=folds, seed=seed,
                                                groups=g)) >= obs
        tick(1)
        if stop_hits is not None and hits >= stop_hits:
            p_value = hits / ran
            break
    by_group = {}
    for k in view.groups:
        by_group[k] = _auroc(d, oof_domain_probs(view.columns([k]), d, folds=folds, seed=seed,
                                                 groups=g))
        tick(1)
    q, weights_c = _ratio_probs(view, d, g, folds, seed, q, tick)
    qc = np.clip(q[: view.n_calib], CLIP, 1 - CLIP)
    weights = qc / (1 - qc) * view.n_calib / view.n_new
    q_new = q[view.n_calib:]
    return ShiftReport(n_calib=view.n_calib, n_new=view.n_new, auroc=obs,
                       p_value=(1 + hits) / (ran + 1) if p_value is None else p_value,
                       permutations=ran,
                       by_group=by_group, outside_share=float(np.mean(q_new > OUTSIDE_Q)),
                       groups=tuple(view.groups), seed=seed, alpha_test=alpha_test,
                       weights_C=weights_c,
                       weights=weights, q_new=q_new)
