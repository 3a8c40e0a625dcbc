"""Span-localization metrics against gold spans, a random-segment floor, token-score spans.

Definitions (per row = one misbehaving sample; ``P`` and ``G`` are the sets of characters
covered by the union of predicted and of gold spans, so overlapping spans count once):

- micro precision = sum |P & G| / sum |P|, recall = sum |P & G| / sum |G|, F1 from those two;
- IoU = |P & G| / |P | G| per row, averaged over rows (the mean IoU);
- hit@k: one of the k highest-scored predicted spans overlaps some gold span by >= 1 character;
  spans rank by score, highest first; spans without a score come after, in their given order;
- ungrounded-quote rate = ungrounded quotes / quotes, over all rows (gold or not).

Empty gold: rows without gold spans are left out of P/R/F1, IoU and hit@k and counted in
``n_empty_gold``. A ratio with a zero denominator is 0.0 (no predicted characters: precision 0),
except where no row is left at all, where every localization metric is NaN.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from calimon.errors import InputError
from calimon.numerics.segments import KINDS, segment

NAN = float("nan")
GROUPS = ("category", "task", "source", "cell")  # the groupings of a SpanReport


@dataclass(frozen=True)
class ScoredSpan:
    """A predicted [start, end) character span with an optional score (higher ranks first)."""

    start: int
    end: int
    score: float | None = None


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def as_scored_spans(spans: Iterable[Any], *, text_len: int | None = None,
                    name: str = "spans") -> tuple[ScoredSpan, ...]:
    """Coerce spans: ScoredSpan, GroundedSpan (ungrounded ones are skipped), Segment, any object
    with ``start``/``end`` (and optional ``score``), or (start, end[, score]) tuples."""
    if isinstance(spans, str | bytes):
        raise InputError(f"expected a list of spans, got {type(spans).__name__}", field=name)
    out = []
    for i, item in enumerate(spans):
        if hasattr(item, "start") and hasattr(item, "end"):
            start, end, score = item.start, item.end, getattr(item, "score", None)
            if start is None and end is None and getattr(item, "status", "") == "ungrounded":
                continue
        elif isinstance(item, tuple | list) and len(item) in (2, 3):
            start, end, score = item[0], item[1], item[2] if len(item) == 3 else None
        else:
            raise InputError(f"item {i}: expected a span or (start, end[, score]), got {item!r}",
                             field=name)
        limit = text_len if text_len is not None else math.inf
        if not (_is_int(start) and _is_int(end) and 0 <= start < end <= limit):
            raise InputError(f"item {i}: expected integers 0 <= start < end"
                             f"{'' if text_len is None else f' <= {text_len}'}, "
                             f"got ({start!r}, {end!r})", field=name)
        if score is not None:
            if isinstance(score, bool) or not isinstance(score, int | float) \
                    or math.isnan(score):
                raise InputError(f"item {i}: expected a number or None as score, got {score!r}",
                                 field=name)
            score = float(score)
        out.append(ScoredSpan(start, end, score))
    return tuple(out)


def merge_spans(spans: Iterable[Any]) -> list[tuple[int, int]]:
    """The union of spans as sorted, disjoint [start, end) intervals (touching ones joined)."""
    merged: list[list[int]] = []
    for s in sorted((s.start, s.end) for s in as_scored_spans(spans)):
        if merged and s[0] <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], s[1])
        else:
            merged.append(list(s))
    return [(a, b) for a, b in merged]


def _length(intervals: Sequence[tuple[int, int]]) -> int:
    return sum(b - a for a, b in intervals)


def _overlap(a: Sequence[tuple[int, int]], b: Sequence[tuple[int, int]]) -> int:
    i = j = total = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def _counts(pred: Iterable[Any], gold: Iterable[Any]) -> tuple[int, int, int]:
    p, g = merge_spans(pred), merge_spans(gold)
    return _overlap(p, g), _length(p), _length(g)


def _ratio(num: float, den: float, zero: float = 0.0) -> float:
    return num / den if den else zero


def _f1(p: float, r: float) -> float:
    return _ratio(2 * p * r, p + r)


def char_prf(pred_spans: Iterable[Any], gold_spans: Iterable[Any], *,
             zero_division: float = 0.0) -> tuple[float, float, float]:
    """Character-level (precision, recall, F1) of one prediction; overlaps count once."""
    inter, n_pred, n_gold = _counts(pred_spans, gold_spans)
    p = _ratio(inter, n_pred, zero_division)
    r = _ratio(inter, n_gold, zero_division)
    return p, r, _ratio(2 * p * r, p + r, zero_division)


def char_iou(pred_spans: Iterable[Any], gold_spans: Iterable[Any]) -> float:
    """|P & G| / |P | G| on characters; 0.0 when both are empty."""
    inter, n_pred, n_gold = _counts(pred_spans, gold_spans)
    return _ratio(inter, n_pred + n_gold - inter)


def ranked(spans: Iterable[ScoredSpan]) -> list[ScoredSpan]:
    """Highest score first; spans without a score after, in their given order."""
    spans = list(spans)
    return sorted(spans, key=lambda s: (s.score is None, -(s.score or 0.0)))


def hit_at(pred_spans: Iterable[ScoredSpan], gold_spans: Iterable[Any], k: int) -> bool:
    """Whether one of the top-k predicted spans overlaps a gold span."""
    gold = merge_spans(gold_spans)
    return any(_overlap([(s.start, s.end)], gold) for s in ranked(pred_spans)[:k])


@dataclass(frozen=True)
class SpanRow:
    """One misbehaving sample: its text, the predicted spans (with scores) and the gold spans."""

    id: str
    text: str
    pred: tuple[ScoredSpan, ...]
    gold: tuple[tuple[int, int], ...]
    category: str = ""
    task: str = ""
    n_quotes: int = 0
    n_ungrounded: int = 0
    kind: str = "auto"
    source: str = ""  # the benchmark source the sample came from (a grouping key)

    @property
    def cell(self) -> str:
        """The row's category x task cell, ``category/task``."""
        return f"{self.category}/{self.task}"


def span_row(id: str, text: str, pred: Iterable[Any], gold: Iterable[Any], *,
             category: str = "", task: str = "", kind: str = "auto",
             n_quotes: int | None = None, n_ungrounded: int | None = None,
             source: str = "") -> SpanRow:
    """Validate and build a row; GroundedSpans in ``pred`` are counted as quotes when
    ``n_quotes``/``n_ungrounded`` are not given (ungrounded ones count, but predict nothing)."""
    if not isinstance(text, str):
        raise InputError(f"expected a string, got {type(text).__name__}", field="text")
    if kind not in KINDS:
        raise InputError(f"expected one of {list(KINDS)}, got {kind!r}", field="kind")
    pred = list(pred)
    quotes = [p for p in pred if hasattr(p, "status")]
    if n_quotes is None:
        n_quotes = len(quotes)
    if n_ungrounded is None:
        n_ungrounded = sum(p.status == "ungrounded" for p in quotes)
    if not (_is_int(n_quotes) and _is_int(n_ungrounded) and 0 <= n_ungrounded <= n_quotes):
        raise InputError(f"expected 0 <= n_ungrounded <= n_quotes, got {n_ungrounded!r} and "
                         f"{n_quotes!r}", field="n_ungrounded")
    gold_spans = tuple((s.start, s.end) for s in
                       as_scored_spans(gold, text_len=len(text), name="gold"))
    return SpanRow(str(id), text, as_scored_spans(pred, text_len=len(text), name="pred"),
                   gold_spans, category, task, n_quotes, n_ungrounded, kind, str(source or ""))


def span_row_from_sample(sample: Any, pred: Iterable[Any], *, kind: str = "auto",
                         **counts: int) -> SpanRow:
    """A row for a :class:`calimon.samples.Sample` (its response, gold spans, category, task,
    source)."""
    return span_row(sample.id, sample.response, pred, sample.gold_spans,
                    category=sample.category, task=sample.task, kind=kind,
                    source=getattr(sample, "source", "") or "", **counts)


@dataclass(frozen=True)
class SpanScores:
    """The localization metrics of a set of rows (definitions: module docstring)."""

    n_rows: int
    n_scored: int
    n_empty_gold: int
    precision: float
    recall: float
    f1: float
    mean_iou: float
    hit_at_1: float
    hit_at_3: float
    mean_pred_spans: float
    n_quotes: int
    n_ungrounded: int
    ungrounded_rate: float


@dataclass(frozen=True)
class SpanReport:
    """Span metrics overall and per category, task, source and cell (category/task)."""

    overall: SpanScores
    by_category: dict[str, SpanScores] = field(default_factory=dict)
    by_task: dict[str, SpanScores] = field(default_factory=dict)
    by_source: dict[str, SpanScores] = field(default_factory=dict)
    by_cell: dict[str, SpanScores] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: NaN becomes None."""
        def clean(d: dict[str, Any]) -> dict[str, Any]:
            return {k: None if isinstance(v, float) and math.isnan(v) else v
                    for k, v in d.items()}
        out: dict[str, Any] = {"overall": clean(asdict(self.overall))}
        for by in GROUPS:
            out[f"by_{by}"] = {k: clean(asdict(v))
                               for k, v in getattr(self, f"by_{by}").items()}
        return out


def _scores(rows: Sequence[SpanRow]) -> SpanScores:
    scored = [r for r in rows if r.gold]
    inter = n_pred = n_gold = 0
    ious, hit1, hit3 = [], 0, 0
    for r in scored:
        i, p, g = _counts(r.pred, r.gold)
        inter, n_pred, n_gold = inter + i, n_pred + p, n_gold + g
        ious.append(_ratio(i, p + g - i))
        hit1 += hit_at(r.pred, r.gold, 1)
        hit3 += hit_at(r.pred, r.gold, 3)
    n = len(scored)
    if n:
        precision, recall = _ratio(inter, n_pred), _ratio(inter, n_gold)
        loc = (precision, recall, _f1(precision, recall), sum(ious) / n, hit1 / n, hit3 / n)
    else:
        loc = (NAN,) * 6
    n_quotes = sum(r.n_quotes for r in rows)
    n_ungrounded = sum(r.n_ungrounded for r in rows)
    return SpanScores(len(rows), n, len(rows) - n, *loc,
                      _ratio(sum(len(r.pred) for r in rows), len(rows), NAN),
                      n_quotes, n_ungrounded, _ratio(n_ungrounded, n_quotes, NAN))


def _check_rows(rows: Iterable[Any]) -> list[SpanRow]:
    rows = list(rows)
    for i, r in enumerate(rows):
        if not isinstance(r, SpanRow):
            raise InputError(f"item {i}: expected a SpanRow (see span_row), got "
                             f"{type(r).__name__}", field="rows")
    return rows


def span_metrics(rows: Iterable[SpanRow]) -> SpanReport:
    """Micro char P/R/F1, mean IoU, hit@1/3 and the ungrounded rate, overall and by group
    (category, task, source, cell)."""
    rows = _check_rows(rows)

    def group(key: str) -> dict[str, SpanScores]:
        keys = sorted({getattr(r, key) for r in rows})
        return {k: _scores([r for r in rows if getattr(r, key) == k]) for k in keys}

    return SpanReport(_scores(rows), *(group(by) for by in GROUPS))


def random_rows(rows: Iterable[SpanRow], seed: int = 0) -> list[SpanRow]:
    """Each row with its predictions replaced by as many random segments (without scores,
    in draw order) of the row's segmentation kind; capped at the number of segments.

    The draw of a row depends only on ``seed`` and the row's id, not on the other rows."""
    if not _is_int(seed):
        raise InputError(f"expected an integer, got {seed!r}", field="seed")
    out = []
    for r in _check_rows(rows):
        segs = segment(r.text, r.kind, task=r.task)
        rng = random.Random(f"{seed}\x00{r.id}")
        picks = rng.sample(segs, min(len(r.pred), len(segs)))
        out.append(SpanRow(r.id, r.text, tuple(ScoredSpan(s.start, s.end) for s in picks),
                           r.gold, r.category, r.task, 0, 0, r.kind, r.source))
    return out


def random_baseline(rows: Iterable[SpanRow], seed: int = 0) -> SpanReport:
    """The random-segment floor: :func:`span_metrics` of :func:`random_rows`."""
    return span_metrics(random_rows(rows, seed))


def spans_from_token_scores(offsets: Sequence[Sequence[int]], scores: Sequence[float],
                            threshold: float, *, text: str | None = None) -> list[ScoredSpan]:
    """Runs of consecutive tokens scoring above ``threshold`` as character spans scored by the
    run's maximum. Tokens with an empty offset (special tokens) are ignored; with ``text``,
    whitespace at a span's edges is trimmed."""
    if len(offsets) != len(scores):
        raise InputError(f"expected as many scores as offsets, got {len(scores)} and "
                         f"{len(offsets)}", field="scores")
    runs: list[list[float]] = []
    open_run = False
    for i, (off, score) in enumerate(zip(offsets, scores, strict=True)):
        if not (len(off) == 2 and _is_int(off[0]) and _is_int(off[1]) and 0 <= off[0]):
            raise InputError(f"item {i}: expected (start, end) integers, got {off!r}",
                             field="offsets")
        if off[1] <= off[0]:
            continue
        score = float(score)
        if math.isnan(score):
            raise InputError(f"item {i}: score is NaN", field="scores")
        if score > threshold:
            if open_run:
                run = runs[-1]
                run[0], run[1], run[2] = min(run[0], off[0]), max(run[1], off[1]), \
                    max(run[2], score)
            else:
                runs.append([off[0], off[1], score])
            open_run = True
        else:
            open_run = False
    out = []
    for start, end, score in runs:
        start, end = int(start), int(end)
        if text is not None:
            while start < end and text[start].isspace():
                start += 1
            while end > start and text[end - 1].isspace():
                end -= 1
        if start < end:
            out.append(ScoredSpan(start, end, score))
    return out


def to_markdown(reports: Mapping[str, SpanReport], *, by: str = "category",
                metrics: Sequence[str] = ("f1", "mean_iou", "hit_at_1")) -> str:
    """A markdown table: one row per (group, method), ``all`` first; ``by`` is one of
    `GROUPS` (category, task, source, cell)."""
    if by not in GROUPS:
        raise InputError(f"expected one of {list(GROUPS)}, got {by!r}", field="by")
    unknown = [m for m in metrics if m not in SpanScores.__dataclass_fields__]
    if unknown:
        raise InputError(f"unknown metric(s) {unknown}", field="metrics")
    groups = sorted({g for rep in reports.values() for g in getattr(rep, f"by_{by}")})
    lines = [f"| {by} | method | n | " + " | ".join(metrics) + " |",
             "|" + "---|" * (3 + len(metrics))]
    for g in ["all", *groups]:
        for name, rep in reports.items():
            s = rep.overall if g == "all" else getattr(rep, f"by_{by}").get(g)
            if s is None:
                continue
            cells = ["n/a" if math.isnan(getattr(s, m)) else f"{getattr(s, m):.3f}"
                     for m in metrics]
            lines.append(f"| {g} | {name} | {s.n_scored} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
