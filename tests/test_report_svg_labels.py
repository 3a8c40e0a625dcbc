"""The report's SVG curve: operating-point labels never overlap each other, a dot, a binary
point or the title, and stay inside the axes. Text boxes are estimated here from the font size
(a deliberately smaller estimate than the drawing code's), and, in Chromium, measured with
``getBBox``."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
from test_plotting_labels import CROWDED_BINARY, CROWDED_OPS, _weak_curve, _within, box_clashes

from calimon.report.chromium import check_page, find_chromium

NS = "{http://www.w3.org/2000/svg}"
TITLE = "a long title over the crowded corner of the axes"
Box = tuple[float, float, float, float]  # left, top, right, bottom in SVG pixels


def _svg() -> str:
    from calimon.report.svg import curve_svg

    return curve_svg([("all (calibrated)", _weak_curve())],
                     binary_points=[b.to_dict() for b in CROWDED_BINARY],
                     operating_points=[p.to_dict() for p in CROWDED_OPS], title=TITLE)


def _clashes(labels: dict[str, Box], others: dict[str, Box], axes: Box) -> list[str]:
    assert set(labels) == {p.name for p in CROWDED_OPS}
    assert len(others) == len(CROWDED_OPS) + len(CROWDED_BINARY) + 1
    return box_clashes(labels, others, axes)


def _estimated(svg: str) -> tuple[dict[str, Box], dict[str, Box], Box]:
    """Label, marker and title boxes and the axes box, from the SVG's attributes; text
    boxes at 0.55 em per character, 0.75 em above and 0.2 em below the baseline."""
    root = ET.fromstring(svg)
    names = {p.name for p in CROWDED_OPS}
    labels, others = {}, {}
    for t in root.iter(f"{NS}text"):
        fs, x, y = float(t.get("font-size")), float(t.get("x")), float(t.get("y"))
        w = 0.55 * fs * len(t.text)
        left = x - {"start": 0, "middle": w / 2, "end": w}[t.get("text-anchor", "start")]
        if t.text in names:
            labels[t.text] = (left, y - 0.75 * fs, left + w, y + 0.2 * fs)
        elif t.text == TITLE:
            others["title"] = (left, y - 0.75 * fs, left + w, y + 0.2 * fs)
    for c in root.iter(f"{NS}circle"):
        if c.get("class") == "cm-op":
            x, y, r = (float(c.get(k)) for k in ("cx", "cy", "r"))
            others[f"dot {x:.0f},{y:.0f}"] = (x - r, y - r, x + r, y + r)
    for p in root.iter(f"{NS}polygon"):
        if p.get("class") == "cm-binary":
            xs, ys = zip(*(map(float, v.split(",")) for v in p.get("points").split()),
                         strict=True)
            others[f"binary {xs[0]:.0f},{ys[1]:.0f}"] = (min(xs), min(ys), max(xs), max(ys))
    [axes] = [(float(r.get("x")), float(r.get("y")), float(r.get("x")) + float(r.get("width")),
               float(r.get("y")) + float(r.get("height"))) for r in root.iter(f"{NS}rect")
              if r.get("fill") == "none" and r.get("stroke") == "#888"]
    return labels, others, axes


def test_curve_svg_labels_clear_of_each_other_markers_and_title():
    clashes = _clashes(*_estimated(_svg()))
    assert not clashes, "; ".join(clashes)


def test_a_label_without_room_becomes_a_legend_row():
    from calimon.report.svg import curve_svg

    # a tiny figure: the axes hold no label of this length
    svg = curve_svg([("all", _weak_curve())], width=120, height=110,
                    operating_points=[{"name": "FAR<=1% with a very long name", "mr": 0.5,
                                       "far": 0.5, "threshold": 0.5, "tp": 1, "fp": 1,
                                       "tn": 1, "fn": 1}])
    assert "FAR&lt;=1% with a very long name: no room on the axes" in svg
    assert 'class="cm-op-label"' not in svg and svg.count('class="cm-op"') == 1


# The boxes as Chromium draws them: getBBox of each text, dot, diamond and the axes frame.
_MEASURE = """(() => {
  const box = (el) => { const b = el.getBBox(); return [b.x, b.y, b.x + b.width, b.y + b.height]; };
  const svg = document.querySelector('svg.cm-curve');
  const texts = [...svg.querySelectorAll('text')].map((t) => [t.textContent, box(t)]);
  const dots = [...svg.querySelectorAll('circle.cm-op')].map(box);
  const diamonds = [...svg.querySelectorAll('polygon.cm-binary')].map(box);
  const axes = [...svg.querySelectorAll('rect')].filter(
      (r) => r.getAttribute('fill') === 'none' && r.getAttribute('stroke') === '#888').map(box);
  return JSON.stringify({texts, dots, diamonds, axes});
})()"""


@pytest.mark.chromium
@pytest.mark.skipif(find_chromium() is None, reason="no Chromium binary (apt-get install "
                                                    "chromium)")
def test_curve_svg_labels_clear_in_chromium(tmp_path):
    from calimon.report.assets import CSS

    svg = _svg()
    page = tmp_path / "labels.html"
    page.write_text(f"<!doctype html><html><head><meta charset='utf-8'><style>{CSS}</style>"
                    f"</head><body>{svg}</body></html>")
    check = check_page(page, expressions={"boxes": _MEASURE})
    assert check.errors == ()
    got = json.loads(check.values["boxes"])
    names = {p.name for p in CROWDED_OPS}
    labels = {t: tuple(b) for t, b in got["texts"] if t in names}
    others = {f"dot {i}": tuple(b) for i, b in enumerate(got["dots"])}
    others |= {f"binary {i}": tuple(b) for i, b in enumerate(got["diamonds"])}
    [others["title"]] = [tuple(b) for t, b in got["texts"] if t == TITLE]
    clashes = _clashes(labels, others, tuple(got["axes"][0]))
    assert not clashes, "; ".join(clashes)
    # the drawing code's estimate of each label's box covers the box Chromium drew
    from calimon.report.svg_labels import text_box

    root = ET.fromstring(svg)
    for t in root.iter(f"{NS}text"):
        if t.text in names:
            est = text_box(t.text, float(t.get("font-size")), float(t.get("x")),
                           float(t.get("y")))
            assert _within(labels[t.text], est, tol=0.5), (t.text, est)
