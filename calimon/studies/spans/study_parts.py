"""The parts of a span study's result: its reports (every method and its random floor), its
counts and its cost. `calimon.studies.spans.study` runs the study; this module only reads its rows."""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Sequence
from typing import Any

from calimon.numerics.span_metrics import (
    ScoredSpan,
    SpanReport,
    SpanRow,
    random_baseline,
    span_metrics,
    span_row_from_sample,
)
from calimon.studies.spans.occlusion import cost_multiple, masked_sample, shared_tokens
from calimon.studies.spans.quotes import judge_quotes


def random_unit_rows(span_rows: Sequence[SpanRow], study_rows: Sequence[Any],
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
                           r.category, r.task, 0, 0, r.kind, r.source))
    return out


def study_reports(rows: Sequence[Any], sign: int, top_k: int, seed: int, quotes: bool
                  ) -> dict[str, SpanReport]:
    """Every method's span metrics on the study's rows, each followed by its random floor:
    occlusion (and flipped), free quotes (ranked by their drop), copy-constrained quotes in the
    order written and ranked by their drop, and the token head's spans, as each row has them."""
    occ = [span_row_from_sample(r.sample, r.occlusion_spans(sign, top_k)) for r in rows]
    flip = [span_row_from_sample(r.sample, r.occlusion_spans(-sign, top_k)) for r in rows]
    reports = {"occlusion": span_metrics(occ), "occlusion (flipped)": span_metrics(flip),
               "random (as occlusion)": span_metrics(random_unit_rows(occ, rows, seed))}
    if quotes:
        qrows = [span_row_from_sample(r.sample, r.quote_spans(sign)) for r in rows]
        reports["quotes"] = span_metrics(qrows)
        reports["random (as quotes)"] = random_baseline(qrows, seed)
    if any(r.copied is not None for r in rows):
        crows = [span_row_from_sample(r.sample, r.copied or ()) for r in rows]
        reports["copy quotes"] = span_metrics(crows)
        reports["copy quotes (by drop)"] = span_metrics(
            [span_row_from_sample(r.sample, r.copy_spans(sign)) for r in rows])
        reports["random (as copy quotes)"] = random_baseline(crows, seed)
    if any(r.token_spans is not None for r in rows):
        trows = [span_row_from_sample(r.sample, r.token_spans or ()) for r in rows]
        reports["token head"] = span_metrics(trows)
        reports["random (as token head)"] = random_baseline(trows, seed)
    return reports


def study_counts(chosen, bad, rows, originals, quote_readings) -> dict[str, Any]:
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


def study_cost(monitor, bad, to_mask, mask, scorer_backend, share_prefix, orig_run, var_run
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


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def quote_cost(bad, free: dict, copied: dict, tokenizer) -> dict[str, Any]:
    """Per misbehaving sample, what each quote method cost as its readings recorded it: the
    mean seconds, and the mean tokens (free quotes: prompt plus generated tokens, unconstrained
    decoding; copy-constrained quotes: every token the backend computed for them, the prompt
    once per quote)."""
    out: dict[str, Any] = {}
    got = [free[s.transcript_hash] for s in bad if s.transcript_hash in free]
    if got and tokenizer is not None:
        gen = [len(tokenizer(v.text or "", add_special_tokens=False)["input_ids"]) for v in got]
        out["free"] = {"samples": len(got), "seconds": _mean([v.seconds for v in got]),
                       "tokens": _mean([v.tokens + g for v, g in zip(got, gen, strict=True)]),
                       "generated_tokens": _mean(gen)}
    if any(s.transcript_hash in copied for s in bad):
        out["copy"] = {**reading_cost(bad, copied), "quotes": _mean(
            [len(copied[s.transcript_hash].evidence) for s in bad if s.transcript_hash in copied])}
    return out


def reading_cost(bad, readings: dict) -> dict[str, Any]:
    """The mean seconds and tokens per misbehaving sample its readings recorded."""
    got = [readings[s.transcript_hash] for s in bad if s.transcript_hash in readings]
    return {"samples": len(got), "seconds": _mean([v.seconds for v in got]),
            "tokens": _mean([v.tokens for v in got])}


__all__ = ["quote_cost", "reading_cost", "random_unit_rows", "study_cost", "study_counts", "study_reports"]
