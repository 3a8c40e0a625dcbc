"""``calimon report RUN``: one self-contained, offline HTML file per run, and its figures as PNG.

``build_report(run)`` reads the run folder (``gather``), draws the figures (inline SVG in the
page, PNG next to it) and writes ``report.html``: MR/FAR curves overall and per category and
task with bands and binary-protocol points, the operating-point table, reliability before and
after calibration, the score distribution, the escalation policy when one exists, a filterable
transcript viewer with evidence spans and probe token scores, and the run's provenance.
Anything optional that is absent is listed in the page instead (see ``calimon.report.data``).
See docs/report.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from calimon.errors import InputError
from calimon.progress import Progress
from calimon.report.data import RunData, gather

DEFAULT_MAX_TRANSCRIPTS = 2000


@dataclass(frozen=True)
class Report:
    """What ``build_report`` wrote."""

    html: Path
    pngs: tuple[Path, ...]
    n_rows: int
    n_transcripts: int
    operating_point: str | None
    notes: tuple[str, ...]
    viewer: str | None = None  # what the viewer flags at first: a point's name or a threshold
    has_curve: bool = True  # False below the class-size rule (calimon.report.limited)

    def to_dict(self) -> dict:
        """What was written as a JSON-ready dict (paths as strings, the HTML file's size in
        bytes)."""
        return {"html": str(self.html), "pngs": [str(p) for p in self.pngs],
                "bytes": self.html.stat().st_size, "n_rows": self.n_rows,
                "n_transcripts": self.n_transcripts, "operating_point": self.operating_point,
                "viewer": self.viewer, "has_curve": self.has_curve, "notes": list(self.notes)}


def build_report(run: str | Path, out: str | Path | None = None, *,
                 policies: list[str | Path] | None = None, spans: str | Path | None = None,
                 token_scores: str | Path | None = None, benchmark: str | None = None,
                 store: str | Path | None = None, operating_point: str | None = None,
                 max_transcripts: int | None = DEFAULT_MAX_TRANSCRIPTS,
                 progress: Progress | None = None) -> Report:
    """Write ``out`` (default ``RUN/report.html``) and the PNGs beside it; see the module doc.

    ``operating_point``: the viewer's initial threshold (a name from the operating-point table;
    default ``FAR<=5%`` when present). ``max_transcripts``: cap on transcript cards (None: all);
    when capped, misses and false alarms at that point are kept first.
    """
    from calimon.report.figures import Figures, write_pngs
    from calimon.report.page import _band, default_point, markers, render_page, threshold_of
    from calimon.report.viewer import choose_rows

    if max_transcripts is not None and (isinstance(max_transcripts, bool) or not isinstance(
            max_transcripts, int) or max_transcripts < 0):
        raise InputError(f"expected an integer >= 0 or None, got {max_transcripts!r}",
                         field="max_transcripts")
    data = gather(run, policies=policies, spans=spans, token_scores=token_scores,
                  benchmark=benchmark, store=store)
    if data.result.score == "p_raw":  # no map fitted: the curve is on the raw score
        data = _raw_scored(data)
    if not data.result.has_curve:  # below the class-size rule
        return _limited(data, out, max_transcripts, progress)
    point = default_point(data.result.operating_points, operating_point)
    threshold = threshold_of(point)
    rows = choose_rows(data.rows, threshold, max_transcripts)
    figs = Figures.from_run(data)
    target = Path(out) if out is not None else data.run_dir / "report.html"
    if target.is_dir():
        raise InputError("expected a file path for the report, got a folder", path=str(target),
                         field="out")
    pngs = write_pngs(data, figs, target.parent, markers=markers(data),
                      band=_band(data.policies))
    tick = progress("report transcripts", len(rows)) if progress and rows else None
    page = render_page(data, figs, rows, point, tick)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(target)
    name = None if point is None else point.name
    return Report(html=target, pngs=tuple(pngs), n_rows=len(data.rows), n_transcripts=len(rows),
                  operating_point=name, notes=data.notes, viewer=name)


def _raw_scored(data: RunData) -> RunData:
    """A run that fitted no calibration map (too few of a class, calimon.numerics.class_support) drew
    its curve and operating points on p_raw: the viewer, histogram and reliability read that."""
    from dataclasses import replace

    note = ("calibration: no map was fitted ("
            + str((data.result.support and data.result.support.reason) or "too few of a class")
            + "); every figure and card reads the raw score, shown as both p_raw and p_cal")
    return replace(data, rows=tuple(replace(r, p_cal=r.p_raw) for r in data.rows),
                   notes=(*data.notes, note))


def _limited(data: RunData, out: str | Path | None, max_transcripts: int | None,
             progress: Progress | None) -> Report:
    from calimon.report.limited import render_limited_page, thresholds
    from calimon.report.viewer import choose_rows

    options = thresholds(data)
    rows = choose_rows(data.rows, options[0][1] if options else None, max_transcripts)
    target = Path(out) if out is not None else data.run_dir / "report.html"
    tick = progress("report transcripts", len(rows)) if progress and rows else None
    page = render_limited_page(data, rows, tick)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(page, encoding="utf-8")
    return Report(html=target, pngs=(), n_rows=len(data.rows), n_transcripts=len(rows),
                  operating_point=None, notes=data.notes, has_curve=False,
                  viewer=options[0][0] if options and rows else None)


__all__ = ["DEFAULT_MAX_TRANSCRIPTS", "Report", "RunData", "build_report", "gather"]
