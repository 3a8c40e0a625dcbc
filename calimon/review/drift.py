"""Drift watch of `calimon serve --review`: the shift check (`calimon.studies.shift.check`, with its
harmful-or-harmless verdict, `calimon.studies.shift.verdict`) of a rolling window of live traffic
against the calibration rows of the run the policy was designed on (its provenance ``source``).

The window is the latest ``drift_window`` decisions whose transcripts were kept because their
audit draw is under the retention fraction: a uniform sample of the traffic (the review band,
kept whole, would tilt it). The check runs in a background thread every ``drift_every``
decisions once ``drift_min`` transcripts are in the window, or on request
(``POST /v1/review/drift``); its last result is on ``/metrics`` and the status page. Without
the calibration run on this machine (or its transcripts) the watch says why it cannot run.

**False alarms over time: alpha spending.** The watch repeats its test on every window, so a
per-window level of 0.05 would raise a false alarm on most long runs of unchanged traffic.
Check ``k`` (counted from the start of the process) is judged at
``alpha_k = alpha * 6 / (pi^2 k^2)`` (:func:`spent_alpha`), which sums to ``alpha`` over all
checks: under exchangeable traffic the chance of *any* alarm, however long the watch runs, is
at most ``alpha`` (a union bound, valid however the overlapping windows depend on each other,
since each permutation p-value is valid on its own). A permutation p-value cannot fall below
``1 / (B + 1)``, so check ``k`` runs ``B_k = max(drift_permutations, ceil(1 / alpha_k))``
relabellings (:func:`permutations_for`), stopped early once ``STOP_HITS`` reach the observed
AUROC (Besag-Clifford: a check of unchanged traffic costs a few dozen). A check that would need
more than ``MAX_PERMUTATIONS`` is not run as a test and the watch says it is spent: restart it
(a new process, e.g. with a recalibrated policy) to watch again. :func:`first_alarm` is the
rule on a sequence of p-values alone.
"""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from calimon.errors import CalimonError


def calibration_source(policy, policy_path: Path) -> Path | None:
    """The scored run the policy was designed on (provenance ``source``, read from the working
    directory or next to the policy file); None when it is not here."""
    src = policy.provenance.get("source")
    if not isinstance(src, str) or not src:
        return None
    for candidate in (Path(src), Path(policy_path).parent / src):
        if candidate.exists():
            return candidate
    return None


ALPHA = 0.05  # the chance of any false alarm over all checks of one process
STOP_HITS = 10
MAX_PERMUTATIONS = 5000
RULE = "alpha spending: check k at alpha * 6 / (pi^2 k^2), any false alarm <= alpha"


def spent_alpha(k: int, alpha: float = ALPHA) -> float:
    """The level of check ``k`` (1, 2, ...): ``alpha * 6 / (pi^2 k^2)``, summing to ``alpha``."""
    if k < 1:
        raise ValueError(f"checks are counted from 1, got {k}")
    return alpha * 6 / (math.pi ** 2 * k ** 2)


def permutations_for(k: int, base: int, alpha: float = ALPHA) -> int:
    """Relabellings of check ``k``: at least ``base``, and enough that the smallest p-value,
    ``1 / (B + 1)``, is below the check's level."""
    return max(int(base), math.ceil(1 / spent_alpha(k, alpha)))


def first_alarm(p_values: Any, alpha: float = ALPHA) -> int | None:
    """The first check (1-based) whose p-value is at most its spent level, None if none: the
    watch's rule on a sequence of valid p-values."""
    for k, p in enumerate(p_values, 1):
        if p <= spent_alpha(k, alpha):
            return k
    return None


def _num(x: Any) -> float | None:
    return float(x) if x is not None and math.isfinite(float(x)) else None


class DriftWatch:
    """The drift watch of one served policy (module docstring); ``review`` is the server's
    `calimon.review.queue.Review`."""

    def __init__(self, review, policy_path: Path):
        self.review, self.settings = review, review.settings
        self.source = calibration_source(review.policy, policy_path)
        self._calib: tuple[Any, Any] | None = None
        self._lock = threading.Lock()
        self._running = False
        self._seen = 0  # decisions this process served
        self._last_at = 0  # decisions counted at the last check's start
        self.checks = 0  # tests run (k of the spending rule)
        self.alarms = 0
        self.result: dict[str, Any] | None = None

    def maybe_start(self) -> None:
        """Count one decision; start a check in the background when ``drift_every`` passed
        since the last one (none while one runs)."""
        with self._lock:
            self._seen += 1
            if self._running or self._seen - self._last_at < self.settings.drift_every:
                return
            self._running, self._last_at = True, self._seen
        threading.Thread(target=self._background, name="calimon-drift", daemon=True).start()

    def _background(self) -> None:
        try:
            self.check()
        finally:
            with self._lock:
                self._running = False

    def check(self) -> dict[str, Any]:
        """Run the check now (blocking) and keep its result."""
        try:
            result = self._check()
        except CalimonError as exc:
            result = {"state": "not run", "why": str(exc)}
        except Exception as exc:  # noqa: BLE001 - reported, never fatal to the server
            result = {"state": "failed", "why": f"{type(exc).__name__}: {exc}"}
        result["checked_at"] = time.time()
        self.result = result
        return result

    def _calibration(self):
        if self.source is None:
            raise CalimonError("the policy's calibration run (provenance 'source') is not on "
                               "this machine")
        if self._calib is None:
            from calimon.studies.shift.sides import calib_side

            self._calib = calib_side(self.source, score=self.review.policy.score)
        return self._calib

    def _check(self) -> dict[str, Any]:
        from calimon.studies.shift.check import certify_sides, check_sides
        from calimon.studies.shift.sides import Side

        rv, s = self.review, self.settings
        side, scored = self._calibration()
        rows = rv.store.window(rv.policy_hash, s.drift_window, rv.retain)
        if len(rows) < s.drift_min:
            return {"state": "waiting", "window": len(rows),
                    "why": f"{len(rows)} of the {s.drift_min} kept transcripts a check needs"}
        p_raw = np.array([np.nan if r.p_raw is None else r.p_raw for r in rows])
        new = Side("live", tuple(r.item_id for r in rows),
                   tuple(r.request_text or "" for r in rows),
                   tuple(r.response_text or "" for r in rows),
                   p_raw if np.all(np.isfinite(p_raw)) else None,
                   np.full(len(rows), -1), None)
        k = self.checks + 1
        level, perms = spent_alpha(k), permutations_for(k, s.drift_permutations)
        if perms > MAX_PERMUTATIONS:
            return {"state": "spent", "window": len(rows), "rule": RULE, "checks": self.checks,
                    "why": f"check {k} would be judged at {level:.2g}, which needs {perms} "
                           f"permutations (more than {MAX_PERMUTATIONS}): restart the watch"}
        self.checks = k
        report = check_sides(side, new, permutations=perms, seed=0, alpha_test=level,
                             stop_hits=STOP_HITS)
        self.alarms += bool(report.shifted)
        fars = [g for g in rv.policy.guarantees if g.rate == "far" and g.certified]
        scores = np.array([r.score for r in rows if r.score is not None], float)
        res = certify_sides(report, scored.scores, scored.labels,
                            far=[g.alpha for g in fars], delta=fars[0].delta if fars else 0.05,
                            new_scores=scores if scores.size else None)
        verdicts = [{"alpha": v.alpha, "kind": v.kind, "breaks": v.breaks, "line": v.line(),
                     "weighted_far": _num(v.weighted_far), "ess": _num(v.ess),
                     "ess_needed": v.ess_needed, "far_floor": _num(v.far_floor)}
                    for v in res.verdicts if v is not None]
        shift = report.to_dict()
        return {"state": "checked", "window": len(rows), "source": str(self.source),
                "line": report.line(), "shifted": bool(report.shifted), "rule": RULE,
                "check": k, "alpha_k": level, "alpha": ALPHA, "alarms": self.alarms,
                "auroc": _num(shift["auroc"]), "p_value": _num(shift["p_value"]),
                "driver": shift["driver"], "outside_share": _num(shift["outside_share"]),
                "verdicts": verdicts}

    def state(self) -> dict[str, Any]:
        """The last result, or why there is none yet (with the false-alarm rule either way)."""
        if self.result is not None:
            return {"rule": RULE, **self.result}
        if self.source is None:
            return {"state": "not run", "rule": RULE, "why": "the policy's calibration run "
                                                             "(provenance 'source') is not on "
                                                             "this machine"}
        return {"state": "waiting", "rule": RULE, "why": f"the first check runs after "
                                                         f"{self.settings.drift_every} decisions"}
