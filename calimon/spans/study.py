"""A span-localization study: occlusion spans and grounded quotes against gold spans.

``run_span_study`` picks the labelled samples of a split (whole pairs, ``limit`` as in
``calimon curve``), scores every original with the monitor (verdict or json readout), asks the
quote monitor (the ``evidence`` prompt, binary readout: generated JSON with an ``evidence``
list) for quotes on the misbehaving ones, grounds them in the response, masks every occlusion
unit and every grounded quote, and reads the drops. Every reading goes through the run store,
so a rerun of the same study makes no model call. Span metrics are computed on the misbehaving
samples: occlusion spans in the chosen direction and flipped, grounded quotes, and the random
segment floor with as many spans as each.
"""

from __future__ import annotations

import datetime as dt
import math
import random
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from calimon import __version__
from calimon.backends import LocalWeights, supports
from calimon.data.registry import load_benchmark
from calimon.data.trajectory import messages_in_span
from calimon.engines import Scorer
from calimon.errors import InputError
from calimon.monitor import Monitor
from calimon.progress import Progress, ticker
from calimon.samples import Sample
from calimon.selection import dataset_hash, select
from calimon.spans.grounding import GroundedSpan, ground_quotes
from calimon.spans.metrics import (
    ScoredSpan,
    SpanReport,
    SpanRow,
    random_baseline,
    span_metrics,
    span_row_from_sample,
)
from calimon.spans.occlusion import (
    TOP_K,
    Occlusion,
    PrefixSharingBackend,
    cost_multiple,
    mask_and_score,
    masked_sample,
    occlusion_units,
    score_quotes,
    shared_tokens,
)
from calimon.spans.quotes import evidence_list, judge_quotes
from calimon.spans.segments import segment
from calimon.spans.settings import DIRECTIONS, SpanSettings
from calimon.spans.study_markdown import study_markdown
from calimon.store import RunStore

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

    def record(self, direction: int = 1, top_k: int = TOP_K) -> dict[str, Any]:
        """The spans.jsonl record of this sample."""
        s = self.sample
        spans = [{"start": x.start, "end": x.end, "score": x.score, "status": "segment",
                  "source": "occlusion"} for x in self.occlusion_spans(direction, top_k)]
        spans += [{"start": q.start, "end": q.end, "score": q.score, "status": q.status,
                   "source": "quote", "quote": q.quote, "reason": q.reason}
                  for q in self.quote_spans(direction)]
        if s.meta.get("messages"):  # e.g. an Inspect trajectory: which messages each is in
            for x in spans:
                if x["start"] is not None:
                    x["messages"] = messages_in_span(s.meta, x["start"], x["end"])
        units = set(self.units)
        return {"id": s.id, "pair_id": s.pair_id, "category": s.category, "task": s.task,
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
    from calimon.metrics import auroc

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
    and the engine is local (``share_prefix``)."""
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
        units, grounded, to_mask = _mask_plan(bad, quote_readings, max_segments)
        occ, scorer_backend, var_run = _occlude(scorer, monitor, bad, to_mask, mask, share)
        model_calls = scorer.model_calls + (scorer_backend.group_calls if share else 0)
    rows = tuple(
        StudyRow(s, o, tuple(u), tuple(g),
                 quote_readings[s.transcript_hash].status
                 if s.transcript_hash in quote_readings else "skipped",
                 len(u) < len(segment(s.response, "auto", task=s.task)))
        for s, o, u, g in zip(bad, occ, units, grounded, strict=True))
    reports = _reports(rows, sign, top_k, seed, quotes)
    cost = _cost(monitor, bad, to_mask, mask, scorer_backend, share,
                 (t_orig, n_orig, len(chosen)), var_run)
    summary = {
        "provenance": _provenance(monitor, prompt, readout, quote_prompt if quotes else None,
                                  benchmark, split, limit, seed, chosen, store),
        "settings": {"direction": direction, "sign": sign, "top_k": top_k,
                     "max_segments": max_segments, "mask": mask, "share_prefix": share},
        "counts": _counts(chosen, bad, rows, originals, quote_readings),
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
            "template_hash": monitor.key.template_hash, "readout": readout,
            "quote_prompt": quote_prompt, "benchmark": benchmark, "split": split,
            "limit": limit, "seed": seed, "dataset_hash": dataset_hash(chosen),
            "store": str(store), "calimon_version": __version__,
            "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}


def _mask_plan(bad, quote_readings, max_segments):
    """Per misbehaving sample: its occlusion units, its grounded quotes, and the spans to mask
    (units, then grounded quotes)."""
    units, grounded, to_mask = [], [], []
    for s in bad:
        u = [(x.start, x.end) for x in occlusion_units(s.response, task=s.task,
                                                       max_segments=max_segments)]
        v = quote_readings.get(s.transcript_hash)
        g = ground_quotes(list(judge_quotes(v)), s.response) if v is not None else []
        units.append(u)
        grounded.append(g)
        to_mask.append(u + [(q.start, q.end) for q in g if q.grounded])
    return units, grounded, to_mask


def _occlude(scorer, monitor, bad, to_mask, mask, share):
    """Score every masked variant through the service (with per-sample prefix sharing when
    ``share``); returns (occlusions, the backend that ran them, (seconds, scored, variants))."""
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


def random_unit_rows(span_rows: Sequence[SpanRow], study_rows: Sequence[StudyRow],
                     seed: int = 0) -> list[SpanRow]:
    """The random floor for occlusion spans: as many units as the row predicts, drawn from the
    row's own occlusion units (merged ones included) with :func:`random_rows`' rule
    (``random.Random(f"{seed}\\0{id}")``, uniform, without replacement), so that it equals
    ``random_rows`` wherever no unit was merged."""
    out = []
    for r, st in zip(span_rows, study_rows, strict=True):
        rng = random.Random(f"{seed}\0{r.id}")
        picks = rng.sample(list(st.units), min(len(r.pred), len(st.units)))
        out.append(SpanRow(r.id, r.text, tuple(ScoredSpan(a, b) for a, b in picks), r.gold,
                           r.category, r.task, 0, 0, r.kind))
    return out


def _reports(rows: Sequence[StudyRow], sign: int, top_k: int, seed: int, quotes: bool
             ) -> dict[str, SpanReport]:
    occ = [span_row_from_sample(r.sample, r.occlusion_spans(sign, top_k)) for r in rows]
    flip = [span_row_from_sample(r.sample, r.occlusion_spans(-sign, top_k)) for r in rows]
    reports = {"occlusion": span_metrics(occ), "occlusion (flipped)": span_metrics(flip),
               "random (as occlusion)": span_metrics(random_unit_rows(occ, rows, seed))}
    if quotes:
        qrows = [span_row_from_sample(r.sample, r.quote_spans(sign)) for r in rows]
        reports["quotes"] = span_metrics(qrows)
        reports["random (as quotes)"] = random_baseline(qrows, seed)
    return reports


def _counts(chosen, bad, rows, originals, quote_readings) -> dict[str, Any]:
    n_quotes = sum(len(r.quotes) for r in rows)
    return {
        "samples": len(chosen), "pairs": len({s.pair_id for s in chosen}),
        "misbehaving": len(bad), "misbehaving_with_gold": sum(bool(s.gold_spans) for s in bad),
        "by_category": dict(sorted(Counter(s.category for s in bad).items())),
        "by_task": dict(sorted(Counter(s.task for s in bad).items())),
        "original_status": dict(sorted(Counter(
            originals[s.transcript_hash].status if s.transcript_hash in originals
            else "missing" for s in chosen).items())),
        "quote_status": dict(sorted(Counter(r.quote_status for r in rows).items())),
        "quotes_from_unparsed_verdicts": sum(
            len(judge_quotes(v)) for v in quote_readings.values() if v.status == "parse_failure"),
        "quotes": n_quotes,
        "ungrounded_quotes": sum(not q.grounded for r in rows for q in r.quotes),
        "grounding": dict(sorted(Counter(q.status for r in rows for q in r.quotes).items())),
        "units_per_sample": (sum(len(r.units) for r in rows) / len(rows)) if rows else math.nan,
        "samples_with_merged_units": sum(r.merged for r in rows),
        "variant_status": dict(sorted(Counter(
            x.status for r in rows for x in r.occlusion.segments).items())),
    }


def _cost(monitor, bad, to_mask, mask, scorer_backend, share_prefix, orig_run, var_run
          ) -> dict[str, Any]:
    """Tokens (template prefix excluded) of one scoring pass over the misbehaving originals,
    of their masked variants run plainly, and as the prefix-sharing backend runs them (each
    sample's variants as one call, its original already scored); seconds of this run."""
    enc = monitor.encoder
    prefix = enc.prefix_len
    one_pass = plain = shared = n_var = 0
    for s, spans in zip(bad, to_mask, strict=True):
        ids = [enc.encode(v.request, v.response).ids
               for v in (masked_sample(s, b, mask) for b in dict.fromkeys(spans))]
        one_pass += len(enc.encode(s.request, s.response).ids) - prefix
        plain += sum(len(x) - prefix for x in ids)
        shared += shared_tokens(ids, prefix)
        n_var += len(ids)
    (t_orig, n_orig, n_chosen), (t_mask, n_todo, n_variants) = orig_run, var_run
    out = {"variants": n_var, "tokens_one_pass": one_pass,
           "tokens_variants_plain": plain, "tokens_variants_shared": shared,
           "multiple_plain": cost_multiple(plain, one_pass),
           "multiple_shared": cost_multiple(shared, one_pass),
           "seconds_originals": t_orig, "originals_scored": n_orig,
           "seconds_variants": t_mask, "variants_scored": n_todo}
    if share_prefix:
        out["tokens_computed_this_run"] = scorer_backend.tokens_computed
    if n_orig == n_chosen and n_todo == n_variants and n_orig and n_todo and bad:
        # seconds per misbehaving sample for its variants / seconds per original
        out["measured_multiple"] = (t_mask / len(bad)) / (t_orig / n_orig)
    return out


__all__ = ["DIRECTIONS", "SpanSettings", "SpanStudy", "StudyRow", "evidence_list", "judge_quotes",
           "random_unit_rows", "run_span_study", "study_markdown"]
