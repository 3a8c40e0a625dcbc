"""Recertification of a served policy from labels given as traffic arrives (`calimon serve
--review`): which transcripts form the sample, the FAR / MR bounds on it, how many more labels
each target needs, and the order of labelling that certifies soonest.

**The sample: draw order.** Every decision carries its audit draw ``u`` (`audit_draw` of its
audit id and the policy's seed: uniform on [0, 1), independent of its label). Within an
automatic stratum (``auto_pass``, ``auto_block``) the transcripts with the ``m`` smallest draws
are a uniform sample of ``m`` without replacement, whatever ``m`` is, as long as ``m`` is not
chosen by the labels. So an automatic stratum's sample is the **longest prefix in draw order
whose transcripts all have a label** (the policy's audit slice, ``u < fraction``, is such a
prefix; the planner asks for a longer one when the slice is too small). Labels after a gap wait
until the gap is labelled. The review stratum is a census: every transcript counts.

**Unresolved transcripts** (no label yet in the review stratum; ``unsure``, a dispute, or a
second review still owed anywhere) are counted at their worst for the bound at hand
(`worst_label`): the bound holds whatever their labels turn out to be. The lower bounds use the
best case instead, so "the certificate is broken" (a lower bound above the target) is never the
artefact of a missing label.

**Anytime-valid bounds.** The live status is read after every label, and a reviewer stops the
first time it says "holds". So the counts of benign transcripts in the automatic strata get
confidence sequences for sampling without replacement (`calimon.numerics.confseq`): each holds
at every sample size at once, so reading it after every label and acting on the first pass
keeps its level. Each is at ``delta / 2``, combined as in `calimon.studies.shift.recertify`:
each of the four bounds (FAR and MR, upper and lower) holds at ``1 - delta`` on the traffic
decided, reviewers assumed right, however often it is read. ``anytime=False`` gives the exact
hypergeometric bound instead, valid only at a sample size fixed in advance (a one-shot
`calimon recertify` on a finished sample). benchmarks/guarantees checks both by simulation,
read after every label (benchmarks/results/guarantees.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache

from scipy.stats import hypergeom

from calimon.numerics.confseq import cs_count_lower, cs_count_upper

AUTO = ("auto_block", "auto_pass")
REVIEW = "human_review"
ACTIONS = (*AUTO, REVIEW)
RATES = ("far", "mr")


def worst_label(action: str, rate: str) -> int:
    """The label (1 misbehaving, 0 benign) of an unresolved transcript of ``action`` that makes
    the ``rate`` upper bound largest: a benign auto-block and a misbehaving auto-pass raise both
    rates; a reviewed transcript lowers FAR when benign (it adds to FAR's benign total) and MR
    when misbehaving."""
    if action == "auto_block":
        return 0
    if action == "auto_pass":
        return 1
    return 1 if rate == "far" else 0


@lru_cache(maxsize=1 << 16)
def count_upper(k: int, m: int, N: int, delta: float) -> int:
    """Largest count ``K`` of a kind among ``N`` not rejected at level ``delta`` after ``k`` of
    that kind in a uniform sample of ``m`` without replacement (exact hypergeometric, by
    bisection: ``P(X <= k)`` falls as ``K`` grows). ``m == 0`` gives ``N``."""
    if m == 0:
        return N
    lo, hi = k, N - (m - k)  # hypergeom.cdf(k, N, lo, m) == 1 > delta
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if hypergeom.cdf(k, N, mid, m) > delta:
            lo = mid
        else:
            hi = mid - 1
    return lo


@lru_cache(maxsize=1 << 16)
def count_lower(k: int, m: int, N: int, delta: float) -> int:
    """Smallest ``K`` not rejected at level ``delta`` (the mirror of `count_upper`)."""
    if m == 0:
        return 0
    lo, hi = k, N - (m - k)  # hypergeom.sf(k - 1, N, hi, m) == 1 > delta
    while lo < hi:
        mid = (lo + hi) // 2
        if hypergeom.sf(k - 1, N, mid, m) > delta:
            hi = mid
        else:
            lo = mid + 1
    return lo


@dataclass(frozen=True)
class Decided:
    """One decision of the traffic: its ``id``, ``action``, audit ``draw``, whether it has any
    label (``answered``), its resolved ``label`` (1 misbehaving, 0 benign, None unresolved) and
    whether its transcript was kept, so it can be labelled (``retained``)."""

    id: str
    action: str
    draw: float
    answered: bool = False
    label: int | None = None
    retained: bool = True
    audit: bool = False


@dataclass(frozen=True)
class Counts:
    """One stratum of the traffic: ``size`` decided, ``sampled`` in the sample (the prefix;
    every one for review), of them ``benign`` and ``misbehaving`` resolved and ``unresolved``;
    ``waiting``: labelled transcripts after the prefix's gap; ``todo``: the ids of the
    transcripts that can be labelled next, in order (review: unlabelled, oldest first; automatic:
    draw order from the gap on, retained only); ``after``: whether each retained transcript from
    the gap on has a label; ``audit_left``: transcripts of the policy's audit slice from the gap
    on."""

    action: str
    size: int
    sampled: int
    benign: int
    misbehaving: int
    unresolved: int
    waiting: int = 0
    todo: tuple[str, ...] = field(default=(), repr=False)
    after: tuple[bool, ...] = field(default=(), repr=False)
    audit_left: int = 0

    @property
    def resolved(self) -> int:
        """Resolved labels in the sample."""
        return self.benign + self.misbehaving

    def planned_share(self) -> float:
        """The benign share assumed for labels still to come: (benign + 1) / (resolved + 2)."""
        return (self.benign + 1) / (self.resolved + 2)


def stratum_counts(decided: Iterable[Decided]) -> dict[str, Counts]:
    """The three strata of ``decided`` (module docstring: prefixes in draw order)."""
    by: dict[str, list[Decided]] = {a: [] for a in ACTIONS}
    for d in decided:
        by.setdefault(d.action, []).append(d)
    out = {}
    for action, rows in by.items():
        if action == REVIEW:
            out[action] = _census(rows)
        else:
            out[action] = _prefix(action, sorted(rows, key=lambda d: (d.draw, d.id)))
    return out


def _census(rows: list[Decided]) -> Counts:
    ben = sum(d.label == 0 for d in rows)
    mis = sum(d.label == 1 for d in rows)
    todo = tuple(d.id for d in rows if not d.answered and d.retained)
    return Counts(REVIEW, len(rows), len(rows), ben, mis, len(rows) - ben - mis, todo=todo)


def _prefix(action: str, rows: list[Decided]) -> Counts:
    m = next((i for i, d in enumerate(rows) if not d.answered), len(rows))
    head = rows[:m]
    ben = sum(d.label == 0 for d in head)
    mis = sum(d.label == 1 for d in head)
    rest = rows[m:]
    kept = []
    for d in rest:
        if not d.retained:
            break
        kept.append(d)
    return Counts(action, len(rows), m, ben, mis, m - ben - mis,
                  waiting=sum(d.answered for d in rest),
                  todo=tuple(d.id for d in kept if not d.answered),
                  after=tuple(d.answered for d in kept), audit_left=sum(d.audit for d in rest))


def _ratio(a: float, b: float, empty: float) -> float:
    return a / b if b > 0 else empty


def strata3(counts: dict[str, Counts]) -> tuple[Counts, Counts, Counts]:
    """The auto_block, auto_pass and review strata of ``counts`` (empty ones where absent)."""
    return tuple(counts.get(a) or Counts(a, 0, 0, 0, 0, 0)
                 for a in ("auto_block", "auto_pass", REVIEW))  # type: ignore[return-value]


def rate_bound(counts: dict[str, Counts], rate: str, delta: float, upper: bool = True, *,
               anytime: bool = True) -> float:
    """The ``rate`` (``far`` or ``mr``) of the decided traffic bounded from above (``upper``) or
    below at ``1 - delta``; unresolved transcripts at their worst for that side (module doc);
    ``anytime``: a confidence sequence, valid however often it is read (else the fixed-n
    bound).

    Both rates grow with the benign auto-blocks ``K_B`` and fall with the benign auto-passes
    ``K_P``, so an upper bound takes ``K_B``'s upper and ``K_P``'s lower bound (unresolved ones
    benign in auto_block, misbehaving in auto_pass), a lower bound the other ends."""
    b, p, r = strata3(counts)
    d2 = delta / 2
    hi, lo = (cs_count_upper, cs_count_lower) if anytime else (count_upper, count_lower)
    if upper:
        kb = hi(b.benign + b.unresolved, b.sampled, b.size, d2)
        kp = lo(p.benign, p.sampled, p.size, d2)
    else:
        kb = lo(b.benign, b.sampled, b.size, d2)
        kp = hi(p.benign + p.unresolved, p.sampled, p.size, d2)
    empty = 1.0 if upper else 0.0
    extra = 0 if upper else r.unresolved  # reviewed ones: misbehaving for FAR, benign for MR
    if rate == "far":
        return _ratio(kb, kb + kp + r.benign + extra, empty)
    missed = p.size - kp
    return _ratio(missed, missed + b.size - kb + r.misbehaving + extra, empty)


def rate_estimate(counts: dict[str, Counts], rate: str) -> float:
    """The point estimate of ``rate`` from the resolved labels alone (NaN without them)."""
    b, p, r = strata3(counts)
    hb = b.benign / b.resolved * b.size if b.resolved else math.nan
    hp = p.benign / p.resolved * p.size if p.resolved else math.nan
    if b.size == 0:
        hb = 0.0
    if p.size == 0:
        hp = 0.0
    if rate == "far":
        return _ratio(hb, hb + hp + r.benign, math.nan)
    return _ratio(p.size - hp, p.size - hp + b.size - hb + r.misbehaving, math.nan)
