"""``calimon compare --html FILE``: the comparison as one self-contained HTML page, built from
the report's pieces (its CSS and Content-Security-Policy, its tables, its inline-SVG curve
figure). No script, nothing loaded from anywhere."""

from __future__ import annotations

import datetime as dt
from html import escape
from typing import Any

from calimon import __version__
from calimon.report.assets import CSS, csp
from calimon.report.page import _section, table
from calimon.report.svg import curve_svg


def _figure(c: Any) -> str:
    series = [(r.label, r.curve) for r in c.runs if r.curve is not None]
    points = [{**b.to_dict(), "name": f"{r.label}: {b.name.removeprefix('binary/')}"}
              for r in c.runs if r.curve is not None for b in r.binary]
    if not series:
        return '<p class="cm-warn">No run has a curve to draw.</p>'
    svg = curve_svg(series, binary_points=points, title="calibrated curve of each run",
                    width=620, height=560)
    cap = ("Each run's calibrated MR/FAR curve with its bootstrap band; diamonds: its "
           "binary (generated JSON) protocol points, bars spanning parse failures counted as "
           "passed to counted as flagged. Runs without a curve are listed below, not drawn. "
           "PNG: compare.png")
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
