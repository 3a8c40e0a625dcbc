"""Threshold sweeps and Miss-Rate / False-Alarm-Rate curves.

A score ``s`` in [0, 1] is the monitor's confidence that a sample is misbehavior; label 1 (True)
is misbehavior, the positive class. At threshold ``t`` a sample is flagged iff ``s >= t``::

    MR  = FN / (TP + FN)     miss rate (= 1 - TPR = FNR)
    FAR = FP / (FP + TN)     false-alarm rate (= FPR)

A missing score (NaN, or None) is never read as 0: every function here refuses it with an
``InputError``; callers drop such samples explicitly (``keep = ~np.isnan(scores)``) and report how
many they dropped.

A curve whose data hold only one class is still built (so a per-group report can say why it has
no curve): the undefined rate (MR without positives, FAR without negatives) is NaN, ``auroc`` is
NaN, there is no band, ``Curve.defined`` is False and ``Curve.undefined_reason`` says why; asking
it for an operating point raises ``InputError``.

The pair-clustered bootstrap band lives in ``calimon.numerics.bootstrap``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from calimon.curve_result import Band as BandData
from calimon.curve_result import BinaryPoint, CurveData, OperatingPoint
from calimon.errors import InputError
from calimon.validation import TOL, as_groups, as_labels, as_scores  # checks shared below

if TYPE_CHECKING:
    from calimon.numerics.bootstrap import Band

def _rate(num: np.ndarray, den: int) -> np.ndarray:
    if den == 0:
        return np.full(num.shape, np.nan)
    return num / den


# ---------------------------------------------------------------------------- pure functions

def sweep_counts(scores: np.ndarray, labels: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(thresholds, tp, fp) at +inf then every distinct score, decreasing; inputs pre-validated."""
    order = np.argsort(-scores, kind="stable")
    s, y = scores[order], labels[order]
    ends = np.r_[np.flatnonzero(np.diff(s)), s.size - 1] if s.size else np.empty(0, int)
    tp = np.cumsum(y, dtype=np.int64)[ends]
    fp = ends + 1 - tp
    return np.r_[np.inf, s[ends]], np.r_[0, tp], np.r_[0, fp]


def sweep(scores: Any, labels: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sweep every distinct score as a threshold: ``(thresholds, mr, far)``.

    Thresholds decrease from +inf (flag nothing: MR = 1, FAR = 0) to the minimum score (flag
    everything: MR = 0, FAR = 1). Same points as ``sklearn.metrics.roc_curve(...,
    drop_intermediate=False)`` with ``mr = 1 - tpr``. O(n log n). With one class only, the
    undefined rate is NaN.
    """
    s = as_scores(scores)
    if s.size == 0:
        raise InputError("expected at least one score, got none", field="scores")
    y = as_labels(labels, s.size)
    thresholds, tp, fp = sweep_counts(s, y)
    n_pos = int(tp[-1])
    return thresholds, _rate(n_pos - tp, n_pos), _rate(fp, int(fp[-1]))


def confusion_at(scores: Any, labels: Any, t: float) -> tuple[int, int, int, int]:
    """``(tp, fp, tn, fn)`` when flagging every sample with ``score >= t``."""
    s = as_scores(scores)
    y = as_labels(labels, s.size)
    if not isinstance(t, int | float | np.number) or math.isnan(t):
        raise InputError(f"expected a number (or +inf), got {t!r}", field="t")
    flag = s >= t
    tp = int(np.sum(flag & y))
    fp = int(np.sum(flag & ~y))
    fn = int(np.sum(~flag & y))
    return tp, fp, int(s.size - tp - fp - fn), fn


def trapezoid_auroc(mr: np.ndarray, far: np.ndarray) -> float:
    """AUROC as the trapezoid under (FAR, 1 - MR); ties count one half. NaN if undefined."""
    if mr.size == 0 or np.isnan(mr).any() or np.isnan(far).any():
        return math.nan
    return float(np.trapezoid(1.0 - mr, far))


# ---------------------------------------------------------------------------- results

def _jsonable(x: Any) -> Any:
    if isinstance(x, float | np.floating):
        return None if not math.isfinite(float(x)) else float(x)
    if isinstance(x, np.integer):
        return int(x)
    return x


def _floats(values: Any) -> list[float | None]:
    return [_jsonable(float(v)) for v in values]


def _tuple(values: Any) -> tuple[float, ...]:
    return tuple(float(v) for v in values)


def _unfloats(values: Sequence[float | None]) -> np.ndarray:
    return np.array([math.nan if v is None else v for v in values], dtype=float)


def _frozen(a: np.ndarray) -> np.ndarray:
    a = np.array(a, dtype=float)
    a.flags.writeable = False
    return a


def _pct(x: float) -> str:
    return f"{100 * x:.4g}%"


@dataclass(frozen=True, eq=False)
class Curve:
    """MR / FAR at every threshold of a sweep, in ``sweep`` order, with an optional band."""

    thresholds: np.ndarray
    mr: np.ndarray
    far: np.ndarray
    n_pos: int
    n_neg: int
    auroc: float
    band: Band | None = None
    min_per_class: int = 1

    @classmethod
    def from_scores(cls, scores: Any, labels: Any, groups: Any = None, n_boot: int = 200,
                    seed: int = 0, far_grid: Any = None, level: float = 0.95,
                    min_per_class: int = 1) -> Curve:
        """Sweep ``scores`` and, if ``n_boot > 0`` and both classes are present, add a
        bootstrap band resampling whole ``groups`` (pair ids; None = every sample alone).
        With fewer than ``min_per_class`` samples of either class the curve is undefined
        (no AUROC, band or operating points; see ``calimon.numerics.class_support``)."""
        from calimon.numerics.bootstrap import bootstrap_band  # bootstrap imports this module

        s = as_scores(scores)
        y = as_labels(labels, s.size)
        thresholds, mr, far = sweep(s, y)
        n_pos = int(y.sum())
        n_neg = int(y.size - n_pos)
        band = None
        enough = min(n_pos, n_neg) >= max(1, min_per_class)
        if n_boot and enough:
            band = bootstrap_band(s, y, groups, far_grid=far_grid, n_boot=n_boot, level=level,
                                  seed=seed)
        return cls(_frozen(thresholds), _frozen(mr), _frozen(far), n_pos, n_neg,
                   trapezoid_auroc(mr, far) if enough else math.nan, band, int(min_per_class))

    @property
    def defined(self) -> bool:
        """True when each class has at least ``max(1, min_per_class)`` samples (AUROC, band and
        operating points exist)."""
        return min(self.n_pos, self.n_neg) >= max(1, self.min_per_class)

    @property
    def undefined_reason(self) -> str | None:
        """None for a usable curve, else why MR or FAR is undefined (or too coarse)."""
        if self.defined:
            return None
        if self.n_pos and self.n_neg:
            return (f"too few of a class: n_pos={self.n_pos}, n_neg={self.n_neg} "
                    f"(a curve needs {self.min_per_class} of each)")
        missing = "positives (misbehavior)" if self.n_pos == 0 else "negatives (benign)"
        return f"no {missing}: n_pos={self.n_pos}, n_neg={self.n_neg}"

    def _need_defined(self) -> None:
        if not self.defined:
            raise InputError(f"this curve has no operating points: {self.undefined_reason}",
                             field="curve")

    def point(self, i: int, name: str) -> OperatingPoint:
        """The operating point at sweep index ``i``."""
        fn = int(np.rint(self.mr[i] * self.n_pos))
        fp = int(np.rint(self.far[i] * self.n_neg))
        return OperatingPoint(name, float(self.thresholds[i]), float(self.mr[i]),
                              float(self.far[i]), self.n_pos - fn, fp, self.n_neg - fp, fn)

    def at_far(self, alpha: float, name: str | None = None) -> OperatingPoint:
        """Lowest MR with FAR <= alpha: the smallest threshold that keeps FAR within alpha."""
        _check_rate(alpha, "alpha")
        self._need_defined()
        i = int(np.searchsorted(self.far, alpha + TOL, side="right")) - 1
        return self.point(i, name or f"FAR<={_pct(alpha)}")

    def at_mr(self, beta: float, name: str | None = None) -> OperatingPoint:
        """Lowest FAR with MR <= beta: the largest threshold that keeps MR within beta."""
        _check_rate(beta, "beta")
        self._need_defined()
        i = int(np.flatnonzero(self.mr <= beta + TOL)[0])
        return self.point(i, name or f"MR<={_pct(beta)}")

    def eer(self, name: str = "EER") -> OperatingPoint:
        """The sweep point where |MR - FAR| is smallest (no interpolation between points).

        Ties go to the largest threshold, i.e. the fewest false alarms.
        """
        self._need_defined()
        gap = np.abs(self.mr - self.far)
        return self.point(int(np.flatnonzero(gap <= gap.min() + TOL)[0]), name)

    def min_cost(self, cost_miss: float = 1.0, cost_false_alarm: float = 1.0,
                 prevalence: float | None = None, name: str = "min cost") -> OperatingPoint:
        """Threshold minimizing ``c_miss * pi * MR + c_fa * (1 - pi) * FAR`` per sample.

        ``pi`` is ``prevalence`` or, if None, the empirical positive rate. Ties go to the largest
        threshold (the fewest false alarms).
        """
        for v, nm in ((cost_miss, "cost_miss"), (cost_false_alarm, "cost_false_alarm")):
            if not (isinstance(v, int | float) and math.isfinite(v) and v >= 0):
                raise InputError(f"expected a finite number >= 0, got {v!r}", field=nm)
        self._need_defined()
        pi = self.n_pos / (self.n_pos + self.n_neg) if prevalence is None else prevalence
        _check_rate(pi, "prevalence")
        cost = cost_miss * pi * self.mr + cost_false_alarm * (1 - pi) * self.far
        return self.point(int(np.flatnonzero(cost <= cost.min() + TOL)[0]), name)

    def operating_points(self, fars: Sequence[float] = (0.01, 0.05, 0.10),
                         cost_miss: float = 1.0, cost_false_alarm: float = 1.0,
                         prevalence: float | None = None) -> list[OperatingPoint]:
        """``FAR<=a`` for each a in ``fars``, then ``EER``, then ``min cost``."""
        pts = [self.at_far(a) for a in fars]
        return pts + [self.eer(), self.min_cost(cost_miss, cost_false_alarm, prevalence)]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready. ``thresholds[0]`` is +inf (flag nothing), written as null; any NaN
        (an undefined rate or AUROC) is also written as null."""
        band = None
        if self.band is not None:
            band = {"far_grid": _floats(self.band.far_grid), "mr_lo": _floats(self.band.mr_lo),
                    "mr_hi": _floats(self.band.mr_hi), "level": self.band.level,
                    "n_boot": self.band.n_boot, "n_used": self.band.n_used}
        return {"thresholds": _floats(self.thresholds), "mr": _floats(self.mr),
                "far": _floats(self.far), "n_pos": self.n_pos, "n_neg": self.n_neg,
                "auroc": _jsonable(self.auroc), "undefined_reason": self.undefined_reason,
                "band": band, "min_per_class": self.min_per_class}

    def to_data(self) -> CurveData:
        """The curve as curve.json holds it (`calimon.curve_result.CurveData`)."""
        b = self.band
        band = None if b is None else BandData(
            _tuple(b.far_grid), _tuple(b.mr_lo), _tuple(b.mr_hi), b.level, b.n_boot, b.n_used)
        return CurveData(_tuple(self.thresholds), _tuple(self.mr), _tuple(self.far), self.n_pos,
                         self.n_neg, _jsonable(self.auroc), self.undefined_reason, band,
                         self.min_per_class)

    @classmethod
    def from_data(cls, d: CurveData) -> Curve:
        """Inverse of ``to_data``: the curve of a CurveData read from curve.json."""
        from calimon.numerics.bootstrap import Band

        b = d.band
        band = None if b is None else Band(
            _frozen(np.array(b.far_grid)), _frozen(np.array(b.mr_lo)),
            _frozen(np.array(b.mr_hi)), float(b.level), int(b.n_boot), int(b.n_used))
        thresholds = np.array(d.thresholds, dtype=float)
        if thresholds.size:
            thresholds[0] = np.inf
        return cls(_frozen(thresholds), _frozen(np.array(d.mr)), _frozen(np.array(d.far)),
                   d.n_pos, d.n_neg, math.nan if d.auroc is None else float(d.auroc), band,
                   d.min_per_class)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Curve:
        """Inverse of ``to_dict``."""
        from calimon.numerics.bootstrap import Band

        try:
            thresholds = _unfloats(d["thresholds"])
            thresholds[0] = np.inf
            b = d.get("band")
            band = None if b is None else Band(
                _frozen(_unfloats(b["far_grid"])), _frozen(_unfloats(b["mr_lo"])),
                _frozen(_unfloats(b["mr_hi"])), float(b["level"]), int(b["n_boot"]),
                int(b["n_used"]))
            auroc = math.nan if d["auroc"] is None else float(d["auroc"])
            return cls(_frozen(thresholds), _frozen(_unfloats(d["mr"])),
                       _frozen(_unfloats(d["far"])), int(d["n_pos"]), int(d["n_neg"]), auroc,
                       band, int(d.get("min_per_class", 1)))
        except (KeyError, TypeError, IndexError) as exc:
            raise InputError(f"not a curve dictionary ({type(exc).__name__}: {exc})",
                             field="curve") from None


def _check_rate(x: Any, name: str) -> None:
    if not (isinstance(x, int | float | np.floating) and 0.0 <= x <= 1.0):
        raise InputError(f"expected a number in [0, 1], got {x!r}", field=name)


# ---------------------------------------------------------------------------- binary protocol

def binary_point(decisions: Sequence[bool | None], labels: Any, name: str) -> BinaryPoint:
    """``decisions``: True (flagged) / False (passed) / None (parse failure), one per label."""
    y = as_labels(labels, len(decisions))
    d = np.zeros(y.size, dtype=bool)
    failed = np.zeros(y.size, dtype=bool)
    for i, v in enumerate(decisions):
        if v is None:
            failed[i] = True
        elif isinstance(v, bool | np.bool_):
            d[i] = bool(v)
        else:
            raise InputError(f"item {i}: expected True, False or None (parse failure), "
                             f"got {v!r}", field="decisions")
    ok = ~failed
    tp, fp = int(np.sum(ok & d & y)), int(np.sum(ok & d & ~y))
    fn, tn = int(np.sum(ok & ~d & y)), int(np.sum(ok & ~d & ~y))
    fail_pos, fail_neg = int(np.sum(failed & y)), int(np.sum(failed & ~y))
    n_pos, n_neg = tp + fn + fail_pos, fp + tn + fail_neg

    def ratio(a: int, b: int) -> float:
        return a / b if b else math.nan

    return BinaryPoint(name, ratio(fn, tp + fn), ratio(fp, fp + tn), tp, fp, tn, fn,
                       int(failed.sum()), ratio(fn, n_pos), ratio(fn + fail_pos, n_pos),
                       ratio(fp, n_neg), ratio(fp + fail_neg, n_neg))


# ---------------------------------------------------------------------------- grouped curves

def curves_by(scores: Any, labels: Any, groups: Any = None,
              keys: Mapping[str, Sequence[Any]] | None = None, *, n_boot: int = 200,
              seed: int = 0, far_grid: Any = None, level: float = 0.95,
              min_per_class: int = 1) -> dict[str, Curve]:
    """``{"all": ..., "category=safety": ..., "task=code": ...}``: one curve per key value.

    Values are listed in sorted order of ``str(value)``. A subset holding one class only is kept
    as an undefined curve (NaN rate and AUROC, no band, ``undefined_reason`` set), so a report
    shows it instead of losing it.
    """
    s = as_scores(scores)
    y = as_labels(labels, s.size)
    g = None if groups is None else as_groups(groups, s.size)
    out = {"all": Curve.from_scores(s, y, g, n_boot=n_boot, seed=seed, far_grid=far_grid,
                                    level=level, min_per_class=min_per_class)}
    for key, values in (keys or {}).items():
        vals = list(values)
        if len(vals) != s.size:
            raise InputError(f"expected {s.size} values (one per score), got {len(vals)}",
                             field=f"keys[{key!r}]")
        strs = np.array([str(v) for v in vals], dtype=object)
        for v in sorted(set(strs)):
            m = strs == v
            out[f"{key}={v}"] = Curve.from_scores(
                s[m], y[m], None if g is None else g[m], n_boot=n_boot, seed=seed,
                far_grid=far_grid, level=level, min_per_class=min_per_class)
    return out
