"""A span study (`calimon.studies.spans.study.SpanStudy`) as markdown: settings, sample sizes, the
tables by category, task, source and cell, the ungrounded-quote rates and the cost figures."""

from __future__ import annotations

import math
from typing import Any

from calimon.numerics.span_metrics import to_markdown

METRICS = ("precision", "recall", "f1", "mean_iou", "hit_at_1", "hit_at_3", "mean_pred_spans")


def _fmt(x: Any, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def study_markdown(study, command: str | None = None) -> str:
    """The study as markdown: settings, sample sizes, the tables by category, task, source and
    cell, the ungrounded-quote rates and the cost figures."""
    s = study.summary
    p, st, c, cost = s["provenance"], s["settings"], s["counts"], s["cost"]
    lines = ["# Span localization", ""]
    if command:
        lines += ["Command:", "", "```", command, "```", ""]
    lines += [
        f"Model `{p['model']}` (revision `{p['model_revision']}`), prompt `{p['prompt']}`, "
        f"readout `{p['readout']}`; quotes from `{p['quote_prompt']}` (binary readout). "
        f"Benchmark `{p['benchmark']}`, split `{p['split']}`, limit {p['limit']}, "
        f"seed {p['seed']}, dataset hash `{p['dataset_hash']}`.",
        "",
        f"Samples: {c['samples']} ({c['pairs']} pairs); misbehaving (span rows): "
        f"{c['misbehaving']}, of which {c['misbehaving_with_gold']} have gold spans; by "
        f"category {c['by_category']}, by task {c['by_task']}.",
        "",
        f"Direction: `{st['direction']}` (span score = {'+' if study.direction > 0 else '-'}"
        f"(P(original) - P(masked))); raw AUROC of the monitor on these samples "
        f"{_fmt(s['auroc_raw'])}" + ("" if st["direction"] != "auto" else
                                     f", on the calib split {_fmt(s['calib_auroc_raw'])}")
        + f". Occlusion spans: the top {st['top_k']} units with a positive score; units: "
        f"auto segmentation capped at {st['max_segments']} (mean {_fmt(c['units_per_sample'], 1)}"
        f" per sample, {c['samples_with_merged_units']} samples merged). Random floors: "
        "`random (as occlusion)` draws as many units per sample as occlusion predicts from the "
        "same units; `random (as quotes)` (and as copy quotes, as token head) as many auto "
        "segments as the method predicts. `copy quotes` rank in the order the model wrote "
        "them, `(by drop)` by the drop of the monitor's confidence when the quote is masked.",
        "",
        "## By category", "", to_markdown(study.reports, by="category", metrics=METRICS),
        "## By task", "", to_markdown(study.reports, by="task", metrics=METRICS),
        "## By source", "", to_markdown(study.reports, by="source", metrics=METRICS),
        "## By cell", "", to_markdown(study.reports, by="cell", metrics=METRICS),
    ]
    q = study.reports.get("quotes")
    if q is not None:
        o = q.overall
        lines += ["## Quotes", "",
                  f"Quote readings: {c['quote_status']}; quotes taken from the evidence list "
                  f"of verdicts whose boolean did not parse: "
                  f"{c['quotes_from_unparsed_verdicts']}. Quotes: {o.n_quotes}, ungrounded: "
                  f"{o.n_ungrounded}, **ungrounded-quote rate {_fmt(o.ungrounded_rate)}**; "
                  f"grounding statuses {c['grounding']}.", ""]
    cq = study.reports.get("copy quotes")
    if cq is not None:
        o = cq.overall
        lines += [f"Copy-constrained quotes: {o.n_quotes}, ungrounded: {o.n_ungrounded}, "
                  f"**ungrounded-quote rate {_fmt(o.ungrounded_rate)}** (grounded by "
                  "construction: each is a run of the response's own tokens).", ""]
    lines += _quote_cost(cost.get("quotes") or {})
    lines += ["## Cost", "",
              "Tokens after the shared template prefix. One scoring pass = the misbehaving "
              "originals once.", "",
              "| quantity | value |", "|---|---|",
              f"| masked variants | {cost['variants']} |",
              f"| tokens, one scoring pass | {cost['tokens_one_pass']} |",
              f"| tokens, variants run plainly | {cost['tokens_variants_plain']} "
              f"({_fmt(cost['multiple_plain'], 2)}x) |",
              f"| tokens, variants with per-sample prefix sharing | "
              f"{cost['tokens_variants_shared']} ({_fmt(cost['multiple_shared'], 2)}x) |",
              f"| seconds, originals scored in this run | {_fmt(cost['seconds_originals'], 1)} "
              f"({cost['originals_scored']} samples) |",
              f"| seconds, variants in this run | {_fmt(cost['seconds_variants'], 1)} |",
              f"| measured multiple (seconds per misbehaving sample, variants / one pass) | "
              f"{_fmt(cost.get('measured_multiple'), 2)} |", ""]
    return "\n".join(lines) + "\n"


def _quote_cost(q: dict[str, Any]) -> list[str]:
    """The per-sample cost of each quote method, as its readings recorded it."""
    if not q:
        return []
    out = ["Quote generation, mean per misbehaving sample (from the readings; seconds are this "
           "machine's, tokens exact):", "",
           "| method | decoding | samples | seconds | tokens computed |", "|---|---|---|---|---|"]
    names = {"free": ("free quotes", "unconstrained greedy JSON (prompt + generated tokens)"),
             "copy": ("copy quotes", "copy-constrained greedy (prompt once per quote + quote "
                      "tokens)")}
    for k, (name, how) in names.items():
        if k in q:
            out.append(f"| {name} | {how} | {q[k]['samples']} | {_fmt(q[k]['seconds'], 2)} | "
                       f"{_fmt(q[k]['tokens'], 0)} |")
    return out + [""]
