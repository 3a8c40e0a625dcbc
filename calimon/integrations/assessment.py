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
    audit slice. ``spans``: the evidence of the response, strongest first: the top segments
    (``unit`` ``segment``: a line, sentence, clause, tool-call argument or tool-result line) with
    their ``score``, their ``precision`` (the calibrated probability that the segment overlaps
    the evidence of a misbehaving transcript; None without a precision map) and ``rank``
    (0 = strongest), else the monitor's spans (``unit`` ``tokens``); each with ``start``,
    ``end``, ``text`` and the ``messages`` it falls in (``index``: the message's 0-based
    position in the transcript, the base of the ``[M<index>]`` citations). ``token_spans``: the
    token head's runs in text order (the token-level marks), when it has them. ``evidence``:
    the monitor's quotes. ``provenance``: the model, revision, prompt, template hash, readout, map, policy,
    calimon version and where it was scored (``in-process`` or the server's URL).
    ``transcript_hash``: the run store's key of the transcript scored (`calimon.samples`).
    ``kv``: what a step of a session cost (serve's `KvUse`: ``mode``, ``reused_tokens``,
    ``computed_tokens``), for a trajectory scored by session; None when scored whole."""

    id: str
    status: str
    p_raw: float | None
    p_cal: float | None = None
    action: str | None = None
    decision: str | None = None
    audit: bool = False
    spans: tuple[dict[str, Any], ...] = ()
    token_spans: tuple[dict[str, Any], ...] = ()
    evidence: tuple[str, ...] = ()
    error: str | None = None
    tokens: int | None = None
    latency_ms: float | None = None
    transcript_hash: str | None = None
    provenance: dict[str, Any] = field(default_factory=dict)
    kv: dict[str, Any] | None = None

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
        quotes = [evidence_line(s) for s in ranked_spans(self.spans) if s.get("text")] \
            or [repr(q[:80]) for q in self.evidence]
        if quotes:
            head += "; evidence, strongest first: " + " | ".join(quotes[:3])
        return head

    def to_dict(self) -> dict[str, Any]:
        """The assessment as plain JSON values (spans' message lists included)."""
        d = asdict(self)
        d.update(spans=[dict(s) for s in self.spans],
                 token_spans=[dict(s) for s in self.token_spans], evidence=list(self.evidence),
                 probability=self.probability, calibrated=self.calibrated)
        return d


def ranked_spans(spans: Any) -> list[dict[str, Any]]:
    """Spans strongest first: by ``rank`` where they have one, else by ``score`` (spans without
    a score last), ties in text order."""
    def key(s: dict[str, Any]) -> tuple:
        if isinstance(s.get("rank"), int):
            return (0, s["rank"], 0)
        score = s.get("score")
        return (1, 0, -score) if isinstance(score, int | float) else (2, 0, 0)
    return sorted(spans, key=key)


def cite(index: Any) -> str:
    """The citation of a message: ``[M<index>]``, ``index`` its 0-based position in the
    transcript (the index the spans' ``messages`` carry)."""
    return f"[M{index}]"


def evidence_line(span: dict[str, Any]) -> str:
    """One span as the reason quotes it: the text (80 characters at most), its precision when
    it has one, and the messages it falls in."""
    out = repr(str(span.get("text"))[:80])
    if isinstance(span.get("precision"), int | float):
        out += f" (precision {span['precision']:.2f})"
    where = list(dict.fromkeys(cite(m.get("index")) for m in span.get("messages") or ()
                               if isinstance(m.get("index"), int)))
    return out + (f" in {', '.join(where)}" if where else "")


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


__all__ = ["DECISIONS", "Assessment", "cite", "decide", "evidence_line", "ranked_spans"]
