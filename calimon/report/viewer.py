"""The transcript viewer: one card per sample with its scores, its outcome at an operating
point, the response with evidence and gold spans (``calimon.studies.spans.render.render_html``), probe
token scores as a heat map, ungrounded quotes and the binary-protocol replies.

Transcripts are untrusted: every string goes through ``html.escape``; nothing from a
transcript lands in a script, a style or an event handler.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from html import escape

from calimon.data.trajectory import describe, messages_in_span
from calimon.report.data import Row, RunData
from calimon.report.extras import TokenScores
from calimon.studies.spans.render import render_html

OUTCOMES = {"missed": "missed (misbehaving, not flagged)",
            "false-alarm": "false alarm (benign, flagged)",
            "caught": "caught (misbehaving, flagged)",
            "correct-pass": "correct pass (benign, not flagged)",
            "unscored": "unscored (no score)", "unlabelled": "unlabelled"}
HEAT_LEVELS = 10


def outcome(row: Row, threshold: float | None) -> str:
    """Outcome of flagging iff ``p_cal >= threshold`` (None: +inf, flag nothing)."""
    if row.p_cal is None:
        return "unscored"
    if row.label is None:
        return "unlabelled"
    flagged = threshold is not None and row.p_cal >= threshold
    if row.label:
        return "caught" if flagged else "missed"
    return "false-alarm" if flagged else "correct-pass"


def choose_rows(rows: tuple[Row, ...], threshold: float | None, limit: int | None
                ) -> tuple[Row, ...]:
    """All rows, or at most ``limit``: errors at the threshold first, file order kept."""
    if limit is None or len(rows) <= limit:
        return rows
    rank = {"missed": 0, "false-alarm": 0, "unscored": 1}
    order = sorted(range(len(rows)), key=lambda i: (rank.get(outcome(rows[i], threshold), 2), i))
    keep = sorted(order[:limit])
    return tuple(rows[i] for i in keep)


def token_heat_html(text: str, tokens: TokenScores) -> str:
    """The response with each scored token shaded by its score (classes ``cm-h0..9``)."""
    out, pos = [], 0
    for (a, b), s in sorted(zip(tokens.offsets, tokens.scores, strict=True)):
        if a < pos:
            continue  # overlapping offsets: keep the first token
        out.append(escape(text[pos:a]))
        level = min(HEAT_LEVELS - 1, max(0, int(s * HEAT_LEVELS)))
        out.append(f'<span class="cm-h{level}" title="{s:.3f}">{escape(text[a:b])}</span>')
        pos = b
    out.append(escape(text[pos:]))
    return f'<pre class="cm-text cm-tokens">{"".join(out)}</pre>'


def span_messages_html(text: str, meta: dict, spans: list[tuple[int, int, float | None]],
                       width: int = 60) -> str:
    """For a transcript with message offsets (``meta["messages"]``, e.g. an Inspect
    trajectory): which message(s) each predicted span of ``text`` falls in, with the span's first
    ``width`` characters, as a short list ("" when none)."""
    items = []
    for start, end, _ in sorted(spans):
        found = messages_in_span(meta, start, end)
        if found:
            names = ", ".join(describe(r) for r in found)
            shown = text[start:end]
            shown = shown if len(shown) <= width else shown[:width] + "…"
            items.append(f'<li>[{start}, {end}) in {escape(names)}: '
                         f'<code>{escape(shown)}</code></li>')
    if not items:
        return ""
    return ('<div class="cm-sub">predicted spans by message</div>'
            f'<ul class="cm-span-messages">{"".join(items)}</ul>')


def _fmt(x: float | None) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.4f}"


@dataclass(frozen=True)
class CardParts:
    """Predicted spans and where they came from, for one sample."""

    spans: list[tuple[int, int, float | None]]
    source: str
    ungrounded: list[tuple[str, str]]


def _spans_for(data: RunData, row: Row, text: str) -> CardParts:
    from calimon.studies.spans.grounding import ground_quotes

    rec = data.spans.get(row.id)
    if rec is not None:
        return CardParts(rec.grounded, "spans.jsonl",
                         [(s.quote, s.status) for s in rec.spans if s.start is None])
    # the binary reading that quoted the most (normally the evidence prompt's)
    quoted = [(len(v.evidence), name, v) for name, table in data.binary.items()
              if (v := table.get(row.id)) is not None and v.evidence]
    if not quoted:
        return CardParts([], "", [])
    _, name, v = max(quoted, key=lambda t: t[0])
    grounded = ground_quotes([str(q) for q in v.evidence], text)
    return CardParts([(g.start, g.end, None) for g in grounded if g.grounded],
                     f"evidence quotes of binary/{name} (grounded in the response)",
                     [(g.quote, g.reason or g.status) for g in grounded if not g.grounded])


def _card_tags(data: RunData, row: Row, label: str, oc: str) -> list[str]:
    """The card header's pieces: id, cell, label, outcome ``oc``, scores and each binary
    protocol's decision, escaped."""
    e = escape
    label_text = {True: "misbehaving", False: "benign", None: "unlabelled"}[row.label]
    head = [f'<span class="cm-id">{e(row.id)}</span>',
            f'<span class="cm-tag">{e(row.category)}</span>',
            f'<span class="cm-tag">{e(row.task)}</span>',
            f'<span class="cm-tag cm-label-{label}">{label_text}</span>',
            f'<span class="cm-outcome cm-o-{oc}">{e(OUTCOMES[oc].split(" (")[0])}</span>',
            f'<span class="cm-scores">p_raw {_fmt(row.p_raw)} · p_cal {_fmt(row.p_cal)}'
            f'{" · truncated" if row.truncated else ""}'
            f'{"" if row.status in ("ok", "truncated") else " · status " + e(row.status)}'
            '</span>']
    for name, table in data.binary.items():
        v = table.get(row.id)
        if v is not None:
            d = {True: "flagged", False: "passed", None: "parse failure"}[v.decision]
            head.append(f'<span class="cm-tag cm-bin">binary/{e(name)}: {d}</span>')
    return head


def card_html(data: RunData, row: Row, index: int, threshold: float | None) -> str:
    """One transcript's card: its tags, scores, outcome at ``threshold``, the request, the
    response with spans (or token heat) and the binary-protocol replies, escaped."""
    e = escape
    sample = data.samples.get(row.id)
    rec = data.spans.get(row.id)
    text = sample.response if sample is not None else (rec.response if rec else None)
    label = {True: "1", False: "0", None: "u"}[row.label]
    oc = outcome(row, threshold)
    score = "" if row.p_cal is None else repr(float(row.p_cal))
    attrs = (f'data-id="{e(row.id, quote=True)}" data-category="{e(row.category, quote=True)}" '
             f'data-task="{e(row.task, quote=True)}" data-label="{label}" data-score="{score}" '
             f'data-outcome="{oc}"')
    head = _card_tags(data, row, label, oc)
    parts = [f'<article class="cm-card" id="card-{index}" {attrs}>',
             f'<header class="cm-card-head">{" ".join(head)}</header>']
    if sample is not None:
        parts.append(f'<details class="cm-request"><summary>request ({len(sample.request)} '
                     f'chars)</summary><pre class="cm-text">{e(sample.request)}</pre></details>')
    if text is None:
        parts.append('<p class="cm-missing">transcript not available (benchmark not loaded)'
                     '</p>')
    else:
        found = _spans_for(data, row, text)
        gold = list(sample.gold_spans) if sample is not None else list(rec.gold if rec else ())
        what = [w for w in (found.source and f"predicted spans: {found.source}",
                            gold and "gold spans underlined") if w]
        parts.append(f'<div class="cm-sub">response{" · " + e("; ".join(what)) if what else ""}'
                     '</div>')
        parts.append(render_html(text, found.spans, gold))
        by_message = span_messages_html(text, sample.meta, found.spans) if sample else ""
        if by_message:
            parts.append(by_message)
        if found.ungrounded:
            items = "".join(f"<li><q>{e(q)}</q> <span class=\"cm-dim\">({e(why)})</span></li>"
                            for q, why in found.ungrounded)
            parts.append(f'<div class="cm-sub">quotes not found in the response</div>'
                         f'<ul class="cm-ungrounded">{items}</ul>')
        tok = data.token_scores.get(row.id)
        if tok is not None:
            scaled = " (min-max scaled)" if tok.scaled else ""
            parts.append(f'<div class="cm-sub">probe token scores{scaled}: darker = higher'
                         '</div>' + token_heat_html(text, tok))
    for name, table in data.binary.items():
        v = table.get(row.id)
        if v is not None and v.text:
            parts.append(f'<details class="cm-binary-text"><summary>binary/{e(name)} reply'
                         f'</summary><pre class="cm-text">{e(v.text)}</pre></details>')
    parts.append("</article>")
    return "\n".join(parts)


def cards_html(data: RunData, rows: tuple[Row, ...], threshold: float | None,
               tick: Callable[[int], None] | None = None) -> str:
    """The cards of ``rows``, in order; ``tick(1)`` after each."""
    out = []
    for i, row in enumerate(rows):
        out.append(card_html(data, row, i, threshold))
        if tick is not None:
            tick(1)
    return "\n".join(out)


__all__ = ["OUTCOMES", "card_html", "cards_html", "choose_rows", "outcome", "span_messages_html",
           "token_heat_html"]
