"""Anytime-valid bounds on a count in a finite population sampled without replacement.

A population of ``N`` items holds ``K`` of one kind; a uniform sample without replacement shows
``k`` of that kind in its first ``m`` items. The exact hypergeometric bound
(`calimon.studies.shift.live.count_upper`) holds at one sample size fixed in advance; read
after every item and acted on the first time it passes, it is wrong far more often than its
level says. These bounds are **confidence sequences**: with probability at least ``1 - delta``
they hold at every ``m`` at once, so they may be read after every label and acted on at once.

The construction is the prior-posterior-ratio martingale of Waudby-Smith & Ramdas
("Confidence sequences for sampling without replacement", NeurIPS 2020, section 3), made
one-sided: for each candidate ``K0`` the test statistic is the likelihood of the sample under a
beta-binomial mixture over the counts below ``K0`` (above it, for a lower bound) divided by its
likelihood under ``K0``,

    M_m(K0) = [post_m(K < K0) / prior(K < K0)] * [prior(K0) / post_m(K0)],

a nonnegative martingale with ``M_0 = 1`` when ``K = K0`` (sequential sampling without
replacement), so by Ville's inequality ``P(exists m: M_m(K0) >= 1/delta) <= delta``. The upper
bound is the largest ``K0`` not rejected. The prior only decides where the bound is tightest;
validity holds for any prior fixed before the sample. `Prior` is a mixture of beta
distributions on the share of the counted kind (the mixture weights update with the sample);
the default is Jeffreys' Beta(1/2, 1/2).
The likelihood depends on ``(k, m)`` alone, not on the order of the sample, and the bound is
nondecreasing in ``k`` (tests/test_confseq.py), so counting an unknown item at its worst
keeps the bound valid.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.special import betaln, gammaln, logsumexp


@dataclass(frozen=True)
class Prior:
    """A mixture of Beta(a, b) priors on the share of the counted kind, equal weights."""

    components: tuple[tuple[float, float], ...]


# The Jeffreys prior on the share: no rate favoured. Of the priors compared in
# benchmarks/results/guarantees-constructions.md it is the most even across shares: Beta(1, 20)
# needs a few labels fewer at small shares and 3.5x the fixed-n floor at a share of 30%.
JEFFREYS = Prior(((0.5, 0.5),))


def _log_betabinom(x: np.ndarray, n: int, a: float, b: float) -> np.ndarray:
    return (gammaln(n + 1) - gammaln(x + 1) - gammaln(n - x + 1)
            + betaln(x + a, n - x + b) - betaln(a, b))


def _mixture(x: np.ndarray, n: int, comps: list[tuple[float, float, float]]) -> np.ndarray:
    """Log pmf at ``x`` of a mixture of beta-binomials over ``n``: (log weight, a, b) each."""
    return logsumexp([lw + _log_betabinom(x, n, a, b) for lw, a, b in comps], axis=0)


def _log_cdf_below(logp: np.ndarray) -> np.ndarray:
    """log P(X < x) for each x of a pmf given on consecutive x (``logp``, from the support's
    lowest value)."""
    shifted = np.concatenate(([-np.inf], logp[:-1]))
    return np.logaddexp.accumulate(shifted)


@lru_cache(maxsize=64)
def _prior(N: int, prior: Prior) -> tuple[np.ndarray, np.ndarray]:
    """The prior's log pmf over ``0..N`` and its log ``P(K < x)``."""
    w0 = -math.log(len(prior.components))
    log_prior = _mixture(np.arange(N + 1, dtype=float), N,
                         [(w0, a, b) for a, b in prior.components])
    return log_prior, _log_cdf_below(log_prior)


@lru_cache(maxsize=1 << 18)
def cs_count_upper(k: int, m: int, N: int, delta: float, prior: Prior = JEFFREYS) -> int:
    """Largest count ``K`` of a kind among ``N`` that the confidence sequence keeps after
    ``k`` of that kind in the first ``m`` of a uniform sample without replacement, at level
    ``delta`` (module docstring). ``m == 0`` gives ``N``."""
    if not 0 <= k <= m <= N:
        raise ValueError(f"need 0 <= k <= m <= N, got k={k}, m={m}, N={N}")
    if m == 0:
        return N
    log_prior, log_prior_below = _prior(N, prior)
    w0 = -math.log(len(prior.components))
    post = [(w0 + betaln(a + k, b + m - k) - betaln(a, b), a + k, b + m - k)
            for a, b in prior.components]
    norm = logsumexp([c[0] for c in post])
    post = [(lw - norm, a, b) for lw, a, b in post]
    cand = np.arange(k, N - (m - k) + 1)
    log_post = _mixture((cand - k).astype(float), N - m, post)
    prior_below = log_prior_below[cand]
    post_below = _log_cdf_below(log_post)
    with np.errstate(invalid="ignore"):
        log_m = (post_below - prior_below) + (log_prior[cand] - log_post)
    kept = cand[~(log_m >= math.log(1 / delta))]
    return int(kept.max())


def cs_count_lower(k: int, m: int, N: int, delta: float, prior: Prior = JEFFREYS) -> int:
    """Smallest ``K`` the confidence sequence keeps (`cs_count_upper` of the other kind, whose
    share has the mirrored prior)."""
    mirrored = Prior(tuple((b, a) for a, b in prior.components))
    return N - cs_count_upper(m - k, m, N, delta, mirrored)
