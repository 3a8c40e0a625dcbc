"""What a monitor says about one transcript."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

STATUSES = ("ok", "truncated", "parse_failure", "error")
SCORED = ("ok", "truncated")  # statuses that carry a usable score


@dataclass(frozen=True)
class Verdict:
    """One monitor reading. `p_raw` is None unless status is ok or truncated: a missing score
    is never 0. `format_mass` is the next-token probability outside the allowed answers."""

    transcript_hash: str
    readout: str
    status: str
    p_raw: float | None = None
    format_mass: float | None = None
    p_yes: float | None = None  # raw token mass of the positive answer forms
    p_no: float | None = None
    decision: bool | None = None  # binary readout: the parsed boolean
    text: str | None = None  # generated text (binary readout)
    evidence: tuple[str, ...] = ()  # quotes the judge gave (evidence prompt)
    tokens: int = 0
    seconds: float = 0.0
    truncation: dict[str, Any] | None = None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def scored(self) -> bool:
        """True when the reading has a score (status ok or truncated, ``p_raw`` set)."""
        return self.status in SCORED and self.p_raw is not None

    def to_row(self) -> dict[str, Any]:
        """The reading as a run-store row: JSON text for evidence, truncation and extra, 0/1 for
        the decision."""
        d = asdict(self)
        d["evidence"] = json.dumps(list(self.evidence), ensure_ascii=False)
        d["truncation"] = json.dumps(self.truncation) if self.truncation else None
        d["extra"] = json.dumps(self.extra, ensure_ascii=False) if self.extra else None
        d["decision"] = None if self.decision is None else int(self.decision)
        return d

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Verdict:
        """The reading a `to_row` row (or a store row) describes; unknown columns are ignored."""
        d = dict(row)
        d["evidence"] = tuple(json.loads(d["evidence"] or "[]"))
        d["truncation"] = json.loads(d["truncation"]) if d.get("truncation") else None
        d["extra"] = json.loads(d["extra"]) if d.get("extra") else {}
        d["decision"] = None if d.get("decision") is None else bool(d["decision"])
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in d.items() if k in names})
