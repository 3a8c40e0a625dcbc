"""The segment study: a token head's scores aggregated into a reader's segments
(`calimon.numerics.reader_segments`), their precision map fitted on one split's gold spans
(`calimon.calibration.segment_precision`) and judged on another, against the random segment
floor, with bootstrap intervals, per group.

Per misbehaving sample with gold spans (a `SegmentRow`):

- hit@k: one of the top ``k`` segments overlaps a gold span; its floor, the expected hit@1 of
  one segment drawn uniformly, is the share of the sample's segments that overlap gold;
- precision@1: the share of the top segment's characters inside gold; its floor, the mean of
  that share over the sample's segments;
- the token head's own spans (runs above its threshold, ranked by their score) are scored the
  same way, against the floor of a uniformly drawn run-sized segment (`random_rows`).

Intervals: 95% percentile bootstrap over samples (2000 resamples, seed 0), of each figure and of
its difference to its floor (paired).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from calimon.calibration.segment_precision import TOP, reliability
from calimon.numerics.reader_segments import (
    ScoredUnit,
    overlaps_gold,
    rank_units,
    reader_units,
    score_units,
)
from calimon.numerics.span_metrics import ScoredSpan, hit_at, merge_spans, random_rows, span_row

BOOT = 2000


@dataclass(frozen=True)
class SegmentRow:
    """One misbehaving sample: its groups, gold spans, all its segments ranked strongest first
    and the token head's spans."""

    id: str
    text: str
    gold: tuple[tuple[int, int], ...]
    ranked: tuple[ScoredUnit, ...]
    token_spans: tuple[ScoredSpan, ...]
    groups: dict[str, str]


def segment_row(sample: Any, offsets: Sequence[Sequence[int]], scores: Sequence[float],
                token_spans: Sequence[Any] = ()) -> SegmentRow:
    """A row from a sample (response, task, gold spans, ``meta["messages"]``) and its token
    scores (offsets into the response, marker tokens empty)."""
    units = reader_units(sample.response, sample.task, (sample.meta or {}).get("messages"))
    ranked = rank_units(score_units(units, offsets, scores))
    spans = tuple(ScoredSpan(int(a), int(b), float(c)) for a, b, c in token_spans)
    groups = {"category": sample.category, "task": sample.task,
              "source": getattr(sample, "source", "") or "",
              "cell": f"{sample.category}/{sample.task}"}
    return SegmentRow(sample.id, sample.response, tuple(map(tuple, sample.gold_spans)),
                      tuple(ranked), spans, groups)


def _char_precision(unit: tuple[int, int], gold) -> float:
    a, b = unit
    inside = sum(max(0, min(b, g1) - max(a, g0)) for g0, g1 in merge_spans(gold))
    return inside / (b - a)


def fit_points(rows: Sequence[SegmentRow], top: int = TOP
               ) -> tuple[list[float], list[bool], list[str]]:
    """(score, overlaps gold, id) of the top ``top`` segments of each row: the fit set."""
    scores, hits, ids = [], [], []
    for r in rows:
        for k, u in enumerate(r.ranked[:top]):
            scores.append(u.score)
            hits.append(overlaps_gold(u, r.gold))
            ids.append(f"{r.id}#{k}")
    return scores, hits, ids


def per_row(r: SegmentRow, seed: int = 0) -> dict[str, float]:
    """One row's figures (module docstring) and their floors."""
    units = [(u.start, u.end) for u in r.ranked]
    hits = [overlaps_gold(u, r.gold) for u in units]
    top = units[0] if units else None
    tok_floor = random_rows([span_row(r.id, r.text, r.token_spans, r.gold)], seed)[0]
    return {
        "seg_hit1": float(hits[0]) if hits else 0.0,
        "seg_hit3": float(any(hits[:3])),
        "seg_prec1": _char_precision(top, r.gold) if top else 0.0,
        "seg_hit1_floor": sum(hits) / len(hits) if hits else 0.0,
        "seg_prec1_floor": (sum(_char_precision(u, r.gold) for u in units) / len(units)
                            if units else 0.0),
        "tok_hit1": float(hit_at(r.token_spans, r.gold, 1)),
        "tok_hit1_floor": float(hit_at(tok_floor.pred, r.gold, 1)),
        "tok_prec1": (_char_precision((s.start, s.end), r.gold)
                      if (s := next(iter(sorted(r.token_spans, key=lambda x: -(x.score or 0))),
                                    None)) else 0.0),
    }


def _interval(values: np.ndarray, idx: np.ndarray) -> list[float]:
    boot = values[idx].mean(axis=1)
    return [float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975))]


def summarize(table: list[dict[str, float]], seed: int = 0) -> dict[str, Any]:
    """Mean of each figure over the rows, with its interval and, for a figure with a floor,
    the difference and its interval."""
    n = len(table)
    if not n:
        return {"n": 0}
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(BOOT, n))
    out: dict[str, Any] = {"n": n}
    for key in table[0]:
        v = np.array([t[key] for t in table], dtype=float)
        out[key] = {"mean": float(v.mean()), "ci": _interval(v, idx)}
        floor = f"{key}_floor"
        if floor in table[0]:
            d = v - np.array([t[floor] for t in table], dtype=float)
            out[f"{key}_minus_floor"] = {"mean": float(d.mean()), "ci": _interval(d, idx)}
    return out


def judge(rows: Sequence[SegmentRow], precision_of: Callable[[Sequence[float]], Any],
          top: int = TOP, seed: int = 0) -> dict[str, Any]:
    """The test figures: overall and by group, and the reliability of the precision map on
    the top ``top`` segments (and on the top one alone)."""
    table = [per_row(r, seed) for r in rows]
    out: dict[str, Any] = {"overall": summarize(table, seed)}
    for by in ("category", "task", "source", "cell"):
        keys = sorted({r.groups[by] for r in rows})
        out[f"by_{by}"] = {k: summarize([t for t, r in zip(table, rows, strict=True)
                                         if r.groups[by] == k], seed) for k in keys}
    scores, hits, _ = fit_points(rows, top)
    p = np.clip(np.asarray(precision_of(np.array(scores)), dtype=float), 0, 1) if scores else []
    out["reliability"] = reliability(p, hits) if scores else {}
    out["points"] = {"score": [float(x) for x in scores], "precision": [float(x) for x in p],
                     "hit": [bool(h) for h in hits]}  # unrounded: the same bins as the ECE
    firsts = [i for i, (r, k) in enumerate((r, k) for r in rows
                                           for k in range(min(top, len(r.ranked)))) if k == 0]
    if firsts:
        out["reliability_top1"] = reliability([p[i] for i in firsts], [hits[i] for i in firsts],
                                              n_bins=5)
    return out


def nan_free(obj: Any) -> Any:
    """``obj`` with NaN floats as None (JSON)."""
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if isinstance(obj, dict):
        return {k: nan_free(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [nan_free(v) for v in obj]
    return obj


__all__ = ["BOOT", "SegmentRow", "fit_points", "judge", "nan_free", "per_row",
           "segment_row", "summarize"]
