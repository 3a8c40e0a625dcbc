"""Readings of samples (a store's verdicts by transcript hash) as counts and arrays; a sample
with no usable score is reported or NaN, never scored as 0."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np

from calimon.samples import Sample
from calimon.verdict import Verdict


def status_counts(samples: Sequence[Sample], readings: dict[str, Verdict]) -> dict[str, int]:
    """How many samples have each reading status ("missing": no reading)."""
    return dict(Counter(readings[x.transcript_hash].status if x.transcript_hash in readings
                        else "missing" for x in samples))


def usable(samples: Sequence[Sample], readings: dict[str, Verdict]):
    """Samples with a score, as arrays; the rest are reported, never scored as 0."""
    kept = [x for x in samples if x.transcript_hash in readings
            and readings[x.transcript_hash].scored]
    p = np.array([readings[x.transcript_hash].p_raw for x in kept], dtype=float)
    y = np.array([bool(x.label) for x in kept])
    return kept, p, y


def scores(samples: Sequence[Sample], readings: dict[str, Verdict],
           attr: str = "p_raw") -> np.ndarray:
    """p_raw (or another reading) per sample, NaN where there is no usable score."""
    out = []
    for x in samples:
        v = readings.get(x.transcript_hash)
        value = getattr(v, attr) if v is not None and v.scored else None
        out.append(math.nan if value is None else value)
    return np.array(out, dtype=float)
