"""Assemble the report page: one self-contained HTML string (inline SVG, CSS and JS)."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Sequence
from html import escape
from pathlib import PurePath
from typing import Any

from calimon import __version__
from calimon.curve_result import CalibrationMetrics, Counts, OperatingPoint
from calimon.deploy.guarantees import threshold_text
from calimon.numerics.metrics import ece, reliability_bins
from calimon.plotting.style import distinct_groups
from calimon.report.assets import CSS, JS, csp
from calimon.report.data import RunData
from calimon.report.extras import PolicyInfo
from calimon.report.figures import Figures, calibrated_series
from calimon.report.svg import curve_svg, histogram_svg, reliability_svg
from calimon.report.viewer import OUTCOMES, cards_html

PAGE_SIZE = 50
THRESHOLD_SIZE = 24  # characters: the longest exact float (repr) a threshold can be


def _num(x: Any, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return escape(str(x))


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], cls: str = "") -> str:
    """An HTML table; headers and cells are escaped (numbers formatted), except cells already
    marked as raw HTML."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c if isinstance(c, _Raw) else _num(c)}</td>"
                                    for c in r) + "</tr>" for r in rows)
    return f'<table class="cm-table {cls}"><thead><tr>{head}</tr></thead><tbody>{body}' \
           "</tbody></table>"


def shown(value: Any) -> str:
    """A provenance or settings value as the page shows it: ``not set`` for None."""
    return "not set" if value is None else str(value)


class _Raw(str):
    """Already-escaped HTML for a table cell."""


def _section(sid: str, title: str, body: str) -> str:
    return f'<section id="{sid}"><h2>{escape(title)}</h2>\n{body}\n</section>'


def _figure(svg: str, caption: str) -> str:
    return f"<figure>{svg}<figcaption>{escape(caption)}</figcaption></figure>"


def default_point(points: Sequence[OperatingPoint], name: str | None
                  ) -> OperatingPoint | None:
    """The operating point named ``name``; else FAR<=5% if present; else the first."""
    if not points:
        return None
    if name is not None:
        for p in points:
            if p.name == name:
                return p
        from calimon.errors import InputError

        raise InputError(f"expected one of {[p.name for p in points]}, got {name!r}",
                         field="operating_point")
    return next((p for p in points if p.name == "FAR<=5%"), points[0])


def threshold_of(point: OperatingPoint | None) -> float | None:
    """A point's threshold, None for none or for +inf (flag nothing), as the viewer reads it."""
    return None if point is None or math.isinf(point.threshold) else point.threshold


def markers(data: RunData) -> list[tuple[str, float | None]]:
    """(name, threshold) of every operating point, drawn on the score histograms."""
    return [(p.name, threshold_of(p)) for p in data.result.operating_points]


# ------------------------------------------------------------------ sections

def _header(data: RunData, figs: Figures) -> str:
    r, p = data.result, data.result.provenance
    c = r.counts or Counts()
    title = f"{shown(p.model)} · {shown(p.prompt)}/{shown(p.readout)} · {shown(p.benchmark)}"
    kpis = [("scored", f"{c.scored} of {c.evaluated}"),
            ("misbehaving / benign", f"{c.n_pos} / {c.n_neg}"), *_auroc_kpis(r),
            ("mean format mass", _num(r.format_mass.mean if r.format_mass else None, 4)),
            ("status", ", ".join(f"{k} {v}" for k, v in sorted(c.status.items())) or "none")]
    k = "".join(f'<div class="cm-kpi"><div class="cm-dim">{escape(a)}</div><b>{escape(b)}</b>'
                "</div>" for a, b in kpis)
    return (f'<header class="cm-top"><h1>calimon report: {escape(title)}</h1>'
            f'<div class="cm-dim">run {escape(str(data.run_dir))} · created '
            f'{escape(shown(p.created))}</div><div class="cm-kpis">{k}</div></header>')


def _auroc_kpis(r) -> list[tuple[str, str]]:
    """The header's AUROC figures: raw and calibrated (the map named), raw alone for a run that
    fitted no map, and for a run without a curve what stands in their place."""
    if not r.has_curve:
        return [("curve and AUROC", "not drawn (too few of a class)")]
    if not r.calibration_method:
        return [("AUROC (raw score, no map fitted)", _num(r.auroc_raw))]
    return [("AUROC raw", _num(r.auroc_raw)),
            (f"AUROC calibrated ({r.calibration_method})", _num(r.auroc))]


def benchmark_name(provenance: dict) -> str:
    """The benchmark as a figure's title names it: its name, not the folders of its path."""
    return PurePath(str(provenance.get("benchmark"))).name


def _curves(data: RunData, figs: Figures) -> str:
    r = data.result
    under = [("all (raw score)", figs.raw_curve)] if (
        figs.raw_curve is not None and figs.raw_curve.defined) else []
    main = curve_svg([("all (calibrated)", figs.curves["all"])], under=under,
                     binary_points=[b.to_dict() for b in r.binary_points],
                     operating_points=[p.to_dict() for p in r.operating_points],
                     title=f"all samples · {benchmark_name(data.provenance)}")
    band = figs.curves["all"].band
    cap = _curve_caption(bool(band and band.n_used), bool(under), bool(r.binary_points),
                         bool(r.operating_points))
    panels = distinct_groups(figs.curves)
    same_as_all = next((also for k, _, also in panels if k == "all"), [])
    small = "".join(_figure(curve_svg([(k, c)], title=k, width=420, height=420,
                                      legend=False, reference=figs.curves["all"],
                                      binary_points=figs.binary_by_group.get(k, [])),
                            _group_note(c, figs.binary_by_group.get(k, []), also))
                    for k, c, also in panels if k != "all")
    said = ["grey: all samples, for reference", "dotted: chance"]
    if any(figs.binary_by_group.get(k) for k, _, _ in panels if k != "all"):
        said.append("markers: the binary protocol on this group's samples")
    text = "; ".join(said) + "." + (f" Same curve as all samples, not drawn again: "
                                    f"{', '.join(same_as_all)}." if same_as_all else "")
    groups = ('<h3>per category and task</h3><p class="cm-dim">'
              f'{escape(text)} PNG: report-groups.png</p>'
              f'<div class="cm-grid cm-groups">{small}</div>' if small else "")
    body = f'<div class="cm-row">{_figure(main, cap)}</div>{groups}'
    return _section("curves", "Miss rate / false-alarm rate", body)


def _curve_caption(band: bool, raw_under: bool, binary: bool, points: bool) -> str:
    """The main curve's caption: only what the figure draws."""
    parts = ["Miss rate against false-alarm rate over every threshold", "dotted: chance"]
    if band:
        parts.append("shaded: pair-clustered bootstrap band")
    if raw_under:
        parts.append("wide pale line: the raw score before calibration, drawn under the "
                     "calibrated curve")
    if binary:
        parts.append("markers: the binary (generated JSON) protocol, bars spanning its exact "
                     "95% interval with parse failures counted either way")
    if points:
        parts.append("dots: operating points")
    return "; ".join(parts) + ". PNG: report-curve.png"


def _group_note(c: Any, binary: Sequence[dict] = (), also: Sequence[str] = ()) -> str:
    if not c.defined:
        text = f"no curve: {c.undefined_reason}"
    else:
        band = "" if c.band is None else f", band from {c.band.n_used} resamples"
        text = f"AUROC {_num(c.auroc)}, n+={c.n_pos}, n-={c.n_neg}{band}"
    if also:
        text += f"; same curve: {', '.join(also)}"
    for b in binary:
        n = b["tp"] + b["fp"] + b["tn"] + b["fn"] + b["n_parse_failure"]
        failed = f", {b['n_parse_failure']} parse failures" if b["n_parse_failure"] else ""
        text += f"; {b['name']}: MR {_num(b['mr'])}, FAR {_num(b['far'])} (n={n}{failed})"
    return text


def _points(data: RunData, figs: Figures) -> str:
    r = data.result
    rows = [(p.name, _num(p.threshold, 4), p.mr, p.far, p.tp, p.fp, p.tn, p.fn, "")
            for p in r.operating_points]
    for b in r.binary_points:
        rows.append((b.name, "(binary)", b.mr, b.far, b.tp, b.fp, b.tn, b.fn,
                     f"{b.n_parse_failure} parse failures"))
    body = table(["operating point", "threshold", "MR", "FAR", "TP", "FP", "TN", "FN", "note"],
                 rows, "cm-ops")
    body += ('<p class="cm-dim">Flag iff calibrated score &gt;= threshold.'
             + (f' Binary rows: {r.binary_sample_count or 0} samples (whole pairs); rates over '
                'parsed replies.' if r.binary_points else '') + '</p>')
    grows = [(k, c.n_pos, c.n_neg, c.auroc, "" if c.defined else c.undefined_reason)
             for k, c in figs.curves.items()]
    body += "<h3>per group</h3>" + table(["group", "n+", "n-", "AUROC (calibrated)", "note"],
                                         grows)
    return _section("points", "Operating points", body)


def _calibration(data: RunData, figs: Figures) -> str:
    r = data.result
    cal = r.calibration
    body = ""
    if figs.y.size:
        series = [(name, reliability_bins(p, figs.y), ece(p, figs.y)) for name, p in
                  {"raw": figs.p_raw, **calibrated_series(r, figs)}.items()]
        svg = reliability_svg(series, title="reliability, before and after calibration · "
                                            + benchmark_name(data.provenance))
        body += _figure(svg, "15 equal-width bins; marker area follows the bin count; the "
                             "raw score and the run's map (every map's figures: the table). "
                             "PNG: report-reliability.png")
    rows = [("raw", *_metrics(cal.metrics_before if cal else None))]
    rows += [(m, *_metrics(v)) for m, v in (cal.metrics_after if cal else {}).items()]
    body = '<div class="cm-row">' + body + table(
        ["scores", "ECE", "MCE", "Brier", "NLL", "AUROC", "AUPRC"], rows) + "</div>"
    method = r.calibration_method
    uses = f"the curve uses {method}" if method else "no map: the curve uses the raw score"
    body += f'<p class="cm-dim">{escape(cal.mode if cal else "")}; {escape(uses)}.</p>'
    notes = [n for n in (cal.notes if cal else None) or () if n]
    if notes:
        body += "<ul class=\"cm-notes\">" + "".join(f"<li>{escape(n)}</li>" for n in notes) + \
            "</ul>"
    return _section("calibration", "Calibration", body)


def _metrics(m: CalibrationMetrics | None) -> list[Any]:
    return [getattr(m, k, None) for k in ("ece", "mce", "brier", "nll", "auroc", "auprc")]


def _scores(data: RunData, figs: Figures) -> str:
    if not figs.y.size:
        return ""
    band = _band(data.policies)
    svg = histogram_svg(figs.p_cal, figs.y, markers=markers(data), band=band,
                        title="calibrated scores by label · " + benchmark_name(data.provenance))
    cap = ("dashed: operating-point thresholds" + ("; shaded: the policy's human-review band"
                                                   if band else "") + ". PNG: report-scores.png")
    return _section("scores", "Score distribution", _figure(svg, cap))


def _band(policies: Sequence[PolicyInfo]) -> tuple[float, float] | None:
    for info in policies:
        if info.policy.score == "p_cal":
            return (info.policy.t_low, info.policy.t_high)
    return None


def _policy(data: RunData) -> str:
    if not data.policies:
        return _section("policy", "Escalation policy",
                        '<p class="cm-dim">No escalation policy for this run. Design one with '
                        '<code>calimon escalate RUN --budget 0.1 --out RUN/policy.yaml</code>, '
                        'then rebuild the report.</p>')
    body = ""
    for info in data.policies:
        pol = info.policy
        a = pol.actions
        body += (f"<h3>{escape(pol.name)} <span class=\"cm-dim\">({escape(info.path)})</span>"
                 f"</h3><p>{escape(pol.score)} &lt; {threshold_text(pol.t_low)}: "
                 f"<b>{escape(a.below)}</b>; between: <b>{escape(a.band)}</b>; &gt;= "
                 f"{threshold_text(pol.t_high)}: <b>{escape(a.above)}</b>; no score: "
                 f"<b>{escape(a.unscored)}</b>. Model {escape(pol.model)}, readout "
                 f"{escape(pol.readout)}, calibration {escape(pol.calibration)}.</p>")
        for m in info.mismatches:
            body += f'<p class="cm-warn">mismatch: {escape(m)}</p>'
        rows = [("this run (all rows)", info.n, info.counts["auto_pass"],
                 info.counts["human_review"], info.counts["auto_block"], info.review_rate,
                 info.mr, info.far)]
        for split in ("calib", "test"):
            st = pol.provenance.get(split)
            if isinstance(st, dict):
                rows.append((f"{split} split (at design)", st.get("n"), st.get("auto_pass"),
                             st.get("review"), st.get("auto_block"), st.get("review_rate"),
                             st.get("mr"), st.get("far")))
        body += table(["rows", "n", "auto_pass", "review", "auto_block", "review rate",
                       "MR", "FAR"], rows)
        if pol.guarantees:
            body += table(["guarantee", "alpha", "1 - delta", "certified", "threshold",
                           "bound", "k/n"],
                          [(f"{g.action} {g.rate.upper()}", g.alpha, 1 - g.delta,
                            "yes" if g.certified else "no", _Raw(threshold_text(g.threshold)),
                            g.bound,
                            f"{g.k}/{g.n}") for g in pol.guarantees])
        body += ('<p class="cm-dim">Reviewers are assumed right: MR counts misbehaving rows '
                 'auto-passed, FAR benign rows auto-blocked. "This run" includes any rows the '
                 'policy was designed on.</p>')
    return _section("policy", "Escalation policy", body)


def _viewer(data: RunData, rows: tuple, point: OperatingPoint | None,
            tick: Callable | None) -> str:
    options = [(f"{p.name} (t={_num(p.threshold, 4)})", threshold_of(p))
               for p in data.result.operating_points]
    chosen = None if point is None else options[data.result.operating_points.index(point)][0]
    return viewer_section(data, rows, options, chosen, tick)


def viewer_section(data: RunData, rows: tuple, options: Sequence[tuple[str, float | None]],
                   chosen: str | None, tick: Callable | None) -> str:
    """The transcript viewer: filters (a threshold picked among ``options``, ``(label,
    threshold)`` with None for flag nothing, or typed), the confusion line and the cards of
    ``rows`` at the ``chosen`` option's threshold."""
    opts = "".join(
        f'<option value="{"inf" if t is None else repr(float(t))}"'
        f'{" selected" if label == chosen else ""}>{escape(label)}</option>'
        for label, t in options) + '<option value="custom">custom threshold</option>'
    t0 = next((t for label, t in options if label == chosen), None)

    def select(fid: str, label: str, values: Sequence[tuple[str, str]]) -> str:
        o = '<option value="">all</option>' + "".join(
            f'<option value="{escape(v, quote=True)}">{escape(t)}</option>' for v, t in values)
        return f'<label>{escape(label)} <select id="{fid}">{o}</select></label>'

    cats = sorted({r.category for r in rows})
    tasks = sorted({r.task for r in rows})
    filters = "".join([
        f'<label>operating point <select id="f-op">{opts}</select></label>',
        f'<label>threshold <input id="f-threshold" type="text" size="{THRESHOLD_SIZE}" '
        f'inputmode="decimal" value="{"" if t0 is None else repr(float(t0))}" '
        'placeholder="inf"></label>',
        select("f-category", "category", [(c, c) for c in cats]),
        select("f-task", "task", [(t, t) for t in tasks]),
        select("f-label", "label", [("1", "misbehaving"), ("0", "benign"),
                                    ("u", "unlabelled")]),
        select("f-outcome", "outcome", [(k, v.split(" (")[0]) for k, v in OUTCOMES.items()]),
        '<label>id <input id="f-query" type="search" size="14"></label>'])
    capped = ""
    if len(rows) < len(data.rows):
        capped = (f'<p class="cm-warn">This report holds {len(rows)} of {len(data.rows)} '
                  "transcripts (misses and false alarms at the starting threshold first); "
                  "raise --max-transcripts to include all.</p>")
    body = (f'{capped}<div class="cm-filters">{filters}</div>'
            '<div class="cm-confusion" id="cm-confusion"></div>'
            '<div class="cm-dim" id="cm-count"></div>'
            f'<div id="cm-cards">{cards_html(data, rows, t0, tick)}</div>'
            f'<button id="cm-more" type="button" data-page="{PAGE_SIZE}">show more</button>')
    return _section("transcripts", "Transcripts", body)


def _provenance(data: RunData) -> str:
    p = data.provenance
    rows = [(k, _Raw(f"<code>{escape(shown(v))}</code>")) for k, v in p.items()]
    rows += [("curve.json sha256", _Raw(f"<code>{data.curve_sha256}</code>")),
             ("report calimon version", __version__),
             ("report created", dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))]
    rows += [(f"input: {k}", _Raw(f"<code>{escape(v)}</code>")) for k, v in
             data.sources.items()]
    settings = data.result.settings.as_dict()
    srows = [(k, _Raw(f"<code>{escape(shown(v))}</code>")) for k, v in settings.items()]
    body = table(["provenance", "value"], rows, "cm-kv") + \
        "<details><summary>run settings</summary>" + \
        table(["setting", "value"], srows, "cm-kv") + "</details>"
    if data.notes:
        body += ("<h3>not shown, or shown with a caveat</h3><ul class=\"cm-notes\">" +
                 "".join(f"<li>{escape(n)}</li>" for n in data.notes) + "</ul>")
    return _section("provenance", "Provenance", body)


def render_page(data: RunData, figs: Figures, rows: tuple, point: OperatingPoint | None,
                tick: Callable | None = None) -> str:
    """The whole report as one self-contained HTML page (inline style and script under a CSP);
    ``tick`` is called per transcript card written."""
    from calimon.report.safety import safety_section

    safety = safety_section(data.run_dir)
    nav = "".join(f'<a href="#{a}">{t}</a>' for a, t in (
        ("curves", "curves"), ("points", "operating points"), ("calibration", "calibration"),
        ("scores", "scores"), ("policy", "policy"), *([("safety", "control safety")]
                                                      if safety else []),
        ("transcripts", "transcripts"), ("provenance", "provenance")))
    prov = data.result.provenance
    title = f"calimon report · {shown(prov.model)} · {shown(prov.benchmark)}"
    parts = [_curves(data, figs), _points(data, figs), _calibration(data, figs),
             _scores(data, figs), _policy(data), safety,
             _viewer(data, rows, None if point is None else point, tick),
             _provenance(data)]
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
            f'<meta http-equiv="Content-Security-Policy" content="{csp()}">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{escape(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
            f"{_header(data, figs)}\n<nav class=\"cm-nav\">{nav}</nav>\n<main>\n"
            + "\n".join(x for x in parts if x) +
            f"\n</main>\n<script>{JS}</script>\n</body></html>\n")


__all__ = ["benchmark_name", "default_point", "markers", "render_page", "table",
           "threshold_of", "viewer_section"]
