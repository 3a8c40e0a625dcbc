"""Occlusion span scores: how much a monitor's P(misbehavior) drops when part of the response
is masked.

For one sample the response is cut into units (:func:`occlusion_units`: the ``auto``
segmentation — lines for code, sentences for prose, turns for dialogues — with adjacent small
segments merged until at most ``max_segments`` remain, so the cost per sample is bounded). Each
unit is replaced by the neutral marker ``[...]`` (a masked variant is an ordinary transcript,
so a run store caches its reading by transcript hash); the unit's **drop** is
``p_raw(original) - p_raw(masked)``. A span's score is ``direction * drop``: ``direction=1``
reads the monitor's P(misbehavior) as it is, ``-1`` reads it flipped (for a monitor whose raw
score is inverted, AUROC < 0.5). The top units with a positive score become spans.

Quotes are scored the same way (:func:`score_quotes`): a grounded quote's score is the drop
when its span is masked, so a quote that does not drive the verdict shows a score near 0.

Cost: :class:`PrefixSharingBackend` (in `calimon.studies.spans.prefix_sharing`, re-exported here) wraps
a transformers backend. Masked variants of one sample share every token up to the first masked
unit (template, request, the response before it); the wrapper runs the sample's original prompt
once with a KV cache and each variant only from the point where it departs from it, so a variant
costs its tail, not the whole transcript.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from calimon.errors import InputError
from calimon.numerics.segments import DEFAULT_MASK, Segment, mask_segment, segment
from calimon.numerics.span_metrics import ScoredSpan, ranked
from calimon.samples import Sample
from calimon.studies.spans.grounding import GroundedSpan
from calimon.studies.spans.prefix_sharing import (
    PrefixSharingBackend,
    SharePlan,
    share_plan,
    shared_tokens,
)
from calimon.verdict import Verdict

MAX_SEGMENTS = 24
TOP_K = 3

ScoreFn = Callable[[Sequence[Sample]], Mapping[str, Verdict]]
"""Scores samples; returns their readings by transcript hash (all samples in ONE call, so the
backend can batch variants of many samples together)."""


def occlusion_units(text: str, *, task: str | None = None, kind: str = "auto",
                    max_segments: int = MAX_SEGMENTS) -> list[Segment]:
    """The units occlusion masks: ``segment(text, kind, task=task)``, then, while there are more
    than ``max_segments``, the adjacent pair with the shortest union (ties: the earliest) is
    merged into one unit ``text[first.start:second.end]``."""
    if isinstance(max_segments, bool) or not isinstance(max_segments, int) or max_segments < 1:
        raise InputError(f"expected a positive integer, got {max_segments!r}",
                         field="max_segments")
    units = [(s.start, s.end) for s in segment(text, kind, task=task)]
    while len(units) > max_segments:
        k = min(range(len(units) - 1), key=lambda i: (units[i + 1][1] - units[i][0], i))
        units[k:k + 2] = [(units[k][0], units[k + 1][1])]
    return [Segment(a, b, text[a:b]) for a, b in units]


def masked_sample(sample: Sample, span: Any, mask: str = DEFAULT_MASK) -> Sample:
    """A copy of ``sample`` whose response has ``span`` replaced by ``mask`` (no gold spans)."""
    response = mask_segment(sample.response, span, mask)
    start, end = (span.start, span.end) if hasattr(span, "start") else tuple(span)
    return replace(sample, id=f"{sample.id}#mask{start}-{end}", response=response,
                   gold_spans=(), meta={"masked_from": sample.id, "masked": [start, end]})


def monitor_scorer(monitor) -> ScoreFn:
    """A ScoreFn that calls ``monitor.score`` once on the distinct transcripts (no store)."""
    def score(samples: Sequence[Sample]) -> dict[str, Verdict]:
        unique = list({s.transcript_hash: s for s in samples}.values())
        return {s.transcript_hash: v for s, v in zip(unique, monitor.score(unique), strict=True)}
    return score


def store_scorer(monitor, store, *, chunk_size: int = 256,
                 progress: Callable[[int], None] | None = None) -> ScoreFn:
    """A ScoreFn over :func:`calimon.scoring.monitor.score_with_store`: readings already in the store
    are not recomputed; ``chunk_size`` samples go to the model per call (variants of one
    sample stay together unless a chunk boundary cuts them)."""
    from calimon.scoring.monitor import score_with_store

    def score(samples: Sequence[Sample]) -> dict[str, Verdict]:
        return score_with_store(monitor, samples, store, chunk_size=chunk_size,
                                progress=progress)
    return score


@dataclass(frozen=True)
class SegmentScore:
    """One masked span: the masked variant's reading and the drop it caused."""

    start: int
    end: int
    p_masked: float | None
    drop: float | None  # p_raw(original) - p_raw(masked); None if either has no score
    status: str  # reading status of the masked variant

    def to_dict(self) -> dict[str, Any]:
        """The fields as a dict."""
        return {"start": self.start, "end": self.end, "p_masked": self.p_masked,
                "drop": self.drop, "status": self.status}


def _check_direction(direction: Any) -> int:
    if direction not in (1, -1) or isinstance(direction, bool):
        raise InputError(f"expected 1 or -1, got {direction!r}", field="direction")
    return int(direction)


@dataclass(frozen=True)
class Occlusion:
    """The original reading of one sample and the drop of each masked span."""

    id: str
    p_raw: float | None
    status: str
    segments: tuple[SegmentScore, ...]

    def scored(self, direction: int = 1) -> list[ScoredSpan]:
        """Every span with a drop, scored ``direction * drop``, in text order."""
        d = _check_direction(direction)
        return [ScoredSpan(s.start, s.end, d * s.drop) for s in self.segments
                if s.drop is not None]

    def top_spans(self, top_k: int = TOP_K, direction: int = 1,
                  min_score: float = 0.0) -> list[ScoredSpan]:
        """The ``top_k`` spans with score > ``min_score``, highest first (ties: text order)."""
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise InputError(f"expected a positive integer, got {top_k!r}", field="top_k")
        return [s for s in ranked(self.scored(direction)) if s.score > min_score][:top_k]

    def drop_of(self, start: int, end: int) -> float | None:
        """The drop of the masked span [start, end), or None when it was not masked or has no
        drop."""
        for s in self.segments:
            if (s.start, s.end) == (start, end):
                return s.drop
        return None


def _p(v: Verdict | None) -> float | None:
    return v.p_raw if v is not None and v.scored else None


def mask_and_score(samples: Sequence[Sample], spans: Sequence[Sequence[Any]], score: ScoreFn,
                   *, mask: str = DEFAULT_MASK) -> list[Occlusion]:
    """For each sample, mask each of its spans (Segments, GroundedSpans or (start, end) pairs;
    duplicates are masked once) and read the drops. All originals and variants go to ``score``
    in ONE call, each original followed by its variants."""
    if len(samples) != len(spans):
        raise InputError(f"expected one list of spans per sample, got {len(spans)} lists for "
                         f"{len(samples)} samples", field="spans")
    plans, batch = [], []
    for sample, own in zip(samples, spans, strict=True):
        bounds = list(dict.fromkeys(
            (s.start, s.end) if hasattr(s, "start") else (int(s[0]), int(s[1])) for s in own))
        variants = [masked_sample(sample, b, mask) for b in bounds]
        plans.append((sample, bounds, variants))
        batch += [sample, *variants]
    readings = score(batch) if batch else {}
    out = []
    for sample, bounds, variants in plans:
        orig = readings.get(sample.transcript_hash)
        p0 = _p(orig)
        segs = []
        for (a, b), v in zip(bounds, variants, strict=True):
            reading = readings.get(v.transcript_hash)
            p1 = _p(reading)
            drop = p0 - p1 if p0 is not None and p1 is not None else None
            segs.append(SegmentScore(a, b, p1, drop,
                                     reading.status if reading else "missing"))
        out.append(Occlusion(sample.id, p0, orig.status if orig else "missing", tuple(segs)))
    return out


def occlude(samples: Sequence[Sample], score: ScoreFn, *, max_segments: int = MAX_SEGMENTS,
            kind: str = "auto", mask: str = DEFAULT_MASK) -> list[Occlusion]:
    """Occlusion of every sample's :func:`occlusion_units`, scored in one ``score`` call."""
    units = [occlusion_units(s.response, task=s.task, kind=kind, max_segments=max_segments)
             for s in samples]
    return mask_and_score(samples, units, score, mask=mask)


def score_quotes(quotes: Sequence[GroundedSpan], occlusion: Occlusion,
                 direction: int = 1) -> list[GroundedSpan]:
    """The quotes with ``score = direction * drop`` of their span, looked up in ``occlusion``
    (whose spans must include the grounded quotes); ungrounded quotes keep ``score=None``."""
    d = _check_direction(direction)
    out = []
    for q in quotes:
        drop = occlusion.drop_of(q.start, q.end) if q.grounded else None
        out.append(q.with_score(None if drop is None else d * drop))
    return out


def cost_multiple(tokens: float, reference: float) -> float:
    """``tokens / reference``; NaN when the reference is 0."""
    return tokens / reference if reference else math.nan


__all__ = ["MAX_SEGMENTS", "TOP_K", "Occlusion", "PrefixSharingBackend", "ScoreFn",
           "SegmentScore", "SharePlan", "cost_multiple", "mask_and_score", "masked_sample",
           "monitor_scorer", "occlude", "occlusion_units", "score_quotes", "share_plan",
           "shared_tokens", "store_scorer"]
