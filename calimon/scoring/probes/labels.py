"""Token labels for the token head, from gold character spans through tokenizer offsets.

A response token is positive when its character range overlaps a gold span of a misbehaving
sample by at least one character (a BPE token such as " return" whose leading space sits just
before the span still counts: it carries the span's first word). Tokens without characters (the
``(-1, -1)`` offsets of a truncation marker, or empty ranges) are ignored, never negative.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from calimon.errors import InputError

IGNORE = -1


def token_labels(offsets: Sequence[Sequence[int]], gold_spans: Sequence[Sequence[int]],
                 label: bool | None = True) -> np.ndarray:
    """int8 per token: 1 inside a gold span, 0 outside, -1 ignored. A benign (``label`` False)
    sample has no positive token whatever its spans; an unlabelled one (None) is all ignored."""
    off = np.asarray(offsets, dtype=np.int64).reshape(-1, 2) if len(offsets) else \
        np.empty((0, 2), np.int64)
    out = np.zeros(off.shape[0], dtype=np.int8)
    if label is None:
        out[:] = IGNORE
        return out
    for i, span in enumerate(gold_spans):
        if len(span) != 2 or not 0 <= span[0] < span[1]:
            raise InputError(f"item {i}: expected [start, end) with 0 <= start < end, got "
                             f"{list(span)!r}", field="gold_spans")
    if label:
        for start, end in gold_spans:
            out[(off[:, 0] < end) & (off[:, 1] > start)] = 1
    out[(off[:, 0] < 0) | (off[:, 1] <= off[:, 0])] = IGNORE
    return out


def span_offsets(offsets) -> list[tuple[int, int]]:
    """Offsets as ``spans_from_token_scores`` takes them: marker tokens ``(-1, -1)`` become the
    empty range ``(0, 0)``, which it skips."""
    return [(int(a), int(b)) if a >= 0 else (0, 0) for a, b in np.asarray(offsets).reshape(-1, 2)]
