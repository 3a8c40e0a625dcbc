"""A span-localization study: occlusion spans, quotes and token-head spans against gold spans.

``run_span_study`` picks the labelled samples of a split (whole pairs, ``limit`` as in
``calimon curve``), scores every original with the monitor (verdict or json readout, or a
sequence probe head ``probe:<name>``: occlusion then perturbs the head's score), asks the quote
monitor (the ``evidence`` prompt, binary readout: generated JSON with an ``evidence`` list) for
free quotes on the misbehaving ones and grounds them in the response, optionally generates
copy-constrained quotes (`calimon.studies.spans.copy_generation`: grounded by construction) and reads a
token head's spans, masks every occlusion unit and every quote, and reads the drops. Every
reading goes through the run store, so a rerun of the same study makes no model call. Span
metrics are computed on the misbehaving samples for each method, each next to the random
segment floor with as many spans.
"""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from calimon import __version__
from calimon.data.registry import load_benchmark
from calimon.data.trajectory import messages_in_span
from calimon.errors import InputError
from calimon.numerics.segments import segment
from calimon.numerics.span_metrics import ScoredSpan, SpanReport
from calimon.progress import Progress, ticker
from calimon.prompts import load_prompt
from calimon.samples import Sample
from calimon.scoring.backends import LocalWeights, supports
from calimon.scoring.engines import Scorer
from calimon.scoring.monitor import Monitor
from calimon.scoring.store import RunStore
from calimon.selection import dataset_hash, select
from calimon.studies.spans.copy_generation import CopyQuoter, copied_spans
from calimon.studies.spans.grounding import GroundedSpan, ground_quotes
from calimon.studies.spans.occlusion import (
    TOP_K,
    Occlusion,
    PrefixSharingBackend,
    mask_and_score,
    masked_sample,
    occlusion_units,
    score_quotes,
)
from calimon.studies.spans.probe_sharing import SharedPrefixProbe
from calimon.studies.spans.quotes import evidence_list, judge_quotes
from calimon.studies.spans.settings import DIRECTIONS, SpanSettings
from calimon.studies.spans.study_markdown import study_markdown
from calimon.studies.spans.study_parts import (
    quote_cost,
    random_unit_rows,
    reading_cost,
    study_cost,
    study_counts,
    study_reports,
)

VARIANTS_PER_CALL = 64


@dataclass(frozen=True)
class StudyRow:
    """One misbehaving sample: its occlusion (units and quote spans masked) and its quotes."""

    sample: Sample
    occlusion: Occlusion
    units: tuple[tuple[int, int], ...]
    quotes: tuple[GroundedSpan, ...]  # grounded (or not), unscored
    quote_status: str  # reading status of the quote monitor, "skipped" when not asked
    merged: bool  # whether units were merged to respect max_segments
    copied: tuple[GroundedSpan, ...] | None = None  # copy-constrained quotes, when asked
    token_spans: tuple[ScoredSpan, ...] | None = None  # a token head's spans, when asked

    def occlusion_spans(self, direction: int = 1, top_k: int = TOP_K) -> list[ScoredSpan]:
        """The ``top_k`` occlusion units by ``direction * drop`` (quote spans left out), highest
        first."""
        units = set(self.units)
        unit_occ = Occlusion(self.occlusion.id, self.occlusion.p_raw, self.occlusion.status,
                             tuple(s for s in self.occlusion.segments
                                   if (s.start, s.end) in units))
        return unit_occ.top_spans(top_k, direction)

    def quote_spans(self, direction: int = 1) -> list[GroundedSpan]:
        """The quotes scored by the drop of their masked span (see `score_quotes`)."""
        return score_quotes(self.quotes, self.occlusion, direction)

    def copy_spans(self, direction: int = 1) -> list[GroundedSpan]:
        """The copy-constrained quotes scored by the drop of their masked span."""
        return score_quotes(self.copied or (), self.occlusion, direction)

    def record(self, direction: int = 1, top_k: int = TOP_K) -> dict[str, Any]:
        """The spans.jsonl record of this sample."""
        s = self.sample
        spans = [{"start": x.start, "end": x.end, "score": x.score, "status": "segment",
                  "source": "occlusion"} for x in self.occlusion_spans(direction, top_k)]
        spans += [{"start": q.start, "end": q.end, "score": q.score, "status": q.status,
                   "source": "quote", "quote": q.quote, "reason": q.reason}
                  for q in self.quote_spans(direction)]
        spans += [{"start": q.start, "end": q.end, "score": q.score, "status": q.status,
                   "source": "copy_quote", "quote": q.quote, "order": k}
                  for k, q in enumerate(self.copy_spans(direction))]
        spans += [{"start": x.start, "end": x.end, "score": x.score, "status": "token",
                   "source": "token_head"} for x in self.token_spans or ()]
        if s.meta.get("messages"):  # e.g. an Inspect trajectory: which messages each is in
            for x in spans:
                if x["start"] is not None:
                    x["messages"] = messages_in_span(s.meta, x["start"], x["end"])
        units = set(self.units)
        return {"id": s.id, "pair_id": s.pair_id, "category": s.category, "task": s.task,
                "source": s.source,
                "label": s.label, "split": s.split, "response": s.response,
                "gold": [list(g) for g in s.gold_spans], "spans": spans,
                "p_raw": self.occlusion.p_raw, "status": self.occlusion.status,
                "direction": direction, "quote_status": self.quote_status,
                "segments": [x.to_dict() for x in self.occlusion.segments
                             if (x.start, x.end) in units]}


@dataclass(frozen=True)
class SpanStudy:
    """A finished span study: its rows, the span metrics of each method, the score direction used
    and the summary."""

    rows: tuple[StudyRow, ...]
    reports: dict[str, SpanReport]
    direction: int
    top_k: int
    summary: dict[str, Any] = field(repr=False)

    def records(self) -> list[dict[str, Any]]:
        """The spans.jsonl records, one per row."""
        return [r.record(self.direction, self.top_k) for r in self.rows]

    def to_markdown(self, command: str | None = None) -> str:
        """The study as markdown (`study_markdown`); ``command`` is shown as the one that
        reproduces it."""
        return study_markdown(self, command)


def _select(samples: list[Sample], split: str | None, limit: int | None, seed: int,
            benchmark: str) -> list[Sample]:
    chosen = select(samples, split, limit=limit, seed=seed)
    if not chosen:
        raise InputError(f"benchmark {benchmark!r} has no labelled samples"
                         + (f" in split {split!r}" if split else ""), field="split")
    return chosen


def _auroc(samples: Sequence[Sample], readings: dict) -> float:
    from calimon.numerics.metrics import auroc

    kept = [s for s in samples if s.transcript_hash in readings
            and readings[s.transcript_hash].scored]
    if not kept:
        return math.nan
    return auroc([readings[s.transcript_hash].p_raw for s in kept],
                 [bool(s.label) for s in kept])


def _timed_score(scorer, monitor, samples, label):
    todo = scorer.todo(samples, monitor)
    start = time.perf_counter()
    readings = scorer.score(samples, monitor, label=label, chunk_size=256)
    return readings, time.perf_counter() - start, todo


def run_span_study(settings: SpanSettings, *, backend: Any = None,
                   progress: Progress | None = None) -> SpanStudy:
    """Run a span-localization study (see the module docstring) with ``settings``' monitor,
    backend and engine; ``backend`` is an already-built backend to use instead (tests pass a
    fake one). Masked variants share each sample's prefix when the backend has local weights
    and the engine is local (``share_prefix``; on a probe head, `SharedPrefixProbe`)."""
    st = settings
    st.check()
    benchmark, split, limit, seed, store = st.benchmark, st.split, st.limit, st.seed, st.store
    prompt, readout, quotes, quote_prompt = st.prompt, st.readout, st.quotes, st.quote_prompt
    direction, top_k, max_segments, mask = st.direction, st.top_k, st.max_segments, st.mask
    spec = st.spec()
    engine = st.engine_settings(chunk_size=256)
    samples = load_benchmark(benchmark)
    chosen = _select(samples, split, limit, seed, benchmark)
    bad = [s for s in chosen if s.label]
    with RunStore(store) as db, Scorer(spec, db, engine=engine, progress=progress,
                                       backend=backend) as scorer:
        monitor = scorer.monitor()
        share = (st.share_prefix and engine.name == "local"
                 and supports(scorer.backend, LocalWeights))
        if share:
            scorer.backend.model  # noqa: B018 - loads the weights now, outside the timings
        monitor.encoder  # noqa: B018 - loads the tokenizer now, outside the timings
        originals, t_orig, n_orig = _timed_score(scorer, monitor, chosen, f"{prompt}/{readout}")
        sign, calib_auroc = _direction(direction, samples, limit, seed, scorer, monitor)
        quote_readings: dict = {}
        if quotes and bad:
            quote_readings, _, _ = _timed_score(scorer, scorer.monitor(quote_prompt, "binary"),
                                                bad, f"{quote_prompt}/binary")
        copies = _copy_quotes(scorer, monitor, st, bad, db, progress) if st.copy_quotes and bad else None
        heads, head_readings = (_token_spans(scorer, st.token_head, bad)
                                if st.token_head and bad else (None, {}))
        units, grounded, to_mask = _mask_plan(bad, quote_readings, max_segments, copies)
        occ, scorer_backend, var_run = _occlude(scorer, monitor, bad, to_mask, mask, share)
        model_calls = scorer.model_calls + (scorer_backend.group_calls if share else 0)
    rows = tuple(
        StudyRow(s, o, tuple(u), tuple(g),
                 quote_readings[s.transcript_hash].status
                 if s.transcript_hash in quote_readings else "skipped",
                 len(u) < len(segment(s.response, "auto", task=s.task)),
                 None if copies is None else tuple(copies[1][i]),
                 None if heads is None else heads[i])
        for i, (s, o, u, g) in enumerate(zip(bad, occ, units, grounded, strict=True)))
    reports = study_reports(rows, sign, top_k, seed, quotes)
    cost = study_cost(monitor, bad, to_mask, mask, scorer_backend, share,
                      (t_orig, n_orig, len(chosen)), var_run)
    cost["quotes"] = quote_cost(bad, quote_readings, copies[0] if copies else {},
                                scorer.backend.tokenizer if quotes else None)
    if head_readings:
        cost["token_head"] = reading_cost(bad, head_readings)
    summary = {
        "provenance": _provenance(monitor, prompt, readout, quote_prompt if quotes else None,
                                  benchmark, split, limit, seed, chosen, store),
        "settings": {"direction": direction, "sign": sign, "top_k": top_k,
                     "max_segments": max_segments, "mask": mask, "share_prefix": share},
        "counts": study_counts(chosen, bad, rows, originals, quote_readings),
        "auroc_raw": _auroc(chosen, originals), "calib_auroc_raw": calib_auroc,
        "reports": {k: v.to_dict() for k, v in reports.items()},
        "cost": cost,
        "model_calls": model_calls,
    }
    return SpanStudy(rows, reports, sign, top_k, summary)


def _provenance(monitor, prompt, readout, quote_prompt, benchmark, split, limit, seed, chosen,
                store) -> dict[str, Any]:
    ref = monitor.backend.model_ref
    return {"model": ref.name, "model_revision": ref.revision, "prompt": prompt,
            "benchmark_sources": sorted({s.source for s in chosen if s.source}),
            "template_hash": monitor.key.template_hash, "readout": readout,
            "quote_prompt": quote_prompt, "benchmark": benchmark, "split": split,
            "limit": limit, "seed": seed, "dataset_hash": dataset_hash(chosen),
            "store": str(store), "calimon_version": __version__,
            "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}


def _mask_plan(bad, quote_readings, max_segments, copies=None):
    """Per misbehaving sample: its occlusion units, its grounded quotes, and the spans to mask
    (units, then grounded quotes, then copy-constrained quotes)."""
    units, grounded, to_mask = [], [], []
    for i, s in enumerate(bad):
        u = [(x.start, x.end) for x in occlusion_units(s.response, task=s.task,
                                                       max_segments=max_segments)]
        v = quote_readings.get(s.transcript_hash)
        g = ground_quotes(list(judge_quotes(v)), s.response) if v is not None else []
        units.append(u)
        grounded.append(g)
        copied = [(q.start, q.end) for q in copies[1][i]] if copies else []
        to_mask.append(u + [(q.start, q.end) for q in g if q.grounded] + copied)
    return units, grounded, to_mask


def _copy_quotes(scorer, monitor, st, bad, db, progress):
    """(readings by transcript hash, copied spans per misbehaving sample) of the quote prompt's
    copy-constrained quotes, through the store."""
    quoter = CopyQuoter(scorer.backend, load_prompt(st.quote_prompt),
                        max_input_tokens=monitor.encoder.max_input_tokens)
    todo = len(db.missing(quoter.key, [s.transcript_hash for s in bad]))
    readings = quoter.quote_all(bad, db, ticker(progress, "copy quotes", todo))
    return readings, [copied_spans(readings.get(s.transcript_hash), s.response) for s in bad]


def _token_spans(scorer, head: str, bad) -> tuple[list[tuple[ScoredSpan, ...]], dict]:
    """A token head's spans on each misbehaving sample (``extra["spans"]`` of its readings;
    none for a sample without a reading), and its readings by transcript hash."""
    monitor = scorer.monitor(readout=head if head.startswith("probe:") else f"probe:{head}")
    readings = scorer.score(bad, monitor, label=f"token head {head}", chunk_size=64)
    out = []
    for s in bad:
        v = readings.get(s.transcript_hash)
        spans = (v.extra.get("spans") or []) if v is not None and v.scored else []
        out.append(tuple(ScoredSpan(int(a), int(b), float(c)) for a, b, c in spans))
    return out, readings


def _occlude(scorer, monitor, bad, to_mask, mask, share):
    """Score every masked variant through the service (with per-sample prefix sharing when
    ``share``); returns (occlusions, the backend that ran them, (seconds, scored, variants))."""
    if share and monitor.readout.startswith("probe:"):
        mmon = scorer_backend = SharedPrefixProbe(monitor)
    else:
        scorer_backend = PrefixSharingBackend(scorer.backend) if share else scorer.backend
        mmon = Monitor(scorer_backend, monitor.prompt, monitor.readout) if share else monitor
    variants = [masked_sample(s, b, mask).transcript_hash
                for s, m in zip(bad, to_mask, strict=True) for b in dict.fromkeys(m)]
    n_todo = len(scorer.store.missing(mmon.key, variants))
    tick = ticker(scorer.progress, "masked variants", n_todo)
    start = time.perf_counter()

    def score(samples):
        return scorer.score(samples, mmon, tick=tick, chunk_size=VARIANTS_PER_CALL + 64)

    occ = []
    for lo, hi in _sample_chunks([len(set(m)) for m in to_mask]):
        occ += mask_and_score(bad[lo:hi], to_mask[lo:hi], score, mask=mask)
    return occ, scorer_backend, (time.perf_counter() - start, n_todo, len(set(variants)))


def _direction(direction, samples, limit, seed, scorer, monitor) -> tuple[int, float]:
    if direction != "auto":
        return (1 if direction == "raw" else -1), math.nan
    calib = select(samples, "calib", limit=limit, seed=seed)
    if not calib:
        raise InputError("direction 'auto' needs a 'calib' split to read the sign of the raw "
                         "score from; pass 'raw' or 'flipped'", field="direction")
    readings, _, _ = _timed_score(scorer, monitor, calib, "calib (direction)")
    value = _auroc(calib, readings)
    return (-1 if value < 0.5 else 1), value


def _sample_chunks(n_variants: Sequence[int]) -> list[tuple[int, int]]:
    """Consecutive samples with about VARIANTS_PER_CALL variants per call (a sample's variants
    never split: they share one cache), so progress and store commits come in steps."""
    chunks, lo, total = [], 0, 0
    for i, n in enumerate(n_variants):
        if total and total + n > VARIANTS_PER_CALL:
            chunks.append((lo, i))
            lo, total = i, 0
        total += n
    if lo < len(n_variants):
        chunks.append((lo, len(n_variants)))
    return chunks


__all__ = ["DIRECTIONS", "SpanSettings", "SpanStudy", "StudyRow", "evidence_list", "judge_quotes",
           "random_unit_rows", "run_span_study", "study_markdown"]
