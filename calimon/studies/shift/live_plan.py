"""Planning the labels of a served policy's live recertification (`calimon.studies.shift.live` has
the sample and the bounds): how many more labels certify each target at the benign shares seen
so far (`plan`), the order of labelling that certifies soonest (`order`), and each rate's
certificate with its state (`certificate`, `live_status`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from calimon.studies.shift.live import (
    AUTO,
    RATES,
    REVIEW,
    Counts,
    Decided,
    rate_bound,
    rate_estimate,
    strata3,
    stratum_counts,
)

# -- planning ------------------------------------------------------------------------------------
PILOT = 10  # resolved labels an automatic stratum needs before its benign share is planned on
LOOK_AHEAD = 60  # queue positions ordered by look-ahead (each costs a few exact bounds)


@dataclass(frozen=True)
class Target:
    """A guarantee to recertify: ``rate <= alpha`` at ``1 - delta``."""

    rate: str
    alpha: float
    delta: float


@dataclass(frozen=True)
class Plan:
    """What certifying one target takes at the benign shares seen so far: ``extend`` more
    transcripts of each automatic stratum's draw order (and every review transcript),
    ``labels`` new labels in all (None: not even labelling everything would do),
    ``beyond_retained``: of those, how many fall past the transcripts the server kept;
    ``pilot``: too few labels to plan from yet (fewer than `PILOT` resolved in an automatic
    stratum): the labels are a first sample, and the plan is made again from its rates;
    ``breaks``: the target cannot be certified at those shares, and the labels are those that
    would show it broken (its lower bound above the target)."""

    labels: int | None
    extend: dict[str, int]
    beyond_retained: int
    pilot: bool = False
    breaks: bool = False


def extended(c: Counts, x: int, *, resolve: bool = False, share: float | None = None) -> Counts:
    """``c`` with ``x`` more labels at its planned benign share (``share``, else the one its
    labels give): ``x`` more transcripts of an automatic stratum's draw order, or ``x`` of the
    review stratum's unresolved ones; with ``resolve``, its unresolved ones too."""
    share = c.planned_share() if share is None else share
    if c.action == REVIEW:
        new = min(c.unresolved, x + (c.unresolved if resolve else 0))
        ben = round(share * new)
        return replace(c, benign=c.benign + ben, misbehaving=c.misbehaving + new - ben,
                       unresolved=c.unresolved - new)
    x = min(x, c.size - c.sampled)
    new = x + (c.unresolved if resolve else 0)
    ben = round(share * new)
    return replace(c, sampled=c.sampled + x, benign=c.benign + ben,
                   misbehaving=c.misbehaving + new - ben,
                   unresolved=c.unresolved - (c.unresolved if resolve else 0))


def _new_labels(c: Counts, x: int) -> tuple[int, int]:
    """(labels to give, of them past the retained transcripts) to extend ``c`` by ``x``."""
    seen = c.after[:x]
    return sum(not a for a in seen) + max(0, x - len(c.after)), max(0, x - len(c.after))


def plan(counts: dict[str, Counts], target: Target,
         shares: dict[str, float] | None = None, *, anytime: bool = True) -> Plan:
    """Labels that certify ``target`` if the strata keep their benign shares: every review
    transcript labelled and each automatic stratum's sample grown to the same fraction ``f`` of
    it, the least ``f`` found by bisection. When no ``f`` would certify it, the labels that
    would show it broken instead. ``shares``: the benign share planned for each stratum (by
    action) in place of the one its labels give, and no pilot: the plan of traffic not
    labelled yet (`calimon.studies.shift.label_plan`, the one plan of every command).
    ``anytime``: plan with the confidence sequence the live status judges by (else the fixed-n
    bound of a one-shot `calimon recertify` on a finished sample)."""
    b, p, r = strata3(counts)
    auto = {a: c for a, c in (("auto_block", b), ("auto_pass", p))}
    given = shares or {}

    def grown(f: float) -> tuple[dict[str, Counts], dict[str, int]]:
        ext = {a: min(c.size, max(c.sampled, math.ceil(f * c.size))) - c.sampled
               for a, c in auto.items()}
        out = {a: extended(c, ext[a], resolve=True, share=given.get(a))
               for a, c in auto.items()}
        out[REVIEW] = extended(r, 0, resolve=True, share=given.get(REVIEW))
        return out, ext

    def met(f: float, upper: bool) -> bool:
        b = rate_bound(grown(f)[0], target.rate, target.delta, upper=upper, anytime=anytime)
        return b <= target.alpha if upper else b > target.alpha

    pilot = {a: min(c.size - c.sampled, PILOT - c.resolved) for a, c in auto.items()
             if c.resolved < PILOT and c.sampled < c.size and a not in given}
    if pilot:
        return _plan_of(auto, r, {a: pilot.get(a, 0) for a in auto}, pilot=True)
    upper = met(1.0, True)
    if not upper and not met(1.0, False):
        return Plan(None, {a: c.size - c.sampled for a, c in auto.items()}, 0)
    lo, hi = 0.0, 1.0
    if met(0.0, upper):
        hi = 0.0
    for _ in range(30):
        if hi - lo < 1e-6:
            break
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if met(mid, upper) else (mid, hi)
    return _plan_of(auto, r, grown(hi)[1], breaks=not upper)


def _plan_of(auto: dict[str, Counts], review: Counts, ext: dict[str, int],
             pilot: bool = False, breaks: bool = False) -> Plan:
    labels, beyond = review.unresolved, 0
    for a, x in ext.items():
        n, past = _new_labels(auto[a], x)
        labels, beyond = labels + n + auto[a].unresolved, beyond + past
    return Plan(labels, ext, beyond, pilot, breaks)


def order(counts: dict[str, Counts], targets: Sequence[Target], limit: int,
          extend: dict[str, int]) -> list[tuple[str, str]]:
    """Up to ``limit`` transcripts to label next, as ``(id, action)``, in the order that brings
    the failing targets' bounds down soonest at the planned shares (one step of look-ahead:
    each next label goes where it lowers the worst ``bound / alpha`` most; ties to the review
    stratum, then to the lane least far along; past `LOOK_AHEAD` picks, the lanes simply take
    turns by how far along they are). ``extend``: how far into each automatic stratum's draw
    order the queue reaches, at least its audit slice."""
    failing = [t for t in targets if rate_bound(counts, t.rate, t.delta) > t.alpha]
    lanes: dict[str, list[str]] = {}
    if REVIEW in counts:
        lanes[REVIEW] = list(counts[REVIEW].todo)
    for a in AUTO:
        c = counts.get(a)
        if c is not None:
            reach = max(extend.get(a, 0), c.audit_left)
            lanes[a] = [i for i, at in zip(c.todo, _unanswered_positions(c), strict=True)
                        if at < reach]
    taken = {a: 0 for a in lanes}
    state = dict(counts)
    out: list[tuple[str, str]] = []
    while len(out) < limit:
        open_lanes = [a for a in lanes if taken[a] < len(lanes[a])]
        if not open_lanes:
            break

        looked = failing if len(out) < LOOK_AHEAD else ()
        best = min(open_lanes, key=lambda a, looked=looked: (
            _expected(state, a, looked), a != REVIEW, taken[a] / len(lanes[a])))
        out.append((lanes[best][taken[best]], best))
        taken[best] += 1
        state[best] = _after_taking(counts[best], taken[best])
    return out


def _expected(state: dict[str, Counts], lane: str, failing: Sequence[Target]) -> float:
    """The worst ``bound / alpha`` of the failing targets after one more label in ``lane``,
    averaged over its two outcomes at the lane's planned benign share."""
    if not failing:
        return 0.0
    c = state[lane]
    share = c.planned_share()
    total = 0.0
    for benign, weight in ((1, share), (0, 1 - share)):
        one = replace(c, benign=c.benign + benign, misbehaving=c.misbehaving + 1 - benign)
        one = replace(one, unresolved=c.unresolved - 1) if lane == REVIEW else replace(
            one, sampled=min(c.size, c.sampled + 1))
        trial = {**state, lane: one}
        total += weight * max(rate_bound(trial, t.rate, t.delta) / t.alpha for t in failing)
    return total


def _unanswered_positions(c: Counts) -> list[int]:
    """The position (from the gap) of each id of ``c.todo``."""
    return [i for i, answered in enumerate(c.after) if not answered]


def _after_taking(c: Counts, j: int) -> Counts:
    """``c`` once its next ``j`` transcripts to label are labelled (at the planned share): the
    review stratum resolves ``j``; an automatic prefix grows to the next unlabelled one."""
    if c.action == REVIEW:
        return extended(c, j)
    pos = _unanswered_positions(c)
    return extended(c, pos[j] if j < len(pos) else len(c.after))


# -- the summary --------------------------------------------------------------------------------
HOLDS, NOT_YET, BROKEN, UNREACHABLE, NO_TARGET = ("holds", "not yet certified", "broken",
                                                  "not certifiable at the rates seen",
                                                  "no target")


@dataclass(frozen=True)
class LiveCertificate:
    """One rate on the decided traffic: the point ``estimate`` (resolved labels only), the
    ``upper`` and ``lower`` bounds at ``1 - delta``, the target ``alpha`` (None: the policy
    states none) and the ``state``: ``holds`` (upper <= alpha), ``broken`` (lower > alpha),
    ``not yet certified`` (``labels_needed`` more at the shares seen would do),
    ``not certifiable at the rates seen``, or ``no target``."""

    rate: str
    alpha: float | None
    delta: float
    estimate: float
    upper: float
    lower: float
    state: str
    labels_needed: int | None
    beyond_retained: int = 0
    pilot: bool = False

    def line(self) -> str:
        """The certificate in one line."""
        what = self.rate.upper()
        est = ("none yet (a stratum has no resolved label)" if math.isnan(self.estimate)
               else f"{self.estimate:.4f}")
        head = (f"{what} on live traffic: estimate {est}, anytime-valid bounds "
                f"[{self.lower:.4f}, {self.upper:.4f}] at {1 - self.delta:g}")
        if self.alpha is None:
            return head + " (the policy states no target)"
        tail = {HOLDS: "certified", BROKEN: "BROKEN (the lower bound is above it)",
                UNREACHABLE: "not certifiable at the rates seen (labelling every transcript "
                             "would leave the bound above it)" + (
                    f"; {self.labels_needed} more labels would show it broken"
                    if self.labels_needed else "")}
        if self.state == NOT_YET:
            more = (f"; {self.beyond_retained} of them past the transcripts kept (raise "
                    f"--review-retain)" if self.beyond_retained else "")
            first = " (a first sample: the plan is made again from its rates)" if self.pilot \
                else ""
            return (f"{head}; <= {self.alpha:g}: not yet certified, {self.labels_needed} more "
                    f"labels needed{first}{more}")
        return f"{head}; <= {self.alpha:g}: {tail[self.state]}"

    def to_dict(self) -> dict[str, Any]:
        """The fields as a dict (NaN kept: callers make it JSON-ready)."""
        return asdict(self)


def certificate(counts: dict[str, Counts], rate: str, alpha: float | None,
                delta: float) -> tuple[LiveCertificate, Plan | None]:
    """The certificate of ``rate`` (target ``alpha``, None for none) and its plan."""
    upper = rate_bound(counts, rate, delta)
    lower = rate_bound(counts, rate, delta, upper=False)
    est = rate_estimate(counts, rate)
    if alpha is None:
        return LiveCertificate(rate, None, delta, est, upper, lower, NO_TARGET, None), None
    p = plan(counts, Target(rate, alpha, delta))
    if upper <= alpha:
        state, need = HOLDS, 0
    elif lower > alpha:
        state, need = BROKEN, None
    elif p.labels is None or p.breaks:
        state, need = UNREACHABLE, p.labels
    else:
        state, need = NOT_YET, p.labels
    beyond = p.beyond_retained if state in (NOT_YET, UNREACHABLE) else 0
    return LiveCertificate(rate, alpha, delta, est, upper, lower, state, need, beyond,
                           p.pilot and state == NOT_YET), p


@dataclass(frozen=True)
class LiveStatus:
    """Everything the status page shows of recertification: the strata, one certificate per
    rate (targets first), the queue of what to label next and how far into each automatic
    stratum's draw order the plans reach."""

    counts: dict[str, Counts]
    certificates: tuple[LiveCertificate, ...]
    queue: tuple[tuple[str, str], ...]
    extend: dict[str, int]


def live_status(decided: Iterable[Decided], targets: Sequence[Target], *, delta: float = 0.05,
                limit: int = 50) -> LiveStatus:
    """The certificates of ``targets`` on the decided traffic (a rate without a target gets
    its bounds at ``delta``), and up to ``limit`` transcripts to label next."""
    counts = stratum_counts(decided)
    certs, ext = [], {a: 0 for a in AUTO}
    for t in targets:
        cert, p = certificate(counts, t.rate, t.alpha, t.delta)
        certs.append(cert)
        if p is not None and p.labels and cert.state in (NOT_YET, UNREACHABLE):
            ext = {a: max(ext[a], p.extend.get(a, 0)) for a in AUTO}
    for rate in RATES:
        if all(t.rate != rate for t in targets):
            certs.append(certificate(counts, rate, None, delta)[0])
    queue = order(counts, targets, limit, ext)
    return LiveStatus(counts, tuple(certs), tuple(queue), ext)
