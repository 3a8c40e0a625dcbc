"""Thresholds with finite-sample guarantees: exact Clopper-Pearson bounds and Learn-then-Test.

Convention: a transcript is flagged iff ``score >= threshold``.
``FAR(t) = P(score >= t | benign)`` and ``MR(t) = P(score < t | misbehavior)`` are *population*
rates over the deployment traffic of each class.

**What ``certify_far`` promises.** Let the ``n`` calibration benign scores be i.i.d. draws from
the same distribution as the benign transcripts met in deployment (exchangeable with them).
Then, with probability at least ``1 - delta`` over the draw of the calibration set, the returned
threshold has ``FAR <= alpha`` on deployment benign traffic. The probability is over the
calibration sample, not over deployment transcripts: in about a fraction ``delta`` of the
calibration sets one could have drawn, the certificate is wrong. It says nothing once the
benign distribution shifts (new model, new prompt template, new kind of traffic).

**Why Learn-then-Test.** Scanning many thresholds and keeping one whose own Clopper-Pearson
bound is below ``alpha`` is a multiple-testing problem: each bound holds at ``1 - delta`` for a
threshold fixed in advance, not for one picked after looking. Learn-then-Test (Angelopoulos et
al., 2021) treats every threshold ``t`` as a test of ``H_t: FAR(t) > alpha`` with the exact
binomial p-value ``P(Binom(n, alpha) <= k_t)`` (``k_t`` = calibration false alarms at ``t``),
and tests them in a **fixed order from the strictest threshold to the loosest, stopping at the
first failure**. Fixed-sequence testing controls the family-wise error rate at ``delta`` with no
correction: a wrong certificate needs the test of the highest threshold with ``FAR > alpha`` to
pass, which happens with probability at most ``delta``. Because ``k_t`` and the p-value are
monotone in ``t``, the thresholds that pass form one interval ``(v, inf)``; every threshold in
it is certified. ``v`` is a calibration score, so we return a short decimal near the middle of
the gap between ``v`` and the next calibration score above it (any threshold in the same gap
flags exactly the same calibration samples; see :func:`cut_values`), printed exactly
(:func:`threshold_text`): the value a user copies is the certified one.

``p_value <= delta`` is the same condition as "the one-sided Clopper-Pearson upper
``(1 - delta)`` bound on the rate is ``<= alpha``"; the bound is reported with each certificate.
``certify_mr`` is the mirror image on misbehaving scores (strictest = lowest threshold).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from calimon.errors import InputError

# The bounds live in calimon.numerics.binomial (numerics); they stay importable from here.
from calimon.numerics.binomial import binom_cdf, check_rate, cp_upper
from calimon.numerics.binomial import clopper_pearson as clopper_pearson
from calimon.numerics.binomial import cp_lower as cp_lower
from calimon.numerics.binomial import samples_needed as samples_needed

METHOD = "ltt-fixed-sequence-clopper-pearson"


def cut_values(values: np.ndarray) -> np.ndarray:
    """Thresholds between the sorted distinct ``values`` (length ``m``): ``m + 1`` cuts.

    Cut ``i`` separates the ``i`` lowest distinct values from the rest, so
    ``#(score < cut_i)`` counts the samples in the first ``i`` groups. Cut 0 is the lowest value,
    cut ``m`` is the next float above the highest, and an inner cut is the decimal with the
    fewest significant digits in the middle half of its gap (`gap_cut`), so that the value a
    user reads and copies is the threshold itself, with room to spare on both sides.
    """
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        return np.array([0.0])
    inner = [gap_cut(float(lo), float(hi)) for lo, hi in zip(v[:-1], v[1:], strict=True)]
    return np.r_[v[0], inner, np.nextafter(v[-1], np.inf)]


def cut_at(values: np.ndarray, i: int) -> float:
    """Cut ``i`` of :func:`cut_values` (``values``: sorted, distinct, non-empty), computed
    alone."""
    if i == 0:
        return float(values[0])
    if i == len(values):
        return float(np.nextafter(values[-1], np.inf))
    return gap_cut(float(values[i - 1]), float(values[i]))


def gap_cut(lo: float, hi: float) -> float:
    """A threshold in the gap ``(lo, hi]`` between two adjacent distinct scores: the decimal
    with the fewest significant digits within the middle half of the gap (the nearest such to
    the midpoint), so it prints short and exact (`threshold_text`); ``hi`` itself when no
    float lies strictly between them."""
    mid = lo + (hi - lo) / 2.0
    if not lo < mid < hi:
        return hi
    quarter = (hi - lo) / 4.0
    for digits in range(1, 18):
        c = float(f"{mid:.{digits}g}")
        if lo < c < hi and mid - quarter <= c <= mid + quarter:
            return c
    return mid


def threshold_text(t: float | None) -> str:
    """A threshold as every calimon output prints it: the shortest decimal that reads back as
    the same float (so a copied value flags exactly the rows it flagged), ``inf`` / ``-inf``
    for a switched-off action, ``n/a`` for None or NaN."""
    if t is None or math.isnan(t):
        return "n/a"
    if math.isinf(t):
        return "inf" if t > 0 else "-inf"
    return repr(float(t))


@dataclass(frozen=True)
class CertifiedThreshold:
    """A threshold certified for ``rate <= alpha`` with confidence ``1 - delta``.

    ``rate``: ``"far"`` (false alarms among benign) or ``"mr"`` (misses among misbehaving).
    ``k`` of the ``n`` calibration samples of that class are errors at ``threshold``
    (``empirical = k / n``); ``bound`` is the one-sided Clopper-Pearson upper ``1 - delta``
    bound for ``k`` in ``n``; ``p_value`` the binomial test of ``rate > alpha``.
    ``certified`` is False when even the strictest threshold fails (too few samples; see
    ``samples_needed``): then ``threshold`` is ``+inf`` for FAR (flag nothing) or ``-inf`` for
    MR (flag everything), the trivial choices, and nothing was learned from the data.
    """

    rate: str
    threshold: float
    certified: bool
    bound: float
    empirical: float
    n: int
    k: int
    alpha: float
    delta: float
    p_value: float
    method: str = METHOD

    def to_dict(self) -> dict[str, Any]:
        """The fields as a dict."""
        return asdict(self)


def _scores(x: Any, name: str) -> np.ndarray:
    s = np.asarray(x, dtype=float)
    if s.ndim != 1 or s.size == 0:
        raise InputError(f"expected a non-empty 1-D array of scores, got shape {s.shape}",
                         field=name)
    if not np.all(np.isfinite(s)):
        raise InputError("expected finite scores; drop missing ones explicitly (a missing "
                         "score is never 0)", field=name)
    return s


def _fixed_sequence(errors: np.ndarray, n: int, alpha: float, delta: float) -> int:
    """Index of the last hypothesis rejected when testing ``errors`` (error counts, ordered
    strictest first) in sequence and stopping at the first failure; -1 if the first fails."""
    p = binom_cdf(errors, n, alpha)
    fails = np.flatnonzero(p > delta)
    return (errors.size - 1) if fails.size == 0 else int(fails[0]) - 1


def _certificate(rate: str, thr: float, k: int, n: int, alpha: float, delta: float,
                 ok: bool) -> CertifiedThreshold:
    return CertifiedThreshold(rate=rate, threshold=float(thr), certified=ok,
                              bound=cp_upper(k, n, delta), empirical=k / n, n=n, k=k,
                              alpha=alpha, delta=delta, p_value=float(binom_cdf(k, n, alpha)))


def certify_far(scores_benign: Any, alpha: float, delta: float = 0.05) -> CertifiedThreshold:
    """Lowest threshold with ``FAR <= alpha`` certified at ``1 - delta`` (fixed-sequence LTT).

    ``scores_benign``: calibration-split scores of benign transcripts only. Guarantee and
    assumption (i.i.d. / exchangeable calibration and deployment benign transcripts): module
    docstring. The returned threshold lies in the gap above the highest calibration score it
    does not flag (:func:`gap_cut`); any threshold in that gap or higher is equally certified.
    """
    s = _scores(scores_benign, "scores_benign")
    alpha, delta = check_rate(alpha, "alpha"), check_rate(delta, "delta")
    v, counts = np.unique(s, return_counts=True)
    below = np.r_[0, np.cumsum(counts)]  # #(s < cut_i)
    n = s.size
    false_alarms = (n - below)[::-1]  # cuts from the strictest (highest) to the loosest
    last = _fixed_sequence(false_alarms, n, alpha, delta)
    if last < 0:
        return _certificate("far", math.inf, 0, n, alpha, delta, False)
    i = v.size - last
    return _certificate("far", cut_at(v, i), int(n - below[i]), n, alpha, delta, True)


def certify_mr(scores_misbehaving: Any, alpha: float, delta: float = 0.05) -> CertifiedThreshold:
    """Highest threshold with ``MR <= alpha`` certified at ``1 - delta`` (fixed-sequence LTT).

    The mirror of :func:`certify_far` on calibration-split misbehaving scores: thresholds are
    tested from the lowest (flag everything, MR 0) upward, stopping at the first failure. The
    assumption is exchangeability of calibration and deployment *misbehaving* transcripts.
    """
    s = _scores(scores_misbehaving, "scores_misbehaving")
    alpha, delta = check_rate(alpha, "alpha"), check_rate(delta, "delta")
    v, counts = np.unique(s, return_counts=True)
    misses = np.r_[0, np.cumsum(counts)]  # #(s < cut_i), strictest first
    n = s.size
    last = _fixed_sequence(misses, n, alpha, delta)
    if last < 0:
        return _certificate("mr", -math.inf, 0, n, alpha, delta, False)
    return _certificate("mr", cut_at(v, last), int(misses[last]), n, alpha, delta, True)


# ------------------------------------------------------------------ a run: fit on calib, check on test

@dataclass(frozen=True)
class ThresholdCheck:
    """A certificate fitted on the calibration split and the rates it realizes on the test
    split (a finite sample of new data: it may exceed ``alpha`` by chance, the guarantee is
    about the population rate)."""

    certificate: CertifiedThreshold
    calib_mr: float
    calib_far: float
    test_mr: float
    test_far: float

    def to_dict(self) -> dict[str, Any]:
        """The certificate and its calibration / test rates as a JSON-ready dict."""
        return {"certificate": self.certificate.to_dict(), "calib_mr": self.calib_mr,
                "calib_far": self.calib_far, "test_mr": self.test_mr, "test_far": self.test_far}


@dataclass(frozen=True)
class ThresholdsReport:
    """Threshold certificates of one scored file, each fitted on ``n_calib`` calibration rows and
    checked on ``n_test`` test rows (``split`` says how they were split)."""

    source: str
    score: str
    split: str
    n_calib: int
    n_test: int
    n_dropped: int
    checks: tuple[ThresholdCheck, ...]

    def to_dict(self) -> dict[str, Any]:
        """The report as a JSON-ready dict, one entry per check."""
        d = {k: getattr(self, k) for k in ("source", "score", "split", "n_calib", "n_test",
                                             "n_dropped")}
        d["checks"] = [c.to_dict() for c in self.checks]
        return d


def thresholds_run(path: Any, far: Any = (0.05, 0.10), mr: Any = (), delta: float = 0.05,
                   score: str = "p_cal", seed: int = 0) -> ThresholdsReport:
    """Certify thresholds on a run's calibration split, report their rates on its test split.

    ``path``: a run directory (its ``curve.csv``) or a scored CSV. The split is the ``split``
    column, or a pair-grouped 50/50 split with ``seed`` (``calib_test_split``). ``far`` /
    ``mr``: the alphas to certify, each at ``1 - delta``.
    """
    from calimon.deploy.io import calib_test_split, read_scored_csv, resolve_run

    far, mr = list(far), list(mr)
    if not far and not mr:
        raise InputError("give at least one alpha to certify", field="far")
    csv_path = resolve_run(path)
    split = calib_test_split(read_scored_csv(csv_path, score=score), seed=seed)
    cal, test = split.calib, split.test
    checks = []
    for rate, alphas in (("far", far), ("mr", mr)):
        for alpha in alphas:
            cls = 0 if rate == "far" else 1
            scores = cal.scores[cal.labels == cls]
            if scores.size == 0:
                kind = "benign" if cls == 0 else "misbehaving"
                raise InputError(f"the calibration split has no {kind} rows",
                                 path=str(csv_path), field="label")
            cert = (certify_far if rate == "far" else certify_mr)(scores, alpha, delta)
            cmr, cfar = cal.rates(cert.threshold)
            tmr, tfar = test.rates(cert.threshold)
            checks.append(ThresholdCheck(cert, cmr, cfar, tmr, tfar))
    return ThresholdsReport(source=str(csv_path), score=score, split=split.method,
                            n_calib=len(cal), n_test=len(test), n_dropped=cal.n_dropped,
                            checks=tuple(checks))
