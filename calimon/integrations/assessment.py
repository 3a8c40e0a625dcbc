"""`Assessment`: what a calimon monitor says about one transcript, in the shape every integration
reads (an Inspect `Score`, an approval, a Scout `Result`, a ControlArena `MonitorResponse`), the
same whether it was scored in this process or by a ``calimon serve`` server; and `decide`, a
policy's answer to a score. No third-party import."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

DECISIONS = {"auto_pass": "pass", "human_review": "review", "auto_block": "block"}


@dataclass(frozen=True)
class Assessment:
    """One transcript's reading, its calibrated probability and the policy's decision.

    ``p_raw`` / ``p_cal``: the monitor's score and the calibration map's probability of it,
    None when the monitor gave none (status ``parse_failure`` or ``error``) or when there is no
    map: a missing score is never 0. ``action`` / ``decision`` (``pass``, ``review``,
    ``block``): the policy's, None without a policy; a transcript without a score gets the
    policy's ``unscored`` action. ``audit``: an automatic decision drawn into the policy's
    audit slice. ``spans``: the evidence spans of the response (``start``, ``end``, ``score``,
    ``text`` and the ``messages`` they fall in), when the monitor has them; ``evidence``: its
    quotes. ``provenance``: the model, revision, prompt, template hash, readout, map, policy,
    calimon version and where it was scored (``in-process`` or the server's URL).
    ``transcript_hash``: the run store's key of the transcript scored (`calimon.samples`)."""

    id: str
    status: str
    p_raw: float | None
    p_cal: float | None = None
    action: str | None = None
    decision: str | None = None
    audit: bool = False
    spans: tuple[dict[str, Any], ...] = ()
    evidence: tuple[str, ...] = ()
    error: str | None = None
    tokens: int | None = None
    latency_ms: float | None = None
    transcript_hash: str | None = None
    provenance: dict[str, Any] = field(default_factory=dict)

    @property
    def calibrated(self) -> bool:
        """Whether the probability went through a calibration map."""
        return self.provenance.get("calibration") not in (None, "none")

    @property
    def probability(self) -> float | None:
        """The calibrated probability (``p_cal``) under a map, else the raw score; None when
        the monitor gave no score."""
        return self.p_cal if self.calibrated else self.p_raw

    @property
    def scored(self) -> bool:
        """Whether the transcript has a probability."""
        return self.probability is not None

    def reason(self) -> str:
        """One line for a person: the probability, the decision and the evidence."""
        if not self.scored:
            head = f"calimon: no score ({self.status}{': ' + self.error if self.error else ''})"
        else:
            kind = "calibrated P(misbehavior)" if self.calibrated else "raw score"
            head = f"calimon: {kind} {self.probability:.3f} (p_raw {self.p_raw:.3f})"
        if self.decision is not None:
            head += f"; decision {self.decision}" + (" (audit)" if self.audit else "")
        quotes = [s["text"] for s in self.spans if s.get("text")] or list(self.evidence)
        if quotes:
            head += "; evidence: " + " | ".join(repr(q[:80]) for q in quotes[:3])
        return head

    def to_dict(self) -> dict[str, Any]:
        """The assessment as plain JSON values (spans' message lists included)."""
        d = asdict(self)
        d.update(spans=[dict(s) for s in self.spans], evidence=list(self.evidence),
                 probability=self.probability, calibrated=self.calibrated)
        return d


def decide(policy: Any, p_raw: float | None, p_cal: float | None, audit_id: str
           ) -> tuple[str, str, bool]:
    """The policy's action, decision and audit draw for a reading (`calimon.deploy`): the
    score it reads (``p_cal`` or ``p_raw``) against its thresholds; no score gets its
    ``unscored`` action, never a 0."""
    from calimon.deploy.policy_file import apply_policy

    score = p_cal if policy.score == "p_cal" else p_raw
    action = str(apply_policy(policy, [math.nan if score is None else score])[0])
    audit = action != "human_review" and policy.audit.includes(audit_id)
    return action, DECISIONS[action], bool(audit)


__all__ = ["DECISIONS", "Assessment", "decide"]
