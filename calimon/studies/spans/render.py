"""Show a transcript with its predicted and gold spans: ANSI/plain text, or an HTML fragment.

Spans may overlap or nest: the text is cut at every span boundary and each piece is marked
``pred`` (inside a predicted span only), ``gold`` (inside a gold span only) or ``both``; a
piece inside several predicted spans carries the highest of their scores. Transcripts are
untrusted: HTML output escapes everything, terminal output escapes control characters (a
transcript cannot move the cursor, retitle the terminal or reorder text with bidi controls).
"""

from __future__ import annotations

import html
import math
import os
import re
import sys
from collections.abc import Iterable
from typing import Any

from calimon.numerics.span_metrics import as_scored_spans, ranked

Piece = tuple[int, int, str | None, float | None]

PLAIN = {"pred": ("[[", "]]"), "gold": ("{{", "}}"), "both": ("<<", ">>")}
ANSI = {"pred": "\x1b[30;43m", "gold": "\x1b[4;32m", "both": "\x1b[30;42m"}
RESET = "\x1b[0m"
LABELS = {"pred": "predicted", "gold": "gold", "both": "both"}
HTML_STYLE = """\
.calimon-spans pre { white-space: pre-wrap; word-wrap: break-word; }
.calimon-spans mark.pred { background: #ffe08a; }
.calimon-spans mark.gold { background: none; border-bottom: 2px solid #2a9d4b; }
.calimon-spans mark.both { background: #9be3b0; border-bottom: 2px solid #2a9d4b; }
.calimon-spans .calimon-spans-legend mark { padding: 0 .3em; }
"""

_UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def pieces(text: str, spans: Iterable[Any], gold: Iterable[Any] = ()) -> list[Piece]:
    """Cut ``text`` at every span boundary: (start, end, class or None, score or None)."""
    pred = as_scored_spans(spans, text_len=len(text), name="spans")
    gold_spans = as_scored_spans(gold, text_len=len(text), name="gold")
    cuts = sorted({0, len(text)} | {x for s in (*pred, *gold_spans) for x in (s.start, s.end)})
    out: list[Piece] = []
    for a, b in zip(cuts, cuts[1:], strict=False):
        if a == b:
            continue
        covering = [s for s in pred if s.start <= a and b <= s.end]
        in_gold = any(s.start <= a and b <= s.end for s in gold_spans)
        cls = ("both" if in_gold else "pred") if covering else ("gold" if in_gold else None)
        scores = [s.score for s in covering if s.score is not None]
        out.append((a, b, cls, max(scores) if scores else None))
    return out


def _safe(chunk: str) -> str:
    chunk = chunk.replace("\r\n", "\n")
    return _UNSAFE.sub(lambda m: ascii(m.group())[1:-1], chunk)


def _paint(chunk: str, code: str) -> str:
    # colour each line on its own, so a background does not bleed past a line break
    return "\n".join(code + line + RESET if line else line for line in chunk.split("\n"))


def _use_color(color: bool | None) -> bool:
    if color is not None:
        return color
    return sys.stdout.isatty() and "NO_COLOR" not in os.environ


def _format_score(score: float) -> str:
    return "nan" if math.isnan(score) else f"{score:.4g}"


def render_terminal(text: str, spans: Iterable[Any], gold: Iterable[Any] = (), *,
                    color: bool | None = None, show_scores: bool = True) -> str:
    """The text with spans highlighted, a legend line and (optionally) the ranked spans.

    ``color=None`` colours when stdout is a terminal and NO_COLOR is unset; without colour the
    markers are ``[[predicted]]``, ``{{gold}}`` and ``<<both>>``."""
    spans = as_scored_spans(spans, text_len=len(text), name="spans")
    use = _use_color(color)
    out = []
    for a, b, cls, _ in pieces(text, spans, gold):
        chunk = _safe(text[a:b])
        if cls is None:
            out.append(chunk)
        elif use:
            out.append(_paint(chunk, ANSI[cls]))
        else:
            out.append(PLAIN[cls][0] + chunk + PLAIN[cls][1])
    if use:
        legend = " ".join(ANSI[c] + LABELS[c] + RESET for c in ANSI)
    else:
        legend = " ".join(PLAIN[c][0] + LABELS[c] + PLAIN[c][1] for c in PLAIN)
    lines = ["".join(out), "", "legend: " + legend]
    if show_scores:
        for rank, s in enumerate(ranked(spans), start=1):
            score = "-" if s.score is None else _format_score(s.score)
            snippet = _safe(" ".join(text[s.start:s.end].split()))
            snippet = snippet if len(snippet) <= 60 else snippet[:57] + "..."
            lines.append(f"{rank:>3}. [{s.start}, {s.end}) score={score}  {snippet}")
    return "\n".join(lines) + "\n"


def render_html(text: str, spans: Iterable[Any], gold: Iterable[Any] = (),
                title: str = "") -> str:
    """An HTML fragment: ``<mark class="pred|gold|both" data-score=...>``; everything escaped.
    Its legend names the kinds of mark drawn, and is left out when none is.

    Style it with :data:`HTML_STYLE` (the report includes it once per page)."""
    body, drawn = [], set()
    for a, b, cls, score in pieces(text, spans, gold):
        drawn.add(cls)
        chunk = html.escape(text[a:b], quote=True)
        if cls is None:
            body.append(chunk)
            continue
        attrs = f' class="{cls}"'
        if score is not None:
            shown = _format_score(score)
            attrs += f' data-score="{shown}" title="score {shown}"'
        body.append(f"<mark{attrs}>{chunk}</mark>")
    head = (f'<div class="calimon-spans-title">{html.escape(title, quote=True)}</div>\n'
            if title else "")
    legend = " ".join(f'<mark class="{c}">{LABELS[c]}</mark>' for c in PLAIN if c in drawn)
    legend = f'<div class="calimon-spans-legend">{legend}</div>\n' if legend else ""
    return (f'<div class="calimon-spans">\n{head}'
            f'<pre class="calimon-spans-text">{"".join(body)}</pre>\n{legend}</div>\n')


__all__ = ["HTML_STYLE", "pieces", "render_html", "render_terminal"]
