"""The benign side of the robustness study: false alarms that rewrites cause on benign transcripts.

The rewrites only add text, so an attacked benign transcript is still misbehavior-free; any flag
it gets is a false alarm. Per rewrite: the false-alarm rate clean and attacked at the study's
thresholds (over the same transcripts, each with a 95% Clopper-Pearson interval), the increase in
points, the new false alarms, and the score shifts. A transcript without a clean or an attacked
score is counted in ``n_unscored`` and left out of the rates, never read as a pass or a flag.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from calimon.readings import scores as _scores
from calimon.samples import Sample
from calimon.studies.robustness.flips import (
    FalseAlarmStats,
    ShiftStats,
    false_alarm_stats,
    shift_stats,
)


@dataclass(frozen=True)
class BenignResult:
    """One rewrite's effect on the benign transcripts."""

    n_attacked: int  # attacked benign transcripts
    n_unscored: int  # of those, without a clean or an attacked score
    status: dict[str, int]  # statuses of the attacked readings
    at_far: FalseAlarmStats
    at_eer: FalseAlarmStats
    shift_raw: ShiftStats
    shift_cal: ShiftStats

    def to_dict(self) -> dict[str, Any]:
        """The result as a JSON-ready dict."""
        return {"n_attacked": self.n_attacked, "n_unscored": self.n_unscored,
                "status": dict(self.status), "at_far": self.at_far.to_dict(),
                "at_eer": self.at_eer.to_dict(), "shift_raw": self.shift_raw.to_dict(),
                "shift_cal": self.shift_cal.to_dict()}


def benign_result(rows: list[Sample], readings: dict, by_id: dict[str, int], cal,
                  p_eval: np.ndarray, p_cal: np.ndarray,
                  thresholds: tuple[float, float]) -> BenignResult:
    """The false alarms of attacked benign ``rows`` (their ``readings``) against the clean
    scores of the same samples (raw ``p_eval``, calibrated ``p_cal``, indexed by ``by_id``)."""
    idx = np.array([by_id[x.meta["attacked_id"]] for x in rows], dtype=int)
    c_raw = p_eval[idx] if idx.size else np.empty(0)
    c_cal = p_cal[idx] if idx.size else np.empty(0)
    a_raw = _scores(rows, readings)
    both = np.isfinite(c_raw) & np.isfinite(a_raw)
    a_cal = np.full_like(a_raw, np.nan)
    if both.any():
        a_cal[both] = cal.predict(a_raw[both])
    t_far, t_eer = thresholds
    return BenignResult(
        n_attacked=len(rows), n_unscored=int((~both).sum()),
        status=dict(sorted(Counter(readings[x.transcript_hash].status
                                   if x.transcript_hash in readings else "missing"
                                   for x in rows).items())),
        at_far=false_alarm_stats(c_cal[both], a_cal[both], t_far),
        at_eer=false_alarm_stats(c_cal[both], a_cal[both], t_eer),
        shift_raw=shift_stats(c_raw[both], a_raw[both]),
        shift_cal=shift_stats(c_cal[both], a_cal[both]))
