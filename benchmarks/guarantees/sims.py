"""Simulated deployments for every guarantee calimon prints (run.py writes the table).

Each function simulates one guarantee the way a user reads it and returns counts: how many
deployments, in how many the guarantee said "holds" (certified) while the truth broke it, and
where it applies the labels it took. The truth of each deployment is known exactly (a
population with set counts, or score distributions with closed-form rates), so a wrong "holds"
is counted, not estimated.

- `offline`: `certify_far` / `certify_mr` (Learn-then-Test) fitted on an exchangeable
  calibration sample and read once; deployment rates from the score distributions, under no
  shift, a covariate shift that leaves FAR unchanged, a prevalence change and a shift that
  breaks it (where the offline certificate makes no claim: the shift verdict's row covers it).
- `one_count`: the bound behind each automatic stratum alone (a population of 1,000 whose
  rate is 0.051 against a target of 0.05, read every few labels up to 600), with the exact
  fixed-n bound and with the confidence sequence.
- `weighted`: the shift-aware certificate (`calimon.studies.shift.certify.shift_certificate`)
  under a covariate shift that raises FAR, with the true density ratios and with ratios
  estimated from unlabelled new traffic.
- `verdicts`: the three-way shift verdict for FAR and MR targets (no labels), its wrong
  "holds" and wrong "breaks", under covariate shifts that leave the rates unchanged, raise
  FAR, or change the prevalence.
- `drift`: the drift watch's false alarms over 30 rolling windows of exchangeable traffic,
  with its alpha spending and with the per-window rule it replaced.
- `live`: the live review status (`calimon.studies.shift.live.rate_bound`, the bound behind
  its "holds") read after every label, with the anytime-valid bound and, for contrast, the
  fixed-n bound read the same way and read once at the end.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from calimon.deploy.guarantees import certify_far, certify_mr
from calimon.numerics.confseq import cs_count_upper
from calimon.studies.shift.live import Counts, count_upper, rate_bound

# -- offline thresholds --------------------------------------------------------------------

BENIGN = stats.beta(2, 6)  # calibration benign scores
MISBEHAVING = stats.beta(5, 3)  # calibration misbehaving scores
OFFLINE_SCENARIOS = {
    # name: (deployment benign, deployment misbehaving, what the certificate claims there)
    "exchangeable": (BENIGN, MISBEHAVING, True),
    # covariate shift inside each class that leaves the score distributions as they are (a new
    # mix of topics the monitor scores alike); FAR and MR are class-conditional, unchanged
    "covariate shift, rates unchanged": (BENIGN, MISBEHAVING, True),
    "prevalence 5% -> 60%": (BENIGN, MISBEHAVING, True),
    "shift that breaks both rates": (stats.beta(3, 5), stats.beta(4, 4), False),
}


@dataclass
class Tally:
    """Deployments simulated, wrong "holds" among them, and labels taken by each (if any)."""

    runs: int = 0
    wrong: int = 0
    holds: int = 0
    labels: list | None = None

    def add(self, wrong: bool, holds: bool, labels: int | None = None) -> None:
        """One deployment (``labels``: those it took to hold, None where it never held)."""
        self.runs += 1
        self.wrong += bool(wrong)
        self.holds += bool(holds)
        self.labels = (self.labels or []) + [labels]


def offline(rate: str, scenario: str, runs: int, rng: np.random.Generator, *, n: int = 300,
            alpha: float = 0.1, delta: float = 0.05) -> Tally:
    """`certify_far` or `certify_mr` on ``n`` calibration scores of the class, read once; a
    wrong "holds": certified while the deployment rate of that class is above ``alpha``."""
    ben, mis, _ = OFFLINE_SCENARIOS[scenario]
    out = Tally()
    for _ in range(runs):
        if rate == "far":
            c = certify_far(BENIGN.rvs(n, random_state=rng), alpha, delta)
            true = float(ben.sf(c.threshold)) if c.certified else 0.0
        else:
            c = certify_mr(MISBEHAVING.rvs(n, random_state=rng), alpha, delta)
            true = float(mis.cdf(c.threshold)) if c.certified else 0.0
        out.add(c.certified and true > alpha, c.certified)
    return out


# -- the shift-aware weighted certificate -------------------------------------------------------

# Two kinds of transcript ("chat", "code") whose scores differ within each class; calibration is
# mostly chat, the new traffic mostly code: a covariate shift (P(label | transcript) unchanged)
# that raises FAR, which the weights must carry.
KINDS = {"chat": (stats.beta(2, 6), stats.beta(5, 3)), "code": (stats.beta(3, 5),
                                                               stats.beta(4, 3))}
CALIB_MIX, NEW_MIX = {"chat": 0.8, "code": 0.2}, {"chat": 0.2, "code": 0.8}


def weighted(rate: str, runs: int, rng: np.random.Generator, *, estimated: bool,
             n: int = 600, n_new: int = 300, alpha: float = 0.1, delta: float = 0.05) -> Tally:
    """`shift_certificate` on ``n`` calibration rows of the class with importance weights, the
    true density ratios or (``estimated``) ratios of kind frequencies counted on ``n_new``
    unlabelled new transcripts; wrong when it certifies a threshold whose rate on the new
    traffic (closed form over the mix) is above ``alpha``."""
    from calimon.studies.shift.certify import shift_certificate

    cls = 0 if rate == "far" else 1
    out = Tally()
    for _ in range(runs):
        kinds = rng.choice(list(CALIB_MIX), size=n, p=list(CALIB_MIX.values()))
        scores = np.empty(n)
        for k, dists in KINDS.items():
            scores[kinds == k] = dists[cls].rvs(int((kinds == k).sum()), random_state=rng)
        new_share = NEW_MIX
        if estimated:
            seen = rng.choice(list(NEW_MIX), size=n_new, p=list(NEW_MIX.values()))
            new_share = {k: max(np.mean(seen == k), 1 / n_new) for k in NEW_MIX}
        w = np.array([new_share[k] / CALIB_MIX[k] for k in kinds])
        c = shift_certificate(scores, np.full(n, cls), w, rate=rate, alpha=alpha, delta=delta,
                              seed=int(rng.integers(1 << 30)))
        if c.abstained:
            out.add(False, False)
            continue
        true = sum(NEW_MIX[k] * (KINDS[k][0].sf(c.threshold) if rate == "far" else
                                 KINDS[k][1].cdf(c.threshold)) for k in NEW_MIX)
        out.add(true > alpha, True)
    return out


# -- the three-way shift verdict ------------------------------------------------------------------

SAME = {"chat": (stats.beta(2, 6), stats.beta(5, 3)), "code": (stats.beta(2, 6),
                                                               stats.beta(5, 3))}
VERDICT_SCENARIOS = {
    # name: (score distributions by kind, new traffic's misbehaving share)
    "covariate shift, rates unchanged": (SAME, 0.3),
    "covariate shift that raises FAR": (KINDS, 0.3),
    "covariate shift, prevalence 30% -> 60%": (SAME, 0.6),
}


@dataclass(frozen=True)
class _Report:
    """What the verdict reads of a shift report (the domain test rejected)."""

    weights: np.ndarray
    n_new: int
    shifted: bool = True
    outside_share: float = 0.0


def _draw(kinds_dist, mix: dict[str, float], n: int, pi: float, rng: np.random.Generator):
    kinds = rng.choice(list(mix), size=n, p=list(mix.values()))
    y = (rng.random(n) < pi).astype(int)
    s = np.empty(n)
    for k, dists in kinds_dist.items():
        for cls in (0, 1):
            at = (kinds == k) & (y == cls)
            s[at] = dists[cls].rvs(int(at.sum()), random_state=rng)
    return kinds, y, s


def verdicts(rate: str, scenario: str, runs: int, rng: np.random.Generator, *,
             n: int = 600, n_new: int = 400, alpha: float = 0.1,
             delta: float = 0.05) -> tuple[Tally, Tally]:
    """The three-way verdict (`calimon.studies.shift.check.certify_sides`) of ``rate <= alpha``
    at the calibration's certified threshold, with the true density ratios as weights; the
    truth is the rate of the new traffic at that threshold (closed form over the mix).
    Returns two tallies: wrong "holds" (the verdict says the certificate holds, the truth
    breaks it) and wrong "breaks" (the other way round)."""
    from calimon.studies.shift.check import certify_sides
    from calimon.studies.shift.verdict import HOLDS

    dists, pi_new = VERDICT_SCENARIOS[scenario]
    holds, breaks = Tally(), Tally()
    for _ in range(runs):
        kinds, y, s = _draw(dists, CALIB_MIX, n, 0.3, rng)
        _, _, s_new = _draw(dists, NEW_MIX, n_new, pi_new, rng)
        w = np.array([NEW_MIX[k] / CALIB_MIX[k] for k in kinds])
        out = certify_sides(_Report(w, n_new), s, y, delta=delta, new_scores=s_new,
                            **{rate: (alpha,)})
        v, t = out.verdicts[0], out.naive[0].threshold
        if not out.naive[0].certified:
            continue
        cls = 0 if rate == "far" else 1
        true = sum(NEW_MIX[k] * (dists[k][0].sf(t) if cls == 0 else dists[k][1].cdf(t))
                   for k in NEW_MIX)
        holds.add(v.kind == HOLDS and true > alpha, v.kind == HOLDS)
        said = v.kind == "shift breaks the certificate"
        breaks.add(said and true <= alpha, said)
    return holds, breaks


# -- the drift watch ------------------------------------------------------------------------------

def drift(runs: int, rng: np.random.Generator, *, spending: bool, checks: int = 30,
          calib: int = 300, window: int = 500, every: int = 100) -> Tally:
    """The drift watch on exchangeable traffic: a fixed calibration set against rolling
    windows of one stream (``window`` transcripts, a check every ``every``, so each window
    shares 80% with the last), each check's p-value the exact two-sided z-test of the means of
    N(0, 1) data (the idealised permutation test). ``spending``: the watch's rule
    (`calimon.review.drift.first_alarm`, checks up to the last it can run before it says it
    is spent); else each window at alpha, the rule before. Every alarm is a false one."""
    import math

    from scipy.stats import norm

    from calimon.review.drift import ALPHA, MAX_PERMUTATIONS, first_alarm, permutations_for

    usable = sum(permutations_for(k, 200) <= MAX_PERMUTATIONS for k in range(1, checks + 1))
    out = Tally()
    for _ in range(runs):
        cal = rng.normal(size=calib)
        stream = np.r_[0.0, np.cumsum(rng.normal(size=window + every * (checks - 1)))]
        starts = np.arange(checks) * every
        z = ((stream[starts + window] - stream[starts]) / window - cal.mean()) / math.sqrt(
            1 / calib + 1 / window)
        p = 2 * norm.sf(np.abs(z))
        alarm = (first_alarm(p[:usable]) is not None) if spending else bool((p <= ALPHA).any())
        out.add(alarm, alarm)
    return out


# -- the live review status ---------------------------------------------------------------------

@dataclass(frozen=True)
class Traffic:
    """A served policy's traffic: per automatic stratum (auto_block, auto_pass) its size and
    its benign count; the review band's size and benign count (a census, labelled first)."""

    block: tuple[int, int]
    passed: tuple[int, int]
    review: tuple[int, int]

    def far(self) -> float:
        """The true FAR of the traffic."""
        return self.block[1] / (self.block[1] + self.passed[1] + self.review[1])

    def mr(self) -> float:
        """The true MR of the traffic."""
        missed = self.passed[0] - self.passed[1]
        return missed / (missed + self.block[0] - self.block[1] + self.review[0]
                         - self.review[1])

    def scaled(self, f: float) -> Traffic:
        """The same shares at ``f`` times the size (traffic that has arrived so far)."""
        return Traffic(*(tuple(round(x * f) for x in s)
                         for s in (self.block, self.passed, self.review)))


def _counts(action: str, size: int, sampled: int, benign: int, unresolved: int) -> Counts:
    return Counts(action, size, sampled, benign, sampled - benign - unresolved, unresolved)


def _status(tr: Traffic, seen: dict[str, tuple[int, int, int]]) -> dict[str, Counts]:
    """The strata's counts: ``seen[action] = (sampled, benign, unresolved)``."""
    sizes = {"auto_block": tr.block[0], "auto_pass": tr.passed[0],
             "human_review": tr.review[0]}
    out = {}
    for a, size in sizes.items():
        m, ben, unres = seen[a]
        if a == "human_review":  # a census: the unlabelled ones are unresolved
            out[a] = _counts(a, size, size, ben, unres + size - m)
        else:
            out[a] = _counts(a, size, m, ben, unres)
    return out


def _labelling_order(tr: Traffic, rng: np.random.Generator, unresolved: float):
    """The labels as a reviewer gives them: the review band first, then both automatic
    strata grown at the same fraction (the planner's order), each label benign (1) or not (0),
    or unresolved (-1) with probability ``unresolved``."""
    seq = []
    for action, (size, ben) in (("human_review", tr.review), ("auto_block", tr.block),
                                ("auto_pass", tr.passed)):
        labels = np.r_[np.ones(ben, int), np.zeros(size - ben, int)]
        rng.shuffle(labels)  # draw order: a uniform permutation
        lost = rng.random(size) < unresolved
        labels[lost] = -1
        pos = (np.arange(size) + 0.5) / size if action != "human_review" else \
            np.arange(size) / size - 1.0  # the band first
        seq += [(p, action, y) for p, y in zip(pos, labels, strict=True)]
    seq.sort(key=lambda x: x[0])
    return [(a, y) for _, a, y in seq]


def live(tr: Traffic, runs: int, rng: np.random.Generator, *, rate: str = "far",
         alpha: float = 0.05, delta: float = 0.05, anytime: bool = True, every: int = 1,
         max_labels: int = 600, unresolved: float = 0.0) -> Tally:
    """The ``rate`` certificate of the live status read after every ``every`` labels (up to
    ``max_labels``) and acted on the first time it holds; ``every=0``: read once, at
    ``max_labels``. A wrong "holds": it held while the true rate is above ``alpha``; the labels
    taken are those given when it first held (None when it never did)."""
    true = tr.far() if rate == "far" else tr.mr()
    out = Tally()
    for _ in range(runs):
        seen = {a: [0, 0, 0] for a in ("auto_block", "auto_pass", "human_review")}
        first = None
        order = _labelling_order(tr, rng, unresolved)[:max_labels]
        for i, (action, y) in enumerate(order, 1):
            s = seen[action]
            s[0] += 1
            s[1] += y == 1
            s[2] += y == -1
            if (every and i % every == 0) or i == len(order):
                c = _status(tr, {a: tuple(v) for a, v in seen.items()})
                if rate_bound(c, rate, delta, anytime=anytime) <= alpha:
                    first = i
                    break
        out.add(first is not None and true > alpha, first is not None, first)
    return out


def live_growing(tr: Traffic, runs: int, rng: np.random.Generator, *, start: float = 0.5,
                 alpha: float = 0.05, delta: float = 0.05, max_labels: int = 600) -> Tally:
    """As `live`, with the traffic growing from ``start`` of ``tr`` to all of it while the
    labels come in (one arrival step per label, spread evenly): each read bounds the traffic
    decided at that moment, sampled as the server samples it (the labelled prefix in draw
    order, new arrivals with smaller draws leaving gaps until labelled)."""
    out = Tally()
    strata = {"auto_block": tr.block, "auto_pass": tr.passed}
    for _ in range(runs):
        pops = {}
        for a, (size, ben) in strata.items():
            lab = np.r_[np.ones(ben, int), np.zeros(size - ben, int)]
            rng.shuffle(lab)  # arrival order
            pops[a] = (lab, rng.random(size))  # labels, audit draws
        labelled = {a: np.zeros(s[0], bool) for a, s in strata.items()}
        first = None
        for i in range(1, max_labels + 1):
            f = min(1.0, start + (1 - start) * i / max_labels)
            now = tr.scaled(f)
            counts = {}
            for a, (lab, draw) in pops.items():
                n = getattr(now, "block" if a == "auto_block" else "passed")[0]
                d, y, done = draw[:n], lab[:n], labelled[a][:n]
                if i % 2 == (a == "auto_block"):  # the reviewer labels the next in draw order
                    todo = np.flatnonzero(~done)
                    if todo.size:
                        labelled[a][todo[np.argmin(d[todo])]] = True
                        done = labelled[a][:n]
                gap = d[~done].min() if (~done).any() else np.inf
                prefix = d < gap
                m, ben = int(prefix.sum()), int(y[prefix].sum())
                counts[a] = _counts(a, n, m, ben, 0)
            counts["human_review"] = _counts("human_review", now.review[0], now.review[0],
                                             now.review[1], 0)
            if rate_bound(counts, "far", delta) <= alpha:
                first = i
                kb, kp = (int(pops[a][0][:counts[a].size].sum()) for a in strata)
                out.add(kb / (kb + kp + now.review[1]) > alpha, True, i)
                break
        if first is None:
            out.add(False, False)
    return out


def fixed_n_labels(tr: Traffic, *, alpha: float = 0.05, delta: float = 0.05) -> int | None:
    """The fixed-n plan at the truth: the fewest labels (review band, then both automatic
    strata at one fraction) whose fixed-n bound certifies at the expected benign counts."""
    def certifies(f: float) -> bool:
        seen = {"human_review": (tr.review[0], tr.review[1], 0)}
        for a, (size, ben) in (("auto_block", tr.block), ("auto_pass", tr.passed)):
            m = round(f * size)
            seen[a] = (m, round(ben / size * m), 0)
        return rate_bound(_status(tr, seen), "far", delta, anytime=False) <= alpha

    if not certifies(1.0):
        return None
    lo, hi = 0.0, 1.0
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if certifies(mid) else (mid, hi)
    return tr.review[0] + round(hi * tr.block[0]) + round(hi * tr.passed[0])


def one_count(N: int, K: int, target: int, runs: int, rng: np.random.Generator, *,
              anytime: bool = True, every: int = 1, max_labels: int = 600,
              delta: float = 0.05) -> Tally:
    """The bound behind each automatic stratum alone: ``K`` of a kind among ``N``, sampled
    without replacement in draw order, its upper bound read after every ``every`` labels
    (``every=0``: once, at ``max_labels``) and acted on the first time it is within
    ``target``; wrong when ``K > target``."""
    upper = cs_count_upper if anytime else count_upper
    reads = range(max_labels, max_labels + 1) if every == 0 else range(every, max_labels + 1,
                                                                        every)
    out = Tally()
    for _ in range(runs):
        x = np.zeros(N, int)
        x[:K] = 1
        rng.shuffle(x)
        seen = np.cumsum(x)
        first = next((m for m in reads if upper(int(seen[m - 1]), m, N, delta) <= target), None)
        out.add(first is not None and K > target, first is not None, first)
    return out
