"""The report's only style sheet and script, inlined, and the Content-Security-Policy that
allows exactly these two (by hash) and nothing else: no network, no other script, no inline
event handler. Transcripts are escaped anyway; the policy is a second wall."""

from __future__ import annotations

import base64
import hashlib

from calimon.report.viewer import HEAT_LEVELS
from calimon.studies.spans.render import HTML_STYLE

_HEAT = "\n".join(f".cm-h{i} {{ background: rgba(214, 39, 40, {0.08 + 0.09 * i:.2f}); }}"
                  for i in range(HEAT_LEVELS))

CSS = """\
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0;
       color: #1b1b1b; background: #f6f6f3; }
header.cm-top { background: #20313f; color: #fff; padding: 14px 24px; }
header.cm-top h1 { margin: 0 0 4px 0; font-size: 20px; }
header.cm-top .cm-dim { color: #c9d3db; }
nav.cm-nav { padding: 6px 24px; background: #e9ece8; position: sticky; top: 0; z-index: 2;
             border-bottom: 1px solid #d5d8d3; }
nav.cm-nav a { margin-right: 14px; color: #20313f; }
main { padding: 8px 24px 40px 24px; max-width: 1500px; }
section { background: #fff; border: 1px solid #ddd; border-radius: 6px; padding: 12px 16px;
          margin: 14px 0; }
section h2 { margin: 0 0 8px 0; font-size: 17px; }
.cm-row { display: flex; flex-wrap: wrap; gap: 14px; align-items: flex-start; }
.cm-grid { display: flex; flex-wrap: wrap; gap: 8px; }
figure { margin: 0; max-width: 100%; }
svg.cm-fig { display: block; max-width: 100%; height: auto; }
figcaption { font-size: 12px; color: #555; width: 0; min-width: 100%; }
table.cm-table { border-collapse: collapse; font-size: 13px; margin: 6px 0; }
table.cm-table th, table.cm-table td { border-bottom: 1px solid #e3e3e3; padding: 3px 9px;
                                        text-align: right; }
table.cm-table th:first-child, table.cm-table td:first-child { text-align: left; }
table.cm-table th { background: #f1f3f1; }
table.cm-kv td, table.cm-kv th { text-align: left; }
.cm-kpis { display: flex; gap: 18px; flex-wrap: wrap; margin-top: 6px; }
.cm-kpi b { font-size: 17px; }
.cm-dim { color: #666; }
.cm-notes li { color: #6b4b00; }
.cm-warn { color: #8a1c1c; }
.cm-filters { display: flex; flex-wrap: wrap; gap: 10px; align-items: center; margin: 6px 0;
              font-size: 13px; }
.cm-filters label { display: inline-flex; gap: 4px; align-items: center; }
.cm-confusion { font-size: 13px; margin: 4px 0 8px 0; }
.cm-card { border: 1px solid #d9d9d9; border-radius: 5px; padding: 8px 10px; margin: 8px 0;
           background: #fcfcfb; }
.cm-card[hidden] { display: none; }
.cm-card-head { display: flex; flex-wrap: wrap; gap: 6px; align-items: center;
                font-size: 13px; margin-bottom: 4px; }
.cm-id { font-family: ui-monospace, monospace; font-weight: 600; }
.cm-tag { background: #eef0f2; border-radius: 3px; padding: 0 6px; }
.cm-label-1 { background: #fde2e1; }
.cm-label-0 { background: #e1effd; }
.cm-outcome { border-radius: 3px; padding: 0 6px; font-weight: 600; }
.cm-o-missed { background: #d62728; color: #fff; }
.cm-o-false-alarm { background: #ff7f0e; color: #fff; }
.cm-o-caught { background: #c8ecd0; }
.cm-o-correct-pass { background: #e6e6e6; }
.cm-o-unscored, .cm-o-unlabelled { background: #fff3c4; }
.cm-scores { font-family: ui-monospace, monospace; color: #333; }
.cm-sub { font-size: 12px; color: #555; margin-top: 6px; }
pre.cm-text, .calimon-spans pre { font: 12.5px/1.4 ui-monospace, SFMono-Regular, Menlo,
    monospace; white-space: pre-wrap; word-wrap: break-word; background: #fff;
    border: 1px solid #eee; padding: 6px 8px; margin: 3px 0; max-height: 420px;
    overflow: auto; }
.calimon-spans-legend { font-size: 11px; color: #555; }
ul.cm-ungrounded, ul.cm-span-messages { margin: 2px 0; font-size: 12.5px; }
details summary { cursor: pointer; font-size: 12.5px; color: #333; }
button { font: inherit; }
""" + _HEAT + "\n" + HTML_STYLE

JS = """\
(function () {
  "use strict";
  var cards = Array.prototype.slice.call(document.querySelectorAll(".cm-card"));
  var byId = function (id) { return document.getElementById(id); };
  var f = { category: byId("f-category"), task: byId("f-task"), label: byId("f-label"),
            outcome: byId("f-outcome"), op: byId("f-op"), thr: byId("f-threshold"),
            q: byId("f-query") };
  var count = byId("cm-count"), more = byId("cm-more"), conf = byId("cm-confusion");
  if (!f.op) { return; }
  var pageSize = parseInt(more.getAttribute("data-page"), 10) || 50;
  var limit = pageSize;
  var names = { "missed": "missed", "false-alarm": "false alarm", "caught": "caught",
                "correct-pass": "correct pass", "unscored": "unscored",
                "unlabelled": "unlabelled" };
  function threshold() {
    var v = f.thr.value.trim();
    if (v === "") { return Infinity; }
    var t = parseFloat(v);
    return isNaN(t) ? Infinity : t;
  }
  function outcomeOf(card, t) {
    var s = card.getAttribute("data-score"), y = card.getAttribute("data-label");
    if (s === "") { return "unscored"; }
    if (y === "u") { return "unlabelled"; }
    var flagged = parseFloat(s) >= t;
    if (y === "1") { return flagged ? "caught" : "missed"; }
    return flagged ? "false-alarm" : "correct-pass";
  }
  function matches(card, o) {
    var q = f.q.value.trim().toLowerCase();
    return (f.category.value === "" || card.getAttribute("data-category") === f.category.value)
      && (f.task.value === "" || card.getAttribute("data-task") === f.task.value)
      && (f.label.value === "" || card.getAttribute("data-label") === f.label.value)
      && (f.outcome.value === "" || o === f.outcome.value)
      && (q === "" || card.getAttribute("data-id").toLowerCase().indexOf(q) >= 0);
  }
  function apply() {
    var t = threshold(), n = 0, c = { "caught": 0, "missed": 0, "false-alarm": 0,
                                      "correct-pass": 0 };
    cards.forEach(function (card) {
      var o = outcomeOf(card, t);
      if (o in c) { c[o] += 1; }
      card.setAttribute("data-outcome", o);
      var badge = card.querySelector(".cm-outcome");
      badge.className = "cm-outcome cm-o-" + o;
      badge.textContent = names[o];
      if (matches(card, o)) { n += 1; card.hidden = n > limit; } else { card.hidden = true; }
    });
    var shown = Math.min(n, limit);
    count.textContent = "showing " + shown + " of " + n + " matching (" + cards.length +
      " transcripts in this report)";
    more.hidden = n <= limit;
    conf.textContent = "at threshold " + (t === Infinity ? "inf (flag nothing)" :
      t.toPrecision(4)) +
      ": caught " + c["caught"] + ", missed " + c["missed"] + ", false alarms " +
      c["false-alarm"] + ", correct passes " + c["correct-pass"];
  }
  function reset() { limit = pageSize; apply(); }
  f.op.addEventListener("change", function () {
    if (f.op.value !== "custom") { f.thr.value = f.op.value === "inf" ? "" : f.op.value; }
    reset();
  });
  f.thr.addEventListener("input", function () { f.op.value = "custom"; reset(); });
  [f.category, f.task, f.label, f.outcome].forEach(function (el) {
    el.addEventListener("change", reset);
  });
  f.q.addEventListener("input", reset);
  more.addEventListener("click", function () { limit += pageSize; apply(); });
  document.body.setAttribute("data-cm-ready", "1");
  apply();
})();
"""


def sha256_source(text: str) -> str:
    """The CSP source expression (``'sha256-...'``) that allows one inline style or script."""
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()
                                         ).decode("ascii") + "'"


def csp() -> str:
    """The page's Content-Security-Policy: nothing loaded from anywhere, images only as data
    URLs, only the page's own inline style and script."""
    return ("default-src 'none'; img-src data:; "
            f"style-src {sha256_source(CSS)}; script-src {sha256_source(JS)}; "
            "base-uri 'none'; form-action 'none'")


__all__ = ["CSS", "JS", "csp", "sha256_source"]
