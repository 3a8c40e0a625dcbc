"""Evidence spans: grounding quotes, segmentation, span metrics and rendering."""

from __future__ import annotations

from calimon.spans.grounding import GroundedSpan, ground_quote, ground_quotes, normalize
from calimon.spans.segments import Segment, auto_kind, mask_segment, mask_spans, segment

__all__ = [
    "GroundedSpan",
    "Segment",
    "auto_kind",
    "ground_quote",
    "ground_quotes",
    "mask_segment",
    "mask_spans",
    "normalize",
    "segment",
]
