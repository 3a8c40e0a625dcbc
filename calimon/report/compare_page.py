"""``calimon compare --html FILE``: the comparison as one self-contained HTML page, built from
the report's pieces (its CSS and Content-Security-Policy, its tables, its inline-SVG curve
figure). No script, nothing loaded from anywhere."""

from __future__ import annotations

import datetime as dt
from html import escape
from typing import Any

from calimon import __version__
from calimon.plotting.style import MARKERS, run_color
from calimon.report.assets import CSS, csp
from calimon.report.page import _section, table
from calimon.report.svg import curve_svg


def _figure(c: Any) -> str:
    """Each run in its colour from ``run_color`` of its place among all runs (a run without a
    curve keeps its place), its binary points in the same colour, one marker per prompt:
    the same as compare.png."""
    series, colors, points, styles = [], [], [], []
    markers: dict[str, int] = {}
    for i, r in enumerate(c.runs):
        if r.curve is None:
            continue
        series.append((r.label, r.curve))
        colors.append(run_color(i))
        for b in r.binary:
            prompt = b.name.removeprefix("binary/")
            points.append({**b.to_dict(), "name": f"{r.label}: {prompt}"})
            k = markers.setdefault(prompt, len(markers))
            styles.append((run_color(i), MARKERS[k % len(MARKERS)]))
    if not series:
        return '<p class="cm-warn">No run has a curve to draw.</p>'
    svg = curve_svg(series, binary_points=points, title=c.title(), width=760,
                    height=680, colors=colors, binary_styles=styles)
    cap = ("Each run's calibrated MR/FAR curve with its bootstrap band, in the run's colour "
           "(as in compare.png); dotted: chance; markers: its binary (generated JSON) "
           "protocol points, one shape per prompt, bars spanning the exact 95% interval "
           "with parse failures counted either way. Runs without a curve are listed below, "
           "not drawn. PNG: compare.png")
    return f"<figure>{svg}<figcaption>{escape(cap)}</figcaption></figure>"


def render_compare_page(c: Any) -> str:
    """The page of ``c`` (a `calimon.report.compare.Comparison`): warnings, the figure, the
    leaderboard, the binary points, the runs without a curve and where each run was read
    from."""
    warn = "".join(f'<p class="cm-warn">warning: {escape(w)}</p>' for w in c.warnings)
    board = table(c.headers, c.table_rows())
    board += ('<p class="cm-dim">MR at the run\'s FAR&lt;=5% and FAR&lt;=10% operating points '
              "on the calibrated score; ECE after calibration (n/a: no map fitted); samples/s: "
              "transcripts the model scored per second of the scoring phase, model load "
              "included (n/a: not recorded, or every reading came from the store).</p>")
    parts = [warn, _section("curves", "Miss rate / false-alarm rate", _figure(c)),
             _section("leaderboard", "Leaderboard", board)]
    brows = c.binary_rows()
    if brows:
        parts.append(_section("binary", "Binary protocol", table(c.binary_headers, brows) +
                              '<p class="cm-dim">MR and FAR over parsed replies.</p>'))
    missing = c.no_curve_lines()
    if missing:
        parts.append(_section("no-curve", "Runs without a curve", "<ul class=\"cm-notes\">" +
                              "".join(f"<li>{escape(m)}</li>" for m in missing) + "</ul>"))
    sources = [(r.label, str(r.path), r.dataset_hash) for r in c.runs]
    sources.append(("compared", dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                    f"calimon {__version__}"))
    parts.append(_section("provenance", "Runs", table(["run", "folder", "dataset_hash"],
                                                      sources)))
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
            f'<meta http-equiv="Content-Security-Policy" content="{csp()}">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            "<title>calimon compare</title>\n"
            f"<style>{CSS}</style>\n</head>\n<body>\n"
            '<header class="cm-top"><h1>calimon compare: '
            f"{len(c.runs)} monitor run(s)</h1></header>\n<main>\n"
            + "\n".join(parts) + "\n</main>\n</body></html>\n")


__all__ = ["render_compare_page"]
