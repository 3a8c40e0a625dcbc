"""The report of a run below the class-size rule (``calimon.numerics.class_support``): no curve,
AUROC or calibration to draw, so the page shows the counts, the one-line reason, the rate of
each class at fixed thresholds with exact intervals, the binary-protocol points, any policy
found, every transcript (the viewer, flagging at those fixed thresholds on the run's score) and
the provenance."""

from __future__ import annotations

from collections.abc import Callable
from html import escape

from calimon.report.assets import CSS, JS, csp
from calimon.report.data import RunData
from calimon.report.page import (
    _header,
    _policy,
    _provenance,
    _section,
    shown,
    table,
    viewer_section,
)


def _rates(data: RunData) -> str:
    s = data.result
    reason = (s.support.reason if s.support else None) or ""
    rows = [(r.rate.upper(), r.threshold, f"{r.k}/{r.n}", r.estimate, r.low, r.high)
            for r in s.rates_at_thresholds]
    body = (f'<p class="cm-warn">Not shown: {escape(reason)}.</p>'
            + table(["rate", "threshold", "k/n", "estimate", "95% low", "95% high"], rows)
            + f'<p class="cm-dim">Score: {escape(shown(s.score))}; flag iff score &gt;= '
            "threshold. FAR = benign flagged / benign, MR = misbehaving not flagged / "
            "misbehaving; intervals are exact (Clopper-Pearson) and two-sided.</p>")
    brows = [(b.name, b.mr, b.far, b.tp, b.fp, b.tn, b.fn, b.n_parse_failure)
             for b in s.binary_points]
    if brows:
        body += "<h3>binary protocol</h3>" + table(
            ["protocol", "MR", "FAR", "TP", "FP", "TN", "FN", "parse failures"], brows)
    return _section("rates", "Rates at fixed thresholds", body)


def thresholds(data: RunData) -> list[tuple[str, float]]:
    """The viewer's thresholds: the fixed ones the rates are read at, in order."""
    seen = dict.fromkeys(r.threshold for r in data.result.rates_at_thresholds)
    return [(f"{data.result.score or 'score'} >= {t:g}", t) for t in seen]


def render_limited_page(data: RunData, rows: tuple = (), tick: Callable | None = None) -> str:
    """One self-contained HTML page for a run without a curve; ``rows``: the transcripts the
    viewer shows, at the first of `thresholds` (``tick`` per card written)."""
    prov = data.result.provenance
    title = f"calimon report · {shown(prov.model)} · {shown(prov.benchmark)}"
    options = thresholds(data)
    viewer = viewer_section(data, rows, options, options[0][0] if options else None, tick) \
        if rows else ""
    from calimon.report.safety import safety_section

    safety = safety_section(data.run_dir)
    parts = [_rates(data), _policy(data), *([safety] if safety else []), viewer,
             _provenance(data)]
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
            f'<meta http-equiv="Content-Security-Policy" content="{csp()}">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{escape(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
            f"{_header(data, None)}\n<main>\n" + "\n".join(p for p in parts if p) +
            f"\n</main>\n<script>{JS}</script>\n</body></html>\n")
