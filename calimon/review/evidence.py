"""The review page's evidence: the response with its segments marked, the evidence panel (the
segments strongest first, each with its precision and the message it falls in), the legend, and
the script that steps through them.

A piece of evidence (`calimon.serve.schemas.EvidenceSpan`) is a ``segment`` (ranked, with a
precision), a token-level span (``tokens``) or a quote. Segments are marked and listed; token
spans are marked too but shown only when the reviewer asks (the "token-level marks" box, key
``t``). Evidence recorded before segments existed (spans without a ``unit``) is shown as the
segments were, ranked by score. Keys: ``e`` the next segment, ``E`` the previous one, ``t`` the
token-level marks.

Precision colours (the legend): >= 0.6 strong, 0.3-0.6 medium, < 0.3 weak, none without a
precision map.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

e = html.escape
LEVELS = (("strong", 0.6, "precision ≥ 0.6"), ("medium", 0.3, "0.3 ≤ precision < 0.6"),
          ("weak", 0.0, "precision < 0.3"))
EXCERPT = 120


def level(precision: Any) -> str:
    """The legend's class of a precision (``none`` without one)."""
    if not isinstance(precision, int | float):
        return "none"
    return next(name for name, lo, _ in LEVELS if precision >= lo)


def _located(ev: dict[str, Any], text: str) -> tuple[int, int] | None:
    start, end = ev.get("start"), ev.get("end")
    if isinstance(start, int) and isinstance(end, int) and 0 <= start < end <= len(text):
        return start, end
    quote = str(ev.get("text") or "")
    at = text.find(quote) if quote else -1
    return (at, at + len(quote)) if at >= 0 else None


def split_evidence(evidence: Sequence[dict[str, Any]], text: str
                   ) -> tuple[list[dict[str, Any]], list[tuple[int, int]], list[str]]:
    """(the segments strongest first, each with ``start``/``end``/``precision``/``score``;
    the token-level spans; the quotes not found in the text)."""
    segs, toks, lost = [], [], []
    for ev in evidence:
        where = _located(ev, text)
        if where is None:
            if ev.get("text"):
                lost.append(str(ev["text"]))
            continue
        item = {**ev, "start": where[0], "end": where[1]}
        (toks if ev.get("unit") == "tokens" else segs).append(item)
    if not any(s.get("unit") == "segment" for s in segs):  # older evidence: rank by score
        segs = [*segs, *({**t, "unit": None} for t in toks)]
    segs.sort(key=lambda s: (s.get("unit") != "segment",
                             s["rank"] if isinstance(s.get("rank"), int) else 0,
                             -(s["score"] if isinstance(s.get("score"), int | float) else -1)))
    return segs, [(t["start"], t["end"]) for t in toks], lost


def marked(text: str, segs: Sequence[dict[str, Any]], toks: Sequence[tuple[int, int]],
           lo: int = 0, hi: int | None = None) -> str:
    """``text[lo:hi]`` escaped: each segment inside ``<mark class="ev seg ...">`` (its rank and
    precision level), each token-level span inside ``<span class="tok">``."""
    hi = len(text) if hi is None else hi
    cuts = {lo, hi} | {x for s in segs for x in (s["start"], s["end"]) if lo < x < hi}
    cuts |= {x for t in toks for x in t if lo < x < hi}
    cuts_sorted = sorted(cuts)
    out = []
    for a, b in zip(cuts_sorted, cuts_sorted[1:], strict=False):
        chunk = e(text[a:b])
        if any(t[0] <= a and b <= t[1] for t in toks):
            chunk = f'<span class="tok">{chunk}</span>'
        inside = [(k, s) for k, s in enumerate(segs) if s["start"] <= a and b <= s["end"]]
        if inside:
            k, s = inside[0]
            p = s.get("precision")
            sc = s.get("score")
            title = f"#{k + 1}" + (f", precision {p:.2f}" if isinstance(p, int | float) else "") \
                + (f", score {sc:.3g}" if isinstance(sc, int | float) else "")
            chunk = (f'<mark class="ev seg {level(p)}" data-rank="{k}" data-start="{a}" '
                     f'title="{title}">{chunk}</mark>')
        out.append(chunk)
    return "".join(out)


def legend_html() -> str:
    """The colours and the keys."""
    swatches = "".join(f'<span class="sw {name}">{e(what)}</span>' for name, _, what in LEVELS)
    return (f'<p class="legend">{swatches}<span class="sw none">no precision map</span>'
            '<span class="keys"><kbd>e</kbd>/<kbd>E</kbd> next/previous segment · '
            '<kbd>t</kbd> token-level marks</span></p>')


def panel_html(segs: Sequence[dict[str, Any]], where) -> str:
    """The evidence panel: the segments strongest first with their precision and the part of
    the transcript they fall in (``where(start)``, empty for a plain response)."""
    if not segs:
        return '<div class="evidence"><h3>Evidence</h3><p class="none">no evidence</p></div>'
    rows = []
    for k, s in enumerate(segs):
        p = s.get("precision")
        prec = f"{p:.2f}" if isinstance(p, int | float) else "—"
        snippet = " ".join(str(s.get("text") or "").split())
        snippet = snippet if len(snippet) <= EXCERPT else snippet[:EXCERPT - 1] + "…"
        part = where(s["start"])
        rows.append(f'<li data-rank="{k}" class="{level(p)}"><button type="button" '
                    f'class="go">#{k + 1}</button> <b class="prec">precision {prec}</b> '
                    f'{f"<small>{e(part)}</small> " if part else ""}'
                    f'<q>{e(snippet)}</q></li>')
    return (f'<div class="evidence"><h3>Evidence <small>strongest first</small></h3>'
            f'{legend_html()}<ol class="evidence-list">{"".join(rows)}</ol>'
            '<label class="tok-toggle"><input type="checkbox" class="show-tok"> token-level '
            'marks</label></div>')


EVIDENCE_JS = r"""
(() => {
  'use strict';
  function current() { return document.querySelector('section.item:not([hidden])'); }
  function step(d) {
    const sec = current();
    if (!sec) { return; }  // past the last item
    const list = Array.from(sec.querySelectorAll('.evidence-list li'));
    if (!list.length) { return; }
    const at = list.findIndex((li) => li.hasAttribute('aria-current'));
    go(sec, at < 0 ? (d > 0 ? 0 : list.length - 1) : (at + d + list.length) % list.length);
  }
  function go(sec, k) {
    sec.querySelectorAll('.evidence-list li').forEach((li) => {
      if (Number(li.dataset.rank) === k) { li.setAttribute('aria-current', 'true'); } else { li.removeAttribute('aria-current'); }
    });
    const marks = sec.querySelectorAll('mark.seg');
    marks.forEach((m) => m.classList.toggle('on', Number(m.dataset.rank) === k));
    const first = sec.querySelector('mark.seg[data-rank="' + k + '"]');
    if (first) { first.scrollIntoView({ block: 'center' }); }
    sec.dataset.segment = String(k);
  }
  function tokens(sec, on) {
    sec.querySelectorAll('.response').forEach((r) => r.classList.toggle('show-tokens', on));
    const box = sec.querySelector('.show-tok');
    if (box) { box.checked = on; }
  }
  document.addEventListener('keydown', (ev) => {
    const t = ev.target;
    if (t && (t.tagName === 'TEXTAREA' || t.tagName === 'INPUT' && t.type !== 'checkbox')) { return; }
    if (ev.ctrlKey || ev.metaKey || ev.altKey) { return; }
    if (ev.key === 'e') { ev.preventDefault(); step(1); }
    if (ev.key === 'E') { ev.preventDefault(); step(-1); }
    if (ev.key === 't') {
      ev.preventDefault();
      const sec = current();
      if (!sec) { return; }
      const r = sec.querySelector('.response');
      tokens(sec, !(r && r.classList.contains('show-tokens')));
    }
  });
  document.querySelectorAll('.evidence-list li').forEach((li) => li.addEventListener('click', () =>
    go(li.closest('section.item') || document, Number(li.dataset.rank))));
  document.querySelectorAll('.show-tok').forEach((box) => box.addEventListener('change', () =>
    tokens(box.closest('section.item') || document, box.checked)));
})();
"""

EVIDENCE_CSS = """
mark.seg { border-radius: 2px; padding: 0; }
mark.seg.strong { background: #ffb74d; border-bottom: 2px solid #c25e00; }
mark.seg.medium { background: #ffe082; border-bottom: 2px solid #c79a2b; }
mark.seg.weak { background: #fff3c4; border-bottom: 1px dashed #c7a94b; }
mark.seg.none { background: #ffd54f; border-bottom: 2px solid #c77700; }
mark.seg.on { outline: 2px solid #1f5fd6; outline-offset: 1px; }
.response .tok { text-decoration: none; }
.response.show-tokens .tok { text-decoration: underline 2px #b00020; text-underline-offset: 2px; }
.evidence { background: #fbfcfe; border: 1px solid #d5d9df; border-radius: 5px; padding: .3em .7em; margin: .5em 0; }
.evidence-list { margin: .2em 0; padding-left: 0; list-style: none; font-size: 13px; }
.evidence-list li { margin: .15em 0; padding: .1em .3em; border-radius: 3px; cursor: pointer; }
.evidence-list li[aria-current] { background: #e3ecff; }
.evidence-list li.strong .prec { color: #a04a00; } .evidence-list li.weak .prec { color: #777; }
.evidence-list q { font-family: ui-monospace, Menlo, Consolas, monospace; }
.evidence-list .go { font-size: 12px; padding: 0 .3em; }
.legend { font-size: 12px; display: flex; flex-wrap: wrap; gap: .3em .6em; align-items: center; margin: .2em 0; }
.legend .sw { padding: 0 .4em; border-radius: 2px; }
.legend .sw.strong { background: #ffb74d; } .legend .sw.medium { background: #ffe082; }
.legend .sw.weak { background: #fff3c4; } .legend .sw.none { background: #ffd54f; }
.tok-toggle { font-size: 12px; color: #555; }
"""

__all__ = ["EVIDENCE_CSS", "EVIDENCE_JS", "LEVELS", "legend_html", "level", "marked",
           "panel_html", "split_evidence"]
