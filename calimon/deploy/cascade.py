"""Two-stage cascades: a cheap readout on everything, an expensive one on the uncertain band.

Stage 1 (e.g. a probe head, score ``s1``) runs on every transcript; stage 2 (e.g. a prompted
verdict, score ``s2``) only on those with ``a <= s1 < b``::

    s1 <  a              -> not flagged
    s1 >= b              -> flagged
    a <= s1 < b          -> escalated; flagged iff s2 >= t2

End-to-end ``MR = FN / (TP + FN)`` and ``FAR = FP / (FP + TN)`` of the final flag; cost per 1,000
transcripts ``= 1000 * (cost_stage1 + escalation_rate * cost_stage2)`` in the unit of the
per-transcript costs (seconds, dollars, ...).

``design_cascade`` scans ``(a, b, t2)`` on labelled data where both scores are known for every
transcript. Candidate cuts lie in the gaps between distinct scores (``cut_values``), thinned to
at most ``n_grid`` evenly spaced ranks per stage (the stage-2 grid also holds the exact best
stage-2-alone threshold, so "stage 2 on everything" is always a candidate). The scan is exhaustive over that grid, with
prefix sums, O(grid^2 * grid2 + n * grid2). The figures are empirical (no guarantee): check
them on a held-out split.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from calimon.deploy.guarantees import cut_values
from calimon.deploy.io import ScoredSet
from calimon.deploy.policies import InfeasiblePolicyError
from calimon.errors import InputError

TOL = 1e-12


@dataclass(frozen=True)
class CascadeStats:
    """What a cascade ``(a, b, t2)`` does on a labelled set."""

    a: float
    b: float
    t2: float
    n: int
    n_pos: int
    n_neg: int
    escalated: int
    escalation_rate: float
    misses: int
    false_alarms: int
    mr: float
    far: float
    cost_per_1000: float

    def to_dict(self) -> dict[str, Any]:
        """The fields as a dict."""
        return asdict(self)


@dataclass(frozen=True)
class CascadeDesign:
    """The chosen cascade and, for comparison, each stage alone at the same FAR target
    (``stage1_only``: ``a == b``, no escalation; ``stage2_only``: stage 2 on everything,
    costing ``cost_stage2`` per transcript and no stage 1)."""

    cascade: CascadeStats
    stage1_only: CascadeStats
    stage2_only: CascadeStats
    target_far: float
    max_mr: float | None
    n_candidates: int

    def to_dict(self) -> dict[str, Any]:
        """The design as a nested dict (its stats included)."""
        return asdict(self)


def _arrays(s1: Any, s2: Any, labels: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    a, b = np.asarray(s1, dtype=float), np.asarray(s2, dtype=float)
    y = np.asarray(labels)
    if a.ndim != 1 or a.size == 0 or not np.all(np.isfinite(a)):
        raise InputError("expected a non-empty 1-D array of finite scores", field="s1")
    if b.shape != a.shape:
        raise InputError(f"expected {a.size} stage-2 scores, got shape {b.shape}", field="s2")
    if y.shape != a.shape or not np.all((y == 0) | (y == 1)):
        raise InputError(f"expected {a.size} labels of 0/1", field="labels")
    return a, b, y.astype(np.int64)


def _cost(x: Any, name: str) -> float:
    if isinstance(x, bool) or not isinstance(x, numbers.Real) or not (
            math.isfinite(x) and x >= 0):
        raise InputError(f"expected a finite number >= 0, got {x!r}", field=name)
    return float(x)


def evaluate_cascade(s1: Any, s2: Any, labels: Any, a: float, b: float, t2: float,
                     cost_stage1: float, cost_stage2: float) -> CascadeStats:
    """End-to-end MR / FAR, escalation rate and cost of the cascade ``(a, b, t2)``.

    ``s2`` may be NaN outside the band (stage 2 never ran there); inside it must be finite.
    """
    s1a, s2a = np.asarray(s1, dtype=float), np.asarray(s2, dtype=float)
    esc = (s1a >= a) & (s1a < b)
    if np.any(np.isnan(s2a[esc])):
        raise InputError("stage-2 score missing for an escalated transcript (a missing score "
                         "is never 0)", field="s2")
    s1a, s2a, y = _arrays(s1a, np.where(esc, s2a, 0.0), labels)
    c1, c2 = _cost(cost_stage1, "cost_stage1"), _cost(cost_stage2, "cost_stage2")
    flag = (s1a >= b) | (esc & (s2a >= t2))
    n, n_pos = y.size, int(y.sum())
    fn, fp = int((~flag & (y == 1)).sum()), int((flag & (y == 0)).sum())
    rate = float(esc.mean())
    return CascadeStats(a=float(a), b=float(b), t2=float(t2), n=n, n_pos=n_pos,
                        n_neg=n - n_pos, escalated=int(esc.sum()), escalation_rate=rate,
                        misses=fn, false_alarms=fp,
                        mr=fn / n_pos if n_pos else math.nan,
                        far=fp / (n - n_pos) if n - n_pos else math.nan,
                        cost_per_1000=1000.0 * (c1 + rate * c2))


def _grid(values: np.ndarray, n_grid: int) -> tuple[np.ndarray, np.ndarray]:
    """(cut indices kept, cut values of all cuts) for the distinct ``values``."""
    v = np.unique(values)
    cuts = cut_values(v)
    idx = np.unique(np.rint(np.linspace(0, v.size, min(n_grid, v.size + 1))).astype(int))
    return idx, cuts


def _check_design_args(target_far: Any, max_mr: Any, n_grid: Any) -> None:
    if isinstance(target_far, bool) or not isinstance(target_far, numbers.Real) or not (
            0 <= target_far <= 1):
        raise InputError(f"expected a rate in [0, 1], got {target_far!r}", field="target_far")
    if max_mr is not None and not (isinstance(max_mr, numbers.Real) and 0 <= max_mr <= 1):
        raise InputError(f"expected a rate in [0, 1] or None, got {max_mr!r}", field="max_mr")
    if isinstance(n_grid, bool) or not isinstance(n_grid, int) or n_grid < 2:
        raise InputError(f"expected an integer >= 2, got {n_grid!r}", field="n_grid")


def _scan(x1: np.ndarray, x2: np.ndarray, y: np.ndarray, idx1: np.ndarray, cuts1: np.ndarray,
          t2s: np.ndarray, c1: float, c2: float) -> np.ndarray:
    """One row per candidate (a-cut <= b-cut of the kept stage-1 cuts, t2): MR, FAR, cost per
    1000, a-cut index, b-cut index (into ``idx1``) and t2 index."""
    n, n_pos = y.size, int(y.sum())
    n_neg = n - n_pos
    group = np.searchsorted(np.unique(x1), x1)  # stage-1 group of each transcript
    m1 = cuts1.size - 1

    def prefix(mask: np.ndarray) -> np.ndarray:  # count of mask below each kept stage-1 cut
        per = np.bincount(group, weights=mask, minlength=m1)
        return np.r_[0.0, np.cumsum(per)][idx1]

    below_pos, below_neg = prefix(y == 1), prefix(y == 0)
    ia, ib = np.triu_indices(idx1.size)  # a-cut <= b-cut
    rows = []
    for k, t in enumerate(t2s):
        hit = x2 >= t
        hp, hn = prefix(hit & (y == 1)), prefix(hit & (y == 0))
        tp = (n_pos - below_pos[ib]) + (hp[ib] - hp[ia])
        fp = (n_neg - below_neg[ib]) + (hn[ib] - hn[ia])
        esc = (below_pos[ib] + below_neg[ib]) - (below_pos[ia] + below_neg[ia])
        rows.append(np.stack([1 - tp / n_pos, fp / n_neg, 1000 * (c1 + esc / n * c2), ia, ib,
                              np.full(ia.size, k)], axis=1))
    return np.concatenate(rows)


def design_cascade(s1: Any, s2: Any, labels: Any, *, target_far: float, cost_stage1: float,
                   cost_stage2: float, max_mr: float | None = None, n_grid: int = 101,
                   t2: float | None = None) -> CascadeDesign:
    """Scan bands ``[a, b)`` (and ``t2`` unless given) for ``FAR <= target_far``.

    With ``max_mr``: the cheapest cascade with ``MR <= max_mr`` too (ties: lower MR, then
    lower FAR). Without: the lowest MR reachable under the FAR target, at the lowest cost
    that reaches it. Raises InfeasiblePolicyError if no candidate qualifies.
    """
    x1, x2, y = _arrays(s1, s2, labels)
    if not np.all(np.isfinite(x2)):
        raise InputError("design needs stage-2 scores for every transcript", field="s2")
    c1, c2 = _cost(cost_stage1, "cost_stage1"), _cost(cost_stage2, "cost_stage2")
    _check_design_args(target_far, max_mr, n_grid)
    n_pos = int(y.sum())
    if not n_pos or not y.size - n_pos:
        raise InputError("design needs both benign and misbehaving transcripts", field="labels")

    idx1, cuts1 = _grid(x1, n_grid)
    stage2 = _stage2_only(x2, y, target_far, c2)
    if t2 is None:  # the grid, plus stage 2's own best threshold so the scan contains it
        idx2, cuts2 = _grid(x2, n_grid)
        t2s = np.unique(np.r_[cuts2[idx2], stage2.t2])
    else:
        t2s = np.array([float(t2)])
    table = _scan(x1, x2, y, idx1, cuts1, t2s, c1, c2)
    mr, far, cost = table[:, 0], table[:, 1], table[:, 2]
    ok = far <= target_far + TOL
    if max_mr is not None:
        ok &= mr <= max_mr + TOL
    if not ok.any():
        raise InfeasiblePolicyError(f"no cascade on the grid reaches FAR <= {target_far}"
                                    + ("" if max_mr is None else f" with MR <= {max_mr}"))
    cand = np.flatnonzero(ok)
    f, r, co = far[cand], mr[cand], cost[cand]
    # np.lexsort sorts by its last key first
    order = np.lexsort((f, co, r) if max_mr is None else (f, r, co))
    best = table[cand[order[0]]]
    a, b = cuts1[idx1[int(best[3])]], cuts1[idx1[int(best[4])]]
    chosen = evaluate_cascade(x1, x2, y, a, b, t2s[int(best[5])], c1, c2)

    only1 = ok & (table[:, 3] == table[:, 4])
    c = np.flatnonzero(only1) if only1.any() else np.flatnonzero(
        (table[:, 3] == table[:, 4]) & (far <= target_far + TOL))
    j = c[np.lexsort((far[c], mr[c]))[0]]
    stage1 = evaluate_cascade(x1, x2, y, cuts1[idx1[int(table[j, 3])]],
                              cuts1[idx1[int(table[j, 4])]], math.inf, c1, c2)
    return CascadeDesign(cascade=chosen, stage1_only=stage1, stage2_only=stage2,
                         target_far=float(target_far), max_mr=max_mr, n_candidates=int(ok.sum()))


def _stage2_only(x2: np.ndarray, y: np.ndarray, target_far: float, c2: float) -> CascadeStats:
    """Stage 2 on every transcript at the lowest threshold with FAR <= target_far."""
    cuts = cut_values(np.unique(x2))
    fars = np.array([np.mean(x2[y == 0] >= t) for t in cuts])
    t = cuts[int(np.flatnonzero(fars <= target_far + TOL)[0])]
    # a stage 1 that escalates everything and costs nothing
    return evaluate_cascade(np.zeros_like(x2), x2, y, 0.0, math.inf, t, 0.0, c2)


def align_stages(stage1: ScoredSet, stage2: ScoredSet) -> tuple[np.ndarray, np.ndarray,
                                                                  np.ndarray]:
    """(s1, s2, labels) for the ids scored by both stages, in ``stage1`` order.

    Ids present in only one set are left out (count them with ``len``); a label that differs
    between the two sets raises InputError.
    """
    stage1.require_labels("align_stages")
    pos2 = {str(i): k for k, i in enumerate(stage2.ids)}
    keep = np.array([str(i) in pos2 for i in stage1.ids], dtype=bool)
    j = np.array([pos2[str(i)] for i in stage1.ids[keep]], dtype=int)
    y1, y2 = stage1.labels[keep], stage2.labels[j]
    bad = np.flatnonzero((y2 >= 0) & (y1 != y2))
    if bad.size:
        raise InputError(f"label of id {stage1.ids[keep][bad[0]]!r} differs between the two "
                         f"stages", path=stage2.path, field="label")
    return stage1.scores[keep], stage2.scores[j], y1.astype(np.int64)
