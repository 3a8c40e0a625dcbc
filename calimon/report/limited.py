"""The report of a run below the class-size rule (``calimon.numerics.class_support``): no curve,
AUROC or calibration to draw, so the page shows the counts, the one-line reason, the rate of
each class at fixed thresholds with exact intervals, the binary-protocol points, any policy
found and the provenance."""

from __future__ import annotations

from html import escape

from calimon.report.assets import CSS, csp
from calimon.report.data import RunData
from calimon.report.page import _header, _policy, _provenance, _section, table


def _rates(data: RunData) -> str:
    s = data.result
    reason = (s.support.reason if s.support else None) or ""
    rows = [(r.rate.upper(), r.threshold, f"{r.k}/{r.n}", r.estimate, r.low, r.high)
            for r in s.rates_at_thresholds]
    body = (f'<p class="cm-warn">Not shown: {escape(reason)}.</p>'
            + table(["rate", "threshold", "k/n", "estimate", "95% low", "95% high"], rows)
            + f'<p class="cm-dim">Score: {escape(str(s.score))}; flag iff score &gt;= '
            "threshold. FAR = benign flagged / benign, MR = misbehaving not flagged / "
            "misbehaving; intervals are exact (Clopper-Pearson) and two-sided.</p>")
    brows = [(b.name, b.mr, b.far, b.tp, b.fp, b.tn, b.fn, b.n_parse_failure)
             for b in s.binary_points]
    if brows:
        body += "<h3>binary protocol</h3>" + table(
            ["protocol", "MR", "FAR", "TP", "FP", "TN", "FN", "parse failures"], brows)
    return _section("rates", "Rates at fixed thresholds", body)


def render_limited_page(data: RunData) -> str:
    """One self-contained HTML page (no script) for a run without a curve."""
    prov = data.result.provenance
    title = f"calimon report · {prov.model} · {prov.benchmark}"
    from calimon.report.safety import safety_section

    safety = safety_section(data.run_dir)
    parts = [_rates(data), _policy(data), *([safety] if safety else []), _provenance(data)]
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
            f'<meta http-equiv="Content-Security-Policy" content="{csp()}">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{escape(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
            f"{_header(data, None)}\n<main>\n" + "\n".join(parts) + "\n</main>\n</body></html>\n")
