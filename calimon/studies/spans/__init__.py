"""Evidence spans: grounding quotes, segmentation, span metrics and rendering.

See docs/spans.md for the grounding ladder, the repeated-string rule, the segmentation rules
and the metric definitions.
"""

from __future__ import annotations

from calimon.numerics.segments import Segment, auto_kind, mask_segment, mask_spans, segment
from calimon.numerics.span_metrics import (
    ScoredSpan,
    SpanReport,
    SpanRow,
    SpanScores,
    char_iou,
    char_prf,
    random_baseline,
    random_rows,
    span_metrics,
    span_row,
    span_row_from_sample,
    spans_from_token_scores,
    to_markdown,
)
from calimon.studies.spans.grounding import GroundedSpan, ground_quote, ground_quotes, normalize
from calimon.studies.spans.render import HTML_STYLE, render_html, render_terminal

__all__ = [
    "HTML_STYLE",
    "GroundedSpan",
    "ScoredSpan",
    "Segment",
    "SpanReport",
    "SpanRow",
    "SpanScores",
    "auto_kind",
    "char_iou",
    "char_prf",
    "ground_quote",
    "ground_quotes",
    "mask_segment",
    "mask_spans",
    "normalize",
    "random_baseline",
    "random_rows",
    "render_html",
    "render_terminal",
    "segment",
    "span_metrics",
    "span_row",
    "span_row_from_sample",
    "spans_from_token_scores",
    "to_markdown",
]
