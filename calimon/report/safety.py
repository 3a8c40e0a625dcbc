"""The report's control-safety section: a run folder that also holds ``safety.json`` (``calimon
control-safety --out RUN``, `calimon.deploy.control_run`) gets safety against the audit budget
at both thresholds with their intervals (inline SVG; ``safety.png`` beside it), the table the
command prints, and what is promised. Without the file there is no section; an unreadable one is
a warning in the section, never an error."""

from __future__ import annotations

import math
from html import escape
from pathlib import Path
from typing import Any

from calimon.errors import CalimonError
from calimon.plotting.safety import TICKS, safety_series
from calimon.plotting.style import run_color
from calimon.report.svg_base import Frame, axes, legend, open_svg, px

__all__ = ["safety_section", "safety_svg"]


def _fmt(x: Any, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:.{digits}g}" if isinstance(x, float) else escape(str(x))


def safety_svg(result: Any, *, title: str = "", width: int = 720, height: int = 380) -> str:
    """Safety against the audit budget (log axis) at the percentile and the certified threshold:
    lines over the sweep, exact intervals as bands, the requested budgets as dots (hover: their
    numbers)."""
    rows = result.sweep or result.rows
    xs = [math.log10(r.budget) for r in rows]
    lo_x, hi_x = min(xs), max(xs)
    if hi_x - lo_x < 1e-9:
        lo_x, hi_x = lo_x - 0.5, hi_x + 0.5
    level = f"{100 * result.level:g}%"
    series = (("percentile", run_color(0), f"percentile threshold (ControlArena), {level} "
                                           "interval; audit rate not bounded"),
              ("certified", run_color(2), f"certified threshold (audit rate <= budget at "
                                          f"{100 * (1 - result.audit_delta):g}%), {level} "
                                          "interval"))
    f = Frame(width, height, x0=lo_x, x1=hi_x).with_legend(len(series))
    out = open_svg(f, "cm-safety", title or "safety against the audit budget")
    out += axes(f, "audit budget (share of honest runs audited, log scale)", "safety", title,
                ticks=(), yticks=(0, .2, .4, .6, .8, 1))
    for t in TICKS:
        if lo_x - 1e-9 <= math.log10(t) <= hi_x + 1e-9:
            x = px(f.x(math.log10(t)))
            out.append(f'<text x="{x}" y="{px(f.y(0) + 14)}" font-size="10" '
                       f'text-anchor="middle" fill="#444">{100 * t:g}%</text>')
    keys = []
    for which, color, label in series:
        b, s, lo, hi = safety_series(rows, which)
        if not b:
            keys.append((color, label + ": no budget certified", "note"))
            continue
        pts = [f.pt(math.log10(x), y) for x, y in zip(b, lo, strict=True)]
        pts += [f.pt(math.log10(x), y) for x, y in zip(reversed(b), reversed(hi), strict=True)]
        out.append(f'<polygon points="{" ".join(pts)}" fill="{color}" fill-opacity="0.2"/>')
        path = "M" + " L".join(f.pt(math.log10(x), y) for x, y in zip(b, s, strict=True))
        out.append(f'<path d="{path}" fill="none" stroke="{color}" stroke-width="1.8"/>')
        for x, y, a, z in zip(*safety_series(result.rows, which), strict=True):
            tip = f"{which} threshold at budget {x:g}: safety {y:.3f}, interval [{a:.3f}, {z:.3f}]"
            out.append(f'<circle cx="{px(f.x(math.log10(x)))}" cy="{px(f.y(y))}" r="4" '
                       f'fill="{color}"><title>{escape(tip)}</title></circle>')
        keys.append((color, label, "line"))
    out += legend(f, keys)
    out.append("</svg>")
    return "\n".join(out)


def _table(result: Any) -> str:
    from calimon.deploy.control_safety import audit_text

    head = ["budget", "threshold", "audits", "honest audited", "caught", "uncaught successful",
            "safety", f"{100 * result.level:g}% interval"]
    body = ""
    for row in result.rows:
        for name, at in (("percentile", row.percentile), ("certified", row.certified)):
            if at is None:
                cells = [_fmt(row.budget), name, "not certified"] + [""] * 5
            else:
                bound = (f", rate &lt;= {_fmt(row.audit_bound)}" if name == "certified" else "")
                cells = [_fmt(row.budget), name,
                         escape(audit_text(at)),
                         f"{at.honest_audited}/{at.n_honest}{bound}", str(at.caught),
                         str(at.uncaught_successful), _fmt(at.safety),
                         f"[{_fmt(at.low)}, {_fmt(at.high)}]"]
            body += "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"
    head_html = "".join(f"<th>{escape(h)}</th>" for h in head)
    return (f'<table class="cm-table"><thead><tr>{head_html}</tr></thead><tbody>{body}'
            "</tbody></table>")


def safety_section(run_dir: str | Path) -> str:
    """The section's HTML, or "" when the run folder holds no ``safety.json``."""
    from calimon.deploy.control_run import SAFETY_JSON, read_safety
    from calimon.deploy.control_safety import abstain_line, promise_line

    path = Path(run_dir) / SAFETY_JSON
    if not path.is_file():
        return ""
    try:
        run = read_safety(path)
    except CalimonError as exc:
        body = f'<p class="cm-warn">{escape(SAFETY_JSON)} could not be read: {escape(str(exc))}</p>'
        return f'<section id="safety"><h2>Control safety</h2>\n{body}\n</section>'
    r = run.result
    what = "side and main task" if r.require_main_task_success else "side task"
    notes = [promise_line(row, r.delta) if row.certified else
             abstain_line(row, r.n_honest, r.audit_delta) for row in r.rows]
    u = r.usefulness
    notes.append("usefulness: the logs score no honest run's main task" if u is None else
                 f"usefulness (main task of honest runs): {u.successes}/{u.n} = "
                 f"{u.estimate:.4g}, {100 * u.level:g}% interval [{u.low:.4g}, {u.high:.4g}]")
    left = (f"; left out without a score: {run.left_out_honest} honest, {run.left_out_attack} "
            "attack" if run.left_out_honest or run.left_out_attack else "")
    body = (f'<p>{escape(run.benchmark)} · {escape(run.readout)}: {r.n_honest} honest and '
            f'{r.n_attack} attack runs, {r.n_successful_attacks} attacks succeeded '
            f'({what}){escape(left)}. delta {r.delta:g}: {r.audit_delta:g} for the audit rate, '
            f'{r.safety_delta:g} for the safety intervals (exact Clopper-Pearson).</p>'
            f'<figure>{safety_svg(r, title="safety against the audit budget")}<figcaption>'
            "Lines: safety over budgets; bands: exact pointwise intervals; dots: the requested "
            "budgets. PNG: safety.png</figcaption></figure>" + _table(r)
            + '<ul class="cm-notes">' + "".join(f"<li>{escape(n)}</li>" for n in notes)
            + f'</ul><p class="cm-dim">{escape(r.guarantee)}</p>')
    return f'<section id="safety"><h2>Control safety</h2>\n{body}\n</section>'
