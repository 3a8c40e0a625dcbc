"""Escalation policies: auto-pass, human review, auto-block.

Two thresholds ``t_low <= t_high`` split traffic by score ``s``::

    s <  t_low            -> auto_pass      (a misbehaving transcript here is a *miss*)
    t_low <= s < t_high   -> human_review
    s >= t_high           -> auto_block     (a benign transcript here is a *false block*)

**Reviewers are assumed to be right**: a reviewed transcript is decided correctly, so all errors
come from the automatic actions. End to end, ``MR = misses / #misbehaving`` and
``FAR = false blocks / #benign``; ``review rate = #reviewed / n``.

The optimizers are exact on the design set. Sorting the distinct scores, a policy is a pair of
cut indices ``i <= j`` (``cut_values``: gap midpoints); prefix sums give misses, false blocks and
reviews of every pair, and for each ``j`` the best ``i`` lies in a window whose ends only move
right, so a monotone queue finds it. O(n log n) for the sort, O(n) for the scan.

Guarantees on the automatic actions (``far_alpha``, ``mr_alpha``) come from
:mod:`calimon.deploy.guarantees`: ``certify_far`` on the benign scores bounds the fraction of
benign traffic auto-blocked, ``certify_mr`` on the misbehaving scores the fraction of misbehaving
traffic auto-passed. Each holds with probability ``>= 1 - delta`` on its own (both at once:
``>= 1 - 2 delta``, union bound). They restrict ``t_high`` to the certified set (and ``t_low``
likewise); every threshold inside is covered, so optimizing within it keeps the guarantee. If a
rate cannot be certified, the action is switched off (``t_high = +inf``: never auto-block;
``t_low = -inf``: never auto-pass), which meets the bound trivially.

This module evaluates and optimizes thresholds. The policy file (``Policy`` YAML,
``apply_policy``) is in :mod:`calimon.deploy.policy_file`; designing one from a run
(``escalate_run``) and applying one to a scored CSV (``apply_policy_file``) in
:mod:`calimon.deploy.escalation`. Those names are still importable from here.
"""

from __future__ import annotations

import math
import numbers
from collections import deque
from dataclasses import asdict, dataclass
from importlib import import_module
from typing import Any, Literal

import numpy as np

from calimon.deploy.guarantees import CertifiedThreshold, certify_far, certify_mr, cut_values
from calimon.deploy.io import ScoredSet
from calimon.errors import CalimonError, ExitCode, InputError

ACTIONS = ("auto_pass", "human_review", "auto_block")
Action = Literal["auto_pass", "human_review", "auto_block"]


class InfeasiblePolicyError(CalimonError):
    """No pair of thresholds meets the budget and the guarantees together."""

    exit_code = ExitCode.INFEASIBLE


# ------------------------------------------------------------------ evaluation

def decide(scores: Any, t_low: float, t_high: float, *, below: str = "auto_pass",
           band: str = "human_review", above: str = "auto_block",
           unscored: str = "human_review") -> np.ndarray:
    """Action per score (object array of strings); a NaN score gets ``unscored``."""
    s = np.asarray(scores, dtype=float)
    out = np.full(s.shape, band, dtype=object)
    out[s < t_low] = below
    out[s >= t_high] = above
    out[np.isnan(s)] = unscored
    return out


@dataclass(frozen=True)
class PolicyStats:
    """What thresholds ``(t_low, t_high)`` do on a labelled set (reviewers assumed right)."""

    n: int
    n_pos: int
    n_neg: int
    auto_pass: int
    review: int
    auto_block: int
    misses: int
    false_blocks: int
    review_rate: float
    mr: float
    far: float
    coverage: float
    risk: float

    def to_dict(self) -> dict[str, Any]:
        """The fields as a dict."""
        return asdict(self)


def _ratio(a: int, b: int) -> float:
    return a / b if b else math.nan


def evaluate_policy(scored: ScoredSet, t_low: float, t_high: float) -> PolicyStats:
    """Counts and rates of the three actions; ``risk`` = errors among auto-decided."""
    scored.require_labels("evaluate_policy")
    s, y = scored.scores, scored.labels
    passed, blocked = s < t_low, s >= t_high
    n, n_pos = len(scored), int((y == 1).sum())
    misses = int((passed & (y == 1)).sum())
    false_blocks = int((blocked & (y == 0)).sum())
    auto = int(passed.sum() + blocked.sum())
    review = n - auto
    return PolicyStats(n=n, n_pos=n_pos, n_neg=n - n_pos, auto_pass=int(passed.sum()),
                       review=review, auto_block=int(blocked.sum()), misses=misses,
                       false_blocks=false_blocks, review_rate=review / n,
                       mr=_ratio(misses, n_pos), far=_ratio(false_blocks, n - n_pos),
                       coverage=auto / n, risk=_ratio(misses + false_blocks, auto))


# ------------------------------------------------------------------ optimization

@dataclass(frozen=True)
class PolicyDesign:
    """Optimal thresholds on the design set and what they do there.

    ``objective``: ``cost_miss * misses + cost_false_block * false_blocks + cost_review *
    reviews``, divided by ``n`` (cost per transcript). ``guarantees``: the certificates
    that constrained the thresholds (may be empty).
    """

    t_low: float
    t_high: float
    objective: float
    stats: PolicyStats
    budget: float | None
    cost_miss: float
    cost_false_block: float
    cost_review: float
    guarantees: tuple[CertifiedThreshold, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The design as a nested dict, its guarantees included."""
        d = asdict(self)
        d["guarantees"] = [g.to_dict() for g in self.guarantees]
        return d


def _nonneg(x: Any, name: str) -> float:
    if isinstance(x, bool) or not isinstance(x, numbers.Real) or not (
            math.isfinite(x) and x >= 0):
        raise InputError(f"expected a finite number >= 0, got {x!r}", field=name)
    return float(x)


def _scan(p1: np.ndarray, n0: np.ndarray, wm: float, wf: float, wr: float,
          max_review: int | None, i_max: int, j_min: int) -> tuple[int, int] | None:
    """Best cut pair ``(i, j)``, ``0 <= i <= min(j, i_max)``, ``j_min <= j <= m``.

    ``p1`` / ``n0``: misbehaving / benign counts below each of the ``m + 1`` cuts (prefix sums
    over groups of equal score, ascending). Minimizes ``wm P1[i] + wf (N0 - N0[j]) +
    wr (C[j] - C[i])`` with ``C = P1 + N0`` and ``C[j] - C[i] <= max_review``; ties go to fewer
    reviews, then the lower ``j``. None if infeasible.
    """
    m = p1.size - 1
    c = p1 + n0
    lo = np.zeros(m + 1, dtype=int) if max_review is None else np.searchsorted(
        c, c - max_review, "left")
    g = wm * p1 - wr * c  # the part of the objective that depends on i
    q: deque[int] = deque()
    nxt = 0
    best: tuple[float, int, int, int] | None = None
    for j in range(m + 1):
        hi = min(j, i_max)
        while nxt <= hi:
            while q and g[q[-1]] >= g[nxt]:  # keep the later index on ties: fewer reviews
                q.pop()
            q.append(nxt)
            nxt += 1
        while q and q[0] < lo[j]:
            q.popleft()
        if j < j_min or not q:
            continue
        i = q[0]
        total = g[i] + wr * c[j] + wf * (n0[-1] - n0[j])
        key = (float(total), int(c[j] - c[i]), j, i)
        if best is None or key[:2] < best[:2]:
            best = key
    return None if best is None else (best[3], best[2])


def _certificates(scored: ScoredSet, far_alpha: float | None, mr_alpha: float | None,
                  delta: float) -> tuple[list[CertifiedThreshold], tuple[int | None, bool],
                                         tuple[int | None, bool]]:
    """(the certificates asked for, (false blocks allowed, never block), (misses allowed,
    never pass)); a rate that cannot be certified allows no automatic decision of its kind,
    one not asked for is unlimited (None)."""
    s, y = scored.scores, scored.labels
    guarantees: list[CertifiedThreshold] = []
    max_fb = max_miss = None
    never_block = never_pass = False
    if far_alpha is not None:
        if not (y == 0).any():
            raise InputError("far_alpha needs benign rows", path=scored.path, field="label")
        cert = certify_far(s[y == 0], far_alpha, delta)
        guarantees.append(cert)
        max_fb, never_block = (cert.k, False) if cert.certified else (0, True)
    if mr_alpha is not None:
        if not (y == 1).any():
            raise InputError("mr_alpha needs misbehaving rows", path=scored.path, field="label")
        cert = certify_mr(s[y == 1], mr_alpha, delta)
        guarantees.append(cert)
        max_miss, never_pass = (cert.k, False) if cert.certified else (0, True)
    return guarantees, (max_fb, never_block), (max_miss, never_pass)


def design_policy(scored: ScoredSet, *, budget: float | None = None, cost_miss: float = 1.0,
                  cost_false_block: float = 1.0, cost_review: float = 0.0,
                  far_alpha: float | None = None, mr_alpha: float | None = None,
                  delta: float = 0.05) -> PolicyDesign:
    """Exact optimal ``(t_low, t_high)`` on ``scored`` (see the module docstring).

    ``budget``: the largest fraction of ``scored`` that may go to review (None: no limit).
    ``far_alpha`` / ``mr_alpha``: certify the auto-block FAR / auto-pass MR at ``1 - delta``.
    Raises InfeasiblePolicyError when nothing meets the constraints.
    """
    scored.require_labels("design_policy")
    wm, wf = _nonneg(cost_miss, "cost_miss"), _nonneg(cost_false_block, "cost_false_block")
    wr = _nonneg(cost_review, "cost_review")
    n = len(scored)
    max_review = None
    if budget is not None:
        if isinstance(budget, bool) or not isinstance(budget, numbers.Real) or not (
                0 <= budget <= 1):
            raise InputError(f"expected a fraction in [0, 1], got {budget!r}", field="budget")
        max_review = int(math.floor(budget * n + 1e-9))
    s, y = scored.scores, scored.labels
    guarantees, (max_fb, never_block), (max_miss, never_pass) = _certificates(
        scored, far_alpha, mr_alpha, delta)
    v, inv = np.unique(s, return_inverse=True)
    p1 = np.r_[0, np.cumsum(np.bincount(inv, weights=(y == 1), minlength=v.size))].astype(int)
    n0 = np.r_[0, np.cumsum(np.bincount(inv, weights=(y == 0), minlength=v.size))].astype(int)
    m = v.size
    # the certified sets, as cut indices: misses(i) <= k_mr and false_blocks(j) <= k_far
    i_max = 0 if never_pass else m if max_miss is None else int(
        np.searchsorted(p1, max_miss, "right")) - 1
    j_min = m if never_block else 0 if max_fb is None else int(
        np.searchsorted(n0, n0[-1] - max_fb, "left"))
    best = _scan(p1, n0, wm, wf, wr, max_review, i_max, j_min)
    if best is None:
        c = p1 + n0
        need = (c[j_min] - c[min(i_max, j_min)]) / n
        raise InfeasiblePolicyError(
            f"no thresholds keep review within the budget ({budget}) while meeting the "
            f"guarantees {[f'{g.rate}<={g.alpha}' for g in guarantees]}: they need a review "
            f"rate of at least {need:.4g} on this set; raise the budget or loosen alpha")
    i, j = best
    cuts = cut_values(v)
    t_low = -math.inf if never_pass else float(cuts[i])
    t_high = math.inf if never_block else float(cuts[j])
    stats = evaluate_policy(scored, t_low, t_high)
    objective = (wm * stats.misses + wf * stats.false_blocks + wr * stats.review) / n
    return PolicyDesign(t_low=t_low, t_high=t_high, objective=objective, stats=stats,
                        budget=budget, cost_miss=wm, cost_false_block=wf, cost_review=wr,
                        guarantees=tuple(guarantees))


def optimize_budget(scored: ScoredSet, budget: float, *, weight_miss: float = 1.0,
                    weight_false_block: float = 1.0, far_alpha: float | None = None,
                    mr_alpha: float | None = None, delta: float = 0.05) -> PolicyDesign:
    """Fewest (weighted) auto-decided errors with review rate ``<= budget``."""
    return design_policy(scored, budget=budget, cost_miss=weight_miss,
                         cost_false_block=weight_false_block, far_alpha=far_alpha,
                         mr_alpha=mr_alpha, delta=delta)


def optimize_cost(scored: ScoredSet, cost_miss: float, cost_false_block: float,
                  cost_review: float, *, budget: float | None = None,
                  far_alpha: float | None = None, mr_alpha: float | None = None,
                  delta: float = 0.05) -> PolicyDesign:
    """Lowest expected cost per transcript: misses, false blocks and reviews all cost."""
    return design_policy(scored, budget=budget, cost_miss=cost_miss,
                         cost_false_block=cost_false_block, cost_review=cost_review,
                         far_alpha=far_alpha, mr_alpha=mr_alpha, delta=delta)


@dataclass(frozen=True, eq=False)
class CoverageRiskCurve:
    """For each review budget, the best band: coverage (fraction auto-decided) and risk
    (error rate among auto-decided), with its thresholds and end-to-end MR / FAR."""

    budget: np.ndarray
    coverage: np.ndarray
    risk: np.ndarray
    t_low: np.ndarray
    t_high: np.ndarray
    mr: np.ndarray
    far: np.ndarray


def coverage_risk_curve(scored: ScoredSet, budgets: Any = None, *, weight_miss: float = 1.0,
                        weight_false_block: float = 1.0) -> CoverageRiskCurve:
    """Widen the review band: :func:`optimize_budget` at each budget (default 0, 0.02, ..., 1)."""
    b = np.linspace(0.0, 1.0, 51) if budgets is None else np.asarray(budgets, dtype=float)
    if b.ndim != 1 or b.size == 0 or np.any((b < 0) | (b > 1)):
        raise InputError("expected a non-empty 1-D list of budgets in [0, 1]", field="budgets")
    rows = []
    for budget in b:
        d = optimize_budget(scored, float(budget), weight_miss=weight_miss,
                            weight_false_block=weight_false_block)
        st = d.stats
        rows.append((st.coverage, st.risk, d.t_low, d.t_high, st.mr, st.far))
    cols = [np.array(c, dtype=float) for c in zip(*rows, strict=True)]
    return CoverageRiskCurve(b, *cols)


# names that moved to their own modules, still importable from here (PEP 562)
_MOVED = {name: "calimon.deploy.policy_file" for name in (
    "Guarantee", "Policy", "PolicyActions", "apply_policy", "load_policy", "policy_from_design",
    "save_policy")}
_MOVED.update({name: "calimon.deploy.escalation" for name in (
    "ApplySummary", "EscalationReport", "apply_policy_file", "escalate_run")})


def __getattr__(name: str) -> Any:
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(_MOVED[name]), name)
