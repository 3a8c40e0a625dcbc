"""Evidence in the units a reader uses: token scores (or scored spans) aggregated into segments.

Units (`reader_units`):

- a trajectory (``parts``: the offset records of `calimon.data.trajectory.render_parts`): a tool
  call's arguments one line each, a tool result's lines, a message's text as below;
- code (``task="code"``): one segment per non-blank line (a statement, in the code we score);
- prose: sentences (`calimon.numerics.segments`), a sentence longer than ``CLAUSE_CHARS`` cut
  into clauses at ``;``, ``:`` or ``,`` followed by a space, each clause at least
  ``MIN_CLAUSE`` characters.

A segment's score (`score_units`) is the highest score of a token (or span) that overlaps it by
at least one character: the strongest evidence inside it. `rank_units` orders them strongest
first (ties: text order). No third-party import.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from calimon.errors import InputError
from calimon.numerics.segments import Segment, segment

CLAUSE_CHARS = 160
MIN_CLAUSE = 40
_CLAUSE = re.compile(r"[;:,](?=\s)")


@dataclass(frozen=True)
class ScoredUnit:
    """A segment ``[start, end)`` of the response, its score and (once mapped) its precision:
    the calibrated probability that it overlaps the gold evidence."""

    start: int
    end: int
    score: float
    precision: float | None = None

    def to_list(self) -> list[float | int | None]:
        """``[start, end, score, precision]`` (the form a reading's ``extra`` keeps)."""
        return [self.start, self.end, round(self.score, 6),
                None if self.precision is None else round(self.precision, 6)]


def _clauses(text: str, seg: Segment) -> list[tuple[int, int]]:
    if seg.end - seg.start <= CLAUSE_CHARS:
        return [seg.span]
    out, cut = [], seg.start
    for m in _CLAUSE.finditer(text, seg.start, seg.end):
        stop = m.end()
        if stop - cut >= MIN_CLAUSE and seg.end - stop >= MIN_CLAUSE:
            out.append((cut, stop))
            cut = stop
    out.append((cut, seg.end))
    return out


def _trim(text: str, start: int, end: int) -> tuple[int, int] | None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if start < end else None


def _text_units(text: str, lo: int, hi: int, task: str | None) -> list[tuple[int, int]]:
    body = text[lo:hi]
    kind = "lines" if task == "code" else "sentences"
    out = []
    for seg in segment(body, kind):
        shifted = Segment(seg.start + lo, seg.end + lo, seg.text)
        out += [(a, b) for a, b in (_clauses(text, shifted) if kind == "sentences"
                                    else [shifted.span])]
    return out


def _part_units(text: str, rec: Mapping[str, Any], task: str | None) -> list[tuple[int, int]]:
    lo, hi = rec.get("start"), rec.get("end")
    if not (isinstance(lo, int) and isinstance(hi, int) and 0 <= lo <= hi <= len(text)):
        raise InputError(f"expected 0 <= start <= end <= {len(text)} in a message record, "
                         f"got ({lo!r}, {hi!r})", field="parts")
    if rec.get("part") in ("tool_call", "tool_result"):
        return _text_units(text, lo, hi, "code")  # arguments / result lines, one per line
    return _text_units(text, lo, hi, task)


def reader_units(text: str, task: str | None = None,
                 parts: Sequence[Mapping[str, Any]] | None = None) -> list[tuple[int, int]]:
    """The reader's units of ``text`` (module docstring) as sorted, disjoint, whitespace-trimmed
    ``(start, end)`` pairs; ``parts`` (a trajectory's message records) take precedence."""
    if not isinstance(text, str):
        raise InputError(f"expected a string, got {type(text).__name__}", field="text")
    if parts:
        units = [u for rec in parts for u in _part_units(text, rec, task)]
    else:
        units = _text_units(text, 0, len(text), task)
    trimmed = [t for a, b in units if (t := _trim(text, a, b)) is not None]
    return sorted(set(trimmed))


def _check_scores(offsets: Sequence[Sequence[int]], scores: Sequence[float]) -> None:
    if len(offsets) != len(scores):
        raise InputError(f"expected as many scores as offsets, got {len(scores)} and "
                         f"{len(offsets)}", field="scores")


def score_units(units: Sequence[tuple[int, int]], offsets: Sequence[Sequence[int]],
                scores: Sequence[float]) -> list[ScoredUnit]:
    """Each unit scored by the highest score among the tokens (``offsets[i]`` = ``(start,
    end)`` in the text, empty ones ignored) or spans that overlap it; a unit no token
    overlaps gets 0."""
    _check_scores(offsets, scores)
    pairs = sorted((int(o[0]), int(o[1]), float(s)) for o, s in zip(offsets, scores, strict=True)
                   if len(o) == 2 and o[1] > o[0])
    if any(math.isnan(s) for _, _, s in pairs):
        raise InputError("a token score is NaN", field="scores")
    out = []
    for a, b in units:
        best = max((s for lo, hi, s in pairs if lo < b and a < hi), default=0.0)
        out.append(ScoredUnit(a, b, best))
    return out


def spans_to_units(units: Sequence[tuple[int, int]], spans: Iterable[Any]) -> list[ScoredUnit]:
    """Units scored from scored spans (occlusion units, copy quotes): a span with a score gives
    it; spans without one score by their order, ``1 / (1 + rank)``."""
    offsets, scores = [], []
    for k, sp in enumerate(spans):
        score = getattr(sp, "score", None)
        offsets.append((sp.start, sp.end))
        scores.append(float(score) if score is not None else 1.0 / (1 + k))
    return score_units(units, offsets, scores)


def rank_units(units: Iterable[ScoredUnit], top: int | None = None) -> list[ScoredUnit]:
    """Strongest first (ties in text order); the first ``top`` when given."""
    got = sorted(units, key=lambda u: (-u.score, u.start))
    return got if top is None else got[:top]


def with_precision(units: Sequence[ScoredUnit], precision_of) -> list[ScoredUnit]:
    """The units with ``precision_of(scores)`` (a fitted map's predict) as their precision."""
    if not units:
        return []
    got = precision_of([u.score for u in units])
    return [ScoredUnit(u.start, u.end, u.score, min(1.0, max(0.0, float(p))))
            for u, p in zip(units, got, strict=True)]


def overlaps_gold(unit: ScoredUnit | tuple[int, int], gold: Sequence[Sequence[int]]) -> bool:
    """Whether the unit overlaps a gold span by at least one character."""
    a, b = (unit.start, unit.end) if isinstance(unit, ScoredUnit) else unit
    return any(g[0] < b and a < g[1] for g in gold)


__all__ = ["CLAUSE_CHARS", "MIN_CLAUSE", "ScoredUnit", "overlaps_gold", "rank_units",
           "reader_units", "score_units", "spans_to_units", "with_precision"]
