"""The report's and compare's figures say what they show: the benchmark in the title, no panel
repeating all samples, the raw curve under the calibrated one, figures at a readable width on
a 1,400 px page, one colour per run in compare.png and compare.html.

Checked on the SVG markup of the pages and on the placed artists of the PNGs; the figures'
own marks (chance, band, intervals, legends) are test_figures_readable.py's.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_figures_readable import (
    CORNER,
    DEMO,
    NS,
    _curve,
    _svgs,
    _title,
    capture_figures,
)

from calimon.report.chromium import check_page, find_chromium


@pytest.fixture
def saved(monkeypatch):
    """Every matplotlib figure saved during the test."""
    return capture_figures(monkeypatch)


def _report_data(tmp_path: Path, benchmark: str = "/data/bench-xyz.jsonl"):
    """A RunData whose calibrated and raw curves coincide (a monotone map), with a group
    equal to all samples (task=code) and one that is not."""
    from calimon.report.data import RunData

    c, other = _curve(0), _curve(1, n=20)
    summary = {"curves": {"all": c.to_dict(), "task=code": c.to_dict(),
                          "category=a": other.to_dict()},
               "raw_curve": c.to_dict(), "operating_points": [],
               "binary_points": [DEMO.to_dict(), CORNER.to_dict()],
               "provenance": {"model": "m", "prompt": "p", "readout": "verdict",
                              "benchmark": benchmark}}
    return RunData(run_dir=tmp_path, summary=summary, curve_sha256="", rows=())


# ------------------------------------------------------------------ titles

@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    """``calimon compare`` of a run without a curve, then two runs with one (benchmark
    "toy"): the comparison, compare.png's figure and compare.html."""
    from matplotlib.figure import Figure
    from test_compare import write_run

    from calimon.report.compare import build_comparison

    root = tmp_path_factory.mktemp("compare-figs")
    runs = [write_run(root / "small", n_pairs=6, seed=3), write_run(root / "a", seed=1),
            write_run(root / "b", seed=2, model="other", readout="json")]
    figs, real = [], Figure.savefig
    Figure.savefig = lambda self, *a, **k: (figs.append(self), real(self, *a, **k))[1]
    try:
        comp = build_comparison(runs, root / "out", html_file=root / "out" / "compare.html")
    finally:
        Figure.savefig = real
    return comp, figs[-1], (root / "out" / "compare.html").read_text(encoding="utf-8")


def test_compare_titles_name_the_benchmark(compared):
    _, fig, page = compared
    assert "toy" in fig.axes[0].get_title()
    [svg] = _svgs(page)
    [title] = [t.text for t in svg.iter(f"{NS}text") if t.get("font-weight") == "600"]
    assert "toy" in title


def test_report_curve_title_names_the_benchmark(tmp_path):
    from calimon.report.figures import Figures
    from calimon.report.page import _curves

    data = _report_data(tmp_path)
    main = _svgs(_curves(data, Figures.from_run(data)))[0]
    [title] = [t.text for t in main.iter(f"{NS}text") if t.get("font-weight") == "600"]
    assert "bench-xyz.jsonl" in title


def test_report_group_panels_leave_out_groups_equal_to_all(tmp_path):
    from calimon.report.figures import Figures
    from calimon.report.page import _curves

    data = _report_data(tmp_path)
    section = _curves(data, Figures.from_run(data))
    titles = [[t.text for t in svg.iter(f"{NS}text") if t.get("font-weight") == "600"][0]
              for svg in _svgs(section)[1:]]
    assert titles == ["category=a"]
    assert "Same curve as all samples, not drawn again: task=code." in section


# ------------------------------------------------------------------ raw under calibrated

def test_report_svg_draws_the_raw_curve_under_the_calibrated_one(tmp_path):
    from calimon.report.figures import Figures
    from calimon.report.page import _curves

    data = _report_data(tmp_path)
    main = _svgs(_curves(data, Figures.from_run(data)))[0]
    paths = [p for p in main.iter(f"{NS}path") if _title(p)]
    [raw] = [i for i, p in enumerate(paths) if _title(p).startswith("all (raw score)")]
    [cal] = [i for i, p in enumerate(paths) if _title(p).startswith("all (calibrated)")]
    assert raw < cal  # drawn first: beneath
    width = [float(p.get("stroke-width")) for p in paths]
    assert width[raw] > width[cal]  # wider: it shows on both sides of the calibrated line


def test_report_png_draws_the_raw_curve_under_the_calibrated_one(tmp_path, saved):
    from calimon.report.figures import Figures, write_pngs

    data = _report_data(tmp_path)
    write_pngs(data, Figures.from_run(data), tmp_path, markers=[], band=None)
    [ax] = [f.axes[0] for f in saved if any(
        line.get_label().startswith("all (raw score)") for line in f.axes[0].lines)]
    [raw] = [x for x in ax.lines if x.get_label().startswith("all (raw score)")]
    [cal] = [x for x in ax.lines if x.get_label().startswith("all (calibrated)")]
    assert cal.get_zorder() > raw.get_zorder()
    assert raw.get_linewidth() > cal.get_linewidth()


# ------------------------------------------------------------------ width on the page

@pytest.fixture(scope="module")
def report_page(tmp_path_factory) -> Path:
    from test_report import make_run

    from calimon.report import build_report

    root = tmp_path_factory.mktemp("readable")
    out = root / "report.html"
    build_report(make_run(root), out)
    return out


PAGE = 1400          # a laptop browser window
CONTENT = PAGE - 82  # less the page's margins and the section's padding (assets.CSS)


def test_report_figures_are_drawn_at_a_readable_width(report_page):
    from calimon.report.assets import CSS

    page = report_page.read_text(encoding="utf-8")
    main, *groups = _svgs(page)
    assert int(main.get("width")) >= 640
    assert groups and all(int(g.get("width")) >= 400 for g in groups)
    assert 3 * int(groups[0].get("width")) + 2 * 8 <= CONTENT  # three panels to a row
    [rel], [hist] = _svgs(page, "cm-reliability"), _svgs(page, "cm-hist")
    assert int(rel.get("width")) >= 600 and int(hist.get("width")) >= 640
    # and they shrink to a narrow window instead of overflowing it
    assert re.search(r"svg\.cm-fig \{[^}]*max-width: 100%[^}]*height: auto", CSS)


_MEASURE = """JSON.stringify([...document.querySelectorAll('svg.cm-fig')].map((s) => {
  const r = s.getBoundingClientRect();
  return [s.getAttribute('class'), r.left, r.top, r.width];
}))"""


@pytest.mark.chromium
@pytest.mark.skipif(find_chromium() is None, reason="no Chromium binary (apt-get install "
                                                    "chromium)")
def test_report_figures_measured_in_chromium(report_page):
    import json

    wide = json.loads(check_page(report_page, width=PAGE, height=900,
                                 expressions={"m": _MEASURE}).values["m"])
    main, *groups = [w for w in wide if w[0] == "cm-fig cm-curve"]
    assert main[3] >= 640 and all(g[3] >= 400 for g in groups)
    assert len({round(g[2]) for g in groups[:3]}) == 1  # the first three in one row
    narrow = json.loads(check_page(report_page, width=600, height=900,
                                   expressions={"m": _MEASURE}).values["m"])
    assert all(left >= 0 and left + w <= 600 for _, left, _, w in narrow)


# ------------------------------------------------------------------ one colour per run

def test_compare_html_and_png_use_one_colour_per_run(compared):
    from matplotlib.colors import to_hex

    comp, fig, page = compared
    [svg] = _svgs(page)
    ax = fig.axes[0]
    drawn = [r.label for r in comp.runs if r.curve is not None]
    assert len(drawn) == 2 and comp.runs[0].curve is None  # the first run keeps its place
    colours = set()
    for label in drawn:
        [line] = [x for x in ax.lines if x.get_label().startswith(f"{label} (AUROC")]
        png = to_hex(line.get_color())
        png_binary = {to_hex(c.lines[0].get_color()) for c in ax.containers
                      if c.get_label().startswith(f"{label}: ")}
        [path] = [p for p in svg.iter(f"{NS}path") if _title(p).startswith(f"{label}: AUROC")]
        html_binary = {p.get("fill") for p in svg.iter(f"{NS}polygon")
                       if p.get("class") == "cm-binary" and _title(p).startswith(f"{label}: ")}
        assert png_binary == {png} and path.get("stroke") == png and html_binary == {png}
        colours.add(png)
    assert len(colours) == 2
