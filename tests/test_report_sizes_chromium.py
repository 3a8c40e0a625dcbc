"""The report of a run of any size, in a real headless Chromium: 1 to 10,000 samples, with and
without binary-protocol rows, spans or labels. Each page shows no ``None``, no text cut off (in
a figure, past its frame or its axes; in a box too narrow for its value, the threshold among
them) and no legend or caption for what is not drawn. A screenshot of each is saved under the
test's tmp folder (its path is printed).

The runs are synthetic (tests/report_runs.py: fake readings through the real curve writer).
Needs the `chromium` binary (.ci/install-chromium.sh); skipped without it.
"""

from __future__ import annotations

import pytest

from calimon.report.chromium import check_page, find_chromium

pytestmark = [pytest.mark.chromium,
              pytest.mark.skipif(find_chromium() is None,
                                 reason="no Chromium binary (apt-get install chromium)")]

# What the page shows, checked in the browser; returns one line per problem found.
AUDIT = r"""(() => {
  const problems = [];
  const say = (what, text) => problems.push(what + ": " + String(text).trim().slice(0, 90));
  // 1. no None outside the transcripts' own text (a transcript may well say None)
  const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walk.nextNode(); n; n = walk.nextNode()) {
    if (n.parentElement.closest("pre, q, details.cm-binary-text, script, style")) continue;
    if (/\bNone\b/.test(n.textContent)) say("None shown", n.textContent);
  }
  // 2. every figure's text inside the figure; a 'no curve' note inside its axes
  const inside = (a, b) => a.left >= b.left - 0.5 && a.right <= b.right + 0.5
    && a.top >= b.top - 0.5 && a.bottom <= b.bottom + 0.5;
  document.querySelectorAll("svg.cm-fig").forEach((svg) => {
    const box = svg.getBoundingClientRect();
    svg.querySelectorAll("text").forEach((t) => {
      const r = t.getBoundingClientRect();
      if (r.width && !inside(r, box)) say("text past its figure", t.textContent);
    });
    const frame = svg.querySelector('rect[stroke="#888"]').getBoundingClientRect();
    svg.querySelectorAll("text.cm-undefined").forEach((t) => {
      const r = t.getBoundingClientRect();
      if (r.left < frame.left || r.right > frame.right) say("note past its axes", t.textContent);
    });
    // 3. a legend row only for what the figure draws
    const legend = Array.from(svg.querySelectorAll("text.cm-legend-text"), (t) => t.textContent);
    const has = (sel) => svg.querySelector(sel) !== null;
    if (has("path.cm-curve-under") && !legend.some((row) => /wide pale line/.test(row)))
      say("a wide line the legend does not explain", legend.join(" | "));
    legend.forEach((row) => {
      if (/bootstrap band/.test(row) && !has("polygon.cm-band")) say("legend of no band", row);
      if (/wide pale line/.test(row) && !has("path.cm-curve-under")) say("legend of no raw curve", row);
      if (/^binary\/|\(binary\)/.test(row) && !/undefined/.test(row) && !has("polygon.cm-binary"))
        say("legend of no binary point", row);
    });
  });
  // 4. captions speak of what is drawn
  const curve = document.querySelector("svg.cm-curve");
  document.querySelectorAll("figcaption, #curves p, #points p").forEach((p) => {
    const t = p.textContent;
    if (/markers:|Binary rows/.test(t) && !document.querySelector("polygon.cm-binary"))
      say("caption of no binary marker", t);
    if (/shaded:/.test(t) && curve && !curve.querySelector("polygon.cm-band"))
      say("caption of no band", t);
    if (/wide pale line/.test(t) && curve && !curve.querySelector("path.cm-curve-under"))
      say("caption of no raw curve", t);
  });
  // 5. a span legend names only the marks its transcript has
  document.querySelectorAll(".calimon-spans").forEach((box) => {
    const drawn = new Set(Array.from(box.querySelectorAll("pre mark"), (m) => m.className));
    box.querySelectorAll(".calimon-spans-legend mark").forEach((m) => {
      if (!drawn.has(m.className)) say("span legend of no mark", m.className);
    });
  });
  // 6. no box too narrow for its value: the threshold at every choice, the other fields
  const op = document.getElementById("f-op"), thr = document.getElementById("f-threshold");
  const narrow = (el) => el.scrollWidth > el.clientWidth + 1;
  if (op) {
    Array.from(op.options).forEach((o) => {
      if (o.value === "custom") return;
      op.value = o.value; op.dispatchEvent(new Event("change"));
      if (narrow(thr)) say("threshold box cuts its value", thr.value);
    });
  }
  document.querySelectorAll("select, .cm-kpi, th, td, figcaption").forEach((el) => {
    if (narrow(el) && getComputedStyle(el).overflowX !== "visible") say("cut", el.textContent);
  });
  return problems;
})()"""

COUNTS = {"cards": "document.querySelectorAll('.cm-card').length",
          "figures": "document.querySelectorAll('svg.cm-fig').length",
          "binary_markers": "document.querySelectorAll('polygon.cm-binary').length",
          "span_legends": "document.querySelectorAll('.calimon-spans-legend').length",
          "ready": "document.body.getAttribute('data-cm-ready')"}


def _page(tmp_path, n: int, **kw):
    from report_runs import synthetic_run

    from calimon.report import build_report

    rep = build_report(synthetic_run(tmp_path / "runs", n, **kw))
    shot = tmp_path / "report.png"
    check = check_page(rep.html, screenshot=shot, full_height=3000,
                       expressions={"problems": AUDIT, **COUNTS})
    print(f"screenshot: {shot}")
    assert check.errors == ()
    return rep, check.values


@pytest.mark.parametrize(("n", "kw"), [
    (1, {}),                                         # one sample: no curve
    (7, {}),                                         # below the class-size rule
    (30, {"labels": False, "binary": False}),        # no labels at all
    (60, {"binary": False}),                         # a curve, no binary rows
    (60, {"spans": True}),                           # binary rows and spans
], ids=["1", "7", "30-unlabelled", "60-no-binary", "60-binary-spans"])
def test_a_report_of_any_size_shows_no_none_no_cut_text_and_no_idle_legend(n, kw, tmp_path):
    rep, v = _page(tmp_path, n, **kw)
    assert v["problems"] == [], "\n".join(v["problems"])
    assert v["ready"] == "1" and v["cards"] == n  # every transcript, with or without a curve
    assert (v["binary_markers"] > 0) == (rep.has_curve and kw.get("binary", True))
    assert (v["figures"] > 0) == rep.has_curve
    if not kw.get("labels", True):
        assert v["span_legends"] == 0  # no gold, no prediction: no legend at all


def test_a_report_of_ten_thousand_samples(tmp_path):
    rep, v = _page(tmp_path, 10_000, spans=True, n_boot=20)
    assert v["problems"] == []
    assert rep.n_rows == 10_000 and v["cards"] == rep.n_transcripts == 2000
