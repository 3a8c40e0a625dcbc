"""Recertification through human review: FAR / MR of a policy on new traffic, from an audit.

An escalation policy with an **audit slice** (``Policy.audit``) sends every ``human_review``
transcript to a reviewer, and also a stated fraction ``f`` of the ``auto_pass`` and
``auto_block`` ones, chosen by a hash of ``seed:id`` (``Audit.includes``) — independent of
the label. So the labelled transcripts are: the whole review stratum, and in each automatic
stratum (size ``N``), a uniform random subset (size ``m``, drawn without replacement given
``m``) of it.

**What is certified**: the FAR and MR **of this traffic** (the transcripts the policy decided),
reviewers assumed right. With ``K_B`` benign among the ``N_B`` auto-blocked, ``K_P`` among the
``N_P`` auto-passed and ``R_0`` / ``R_1`` benign / misbehaving among the reviewed::

    FAR = K_B / (K_B + K_P + R_0)            MR = (N_P - K_P) / (N_P - K_P + N_B - K_B + R_1)

``K_B`` and ``K_P`` are unknown; the audit gives exact hypergeometric bounds on each (finite
population, one-sided, each at ``1 - delta / 2``). FAR grows with ``K_B`` and falls with ``K_P``,
so plugging the upper bound of ``K_B`` and the lower bound of ``K_P`` gives an upper bound on FAR
that holds at ``1 - delta`` (union bound); MR likewise with the other ends.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy.stats import hypergeom

from calimon.errors import InputError


def count_upper(k: int, m: int, N: int, delta: float) -> int:
    """Largest count ``K`` of a kind in a population of ``N`` not rejected at level ``delta``
    after ``k`` of that kind in a uniform sample of ``m`` without replacement (exact,
    hypergeometric). ``m == 0`` gives ``N``."""
    if m == 0:
        return N
    K = np.arange(k, N - (m - k) + 1)
    ok = hypergeom.cdf(k, N, K, m) > delta
    return int(K[ok].max())


def count_lower(k: int, m: int, N: int, delta: float) -> int:
    """Smallest ``K`` not rejected at level ``delta`` (the mirror of :func:`count_upper`)."""
    if m == 0:
        return 0
    K = np.arange(k, N - (m - k) + 1)
    ok = hypergeom.sf(k - 1, N, K, m) > delta
    return int(K[ok].min())


@dataclass(frozen=True)
class Stratum:
    """One action's transcripts: ``size`` in all, ``labelled`` of them reviewed, ``benign``
    of those benign; ``inclusion``: the probability a transcript of it was reviewed."""

    action: str
    size: int
    labelled: int
    benign: int
    inclusion: float


@dataclass(frozen=True)
class RateCertificate:
    """``rate`` of the policy on this traffic: point ``estimate``, upper ``bound`` at
    ``1 - delta``, and whether it meets ``alpha`` (None when no alpha was asked)."""

    rate: str
    estimate: float
    bound: float
    delta: float
    alpha: float | None
    certified: bool | None

    def to_dict(self) -> dict[str, Any]:
        """The fields as a dict."""
        return asdict(self)


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else math.nan


def stratified_bounds(strata: dict[str, Stratum], delta: float = 0.05,
                      far_alpha: float | None = None,
                      mr_alpha: float | None = None) -> tuple[RateCertificate, RateCertificate]:
    """FAR and MR certificates from the three strata (module doc)."""
    if not 0 < delta < 1:
        raise InputError(f"expected delta in (0, 1), got {delta}", field="delta")
    b, p, r = (strata.get(a, Stratum(a, 0, 0, 0, 1.0)) for a in
               ("auto_block", "auto_pass", "human_review"))
    if r.labelled != r.size:
        raise InputError(f"{r.size - r.labelled} human_review transcript(s) have no label; the "
                         f"review stratum must be fully labelled", field="label")
    r0, r1 = r.benign, r.size - r.benign
    hb = (b.benign / b.labelled * b.size) if b.labelled else math.nan
    hp = (p.benign / p.labelled * p.size) if p.labelled else math.nan
    d2 = delta / 2
    kb_hi = count_upper(b.benign, b.labelled, b.size, d2)
    kp_lo = count_lower(p.benign, p.labelled, p.size, d2)
    far_est = _ratio(hb, hb + hp + r0)
    far_ub = _ratio(kb_hi, kb_hi + kp_lo + r0)
    mr_est = _ratio(p.size - hp, p.size - hp + b.size - hb + r1)
    mr_ub = _ratio(p.size - kp_lo, p.size - kp_lo + b.size - kb_hi + r1)
    far_ub = 1.0 if math.isnan(far_ub) else far_ub
    mr_ub = 1.0 if math.isnan(mr_ub) else mr_ub

    def cert(rate: str, est: float, ub: float, alpha: float | None) -> RateCertificate:
        return RateCertificate(rate, est, ub, delta, alpha,
                               None if alpha is None else bool(ub <= alpha))

    return cert("far", far_est, far_ub, far_alpha), cert("mr", mr_est, mr_ub, mr_alpha)


def audit_labels_needed(strata: dict[str, Stratum], alpha: float, delta: float = 0.05,
                        rate: str = "far", planned: dict[str, float] | None = None) -> int | None:
    """Audit labels (over both automatic strata, in proportion to their sizes) for the
    ``rate`` bound to reach ``alpha`` if the benign shares of the automatic strata are the
    ``planned`` ones (default: those seen so far, else 0.5), counted from an empty audit, the
    review stratum included. None when even a full audit could not (the planned rate itself
    exceeds ``alpha``). The plan is the review planner's
    (:func:`calimon.studies.shift.live_plan.plan`), the one plan of every command, made with
    the fixed-n bound this one-shot recertification is judged by."""
    from calimon.studies.shift.live import Counts
    from calimon.studies.shift.live_plan import Target, plan

    planned = dict(planned or {})
    for a in ("auto_block", "auto_pass"):
        s = strata.get(a)
        if a not in planned:
            planned[a] = (s.benign / s.labelled) if s and s.labelled else 0.5
    review = strata.get("human_review", Stratum("human_review", 0, 0, 0, 1.0))
    counts = {a: Counts(a, strata[a].size if a in strata else 0, 0, 0, 0, 0,
                        after=(False,) * (strata[a].size if a in strata else 0))
              for a in ("auto_block", "auto_pass")}
    counts["human_review"] = Counts("human_review", review.size, review.size, review.benign,
                                    review.size - review.benign, 0)
    if sum(c.size for a, c in counts.items() if a != "human_review") == 0:
        return review.size
    p = plan(counts, Target(rate, alpha, delta), shares=planned, anytime=False)
    return None if p.labels is None or p.breaks else review.size + p.labels
