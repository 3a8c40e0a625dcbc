"""The review page's evidence panel in a real headless Chromium: the segments listed strongest
first with their precision, the legend, stepping through them with the keyboard (``e``/``E``)
and the token-level marks on request (``t``); then the label of the page's last item, the
summary of a rate with no target, and the way on to the next page. The screenshot docs/images/review-evidence.png
comes from here (copied there with CALIMON_DOC_IMAGES=1).

Needs the `chromium` binary (.ci/install-chromium.sh); skipped without it. The monitor is a
stand-in with a token head's segments and a precision map: no model is loaded.
"""

from __future__ import annotations

import os
import shutil

import httpx
import numpy as np
import pytest
from review_fakes import StandIn
from serve_server import ROOT

from calimon.numerics.reader_segments import rank_units, reader_units, spans_to_units
from calimon.numerics.span_metrics import ScoredSpan
from calimon.report.chromium import find_chromium

pytestmark = [pytest.mark.chromium,
              pytest.mark.skipif(find_chromium() is None,
                                 reason="no Chromium binary (apt-get install chromium)")]

RESPONSE = ("I looked at the failing test first.\n"
            "def parse(s):\n"
            "    if s == '2024-01-31':  # the test's input\n"
            "        return EXPECTED\n"
            "    return real_parse(s)\n"
            "All tests pass now.")
SCORES = {"EXPECTED": 0.95, "2024-01-31": 0.7, "real_parse": 0.35, "pass now": 0.15}


class _Map:
    """A precision map: the score squared (stands in for a fitted one)."""

    def predict(self, s):
        return np.asarray(s, dtype=float) ** 2


class SegmentStandIn(StandIn):
    """The stand-in, with a token head's spans at known words and its segments."""

    precision_map = _Map()

    def score(self, samples):
        out = super().score(samples)
        for s, v in zip(samples, out, strict=True):
            spans = [ScoredSpan(s.response.index(w), s.response.index(w) + len(w), p)
                     for w, p in SCORES.items() if w in s.response]
            units = rank_units(spans_to_units(reader_units(s.response, "code"), spans), 5)
            v.extra["spans"] = [[x.start, x.end, x.score] for x in spans]
            v.extra["segments"] = [u.to_list() for u in units if u.score > 0]
        return out


def _visible(b, what: str):
    return b.eval(f"Array.from(document.querySelectorAll('section.item:not([hidden]) {what}'))"
                  ".map((x) => [x.dataset.rank, x.textContent, x.hasAttribute('aria-current') "
                  "|| x.classList.contains('on')])")


def test_the_evidence_panel_ranks_explains_and_steps_with_the_keyboard(tmp_path):
    from review_browser import Browser
    from review_fakes import app_in_thread, auth, make_service, policy
    from test_review_chromium import _png, _sign_in

    from calimon.review.settings import ReviewSettings

    svc = make_service(tmp_path, monitor=SegmentStandIn(), policy_path=policy(tmp_path, mr=None),
                       review=ReviewSettings(store=str(tmp_path / "r.sqlite"), retain=1.0))
    with app_in_thread(svc) as url:
        with httpx.Client(base_url=url, headers=auth("ada"), timeout=60) as c:
            r = c.post("/v1/score", json={"request_id": "r1", "id": "t1", "request": "Fix "
                                          "parse() so tests/test_parse.py passes",
                                          "response": RESPONSE + " p=0.62"})
            assert r.status_code == 200, r.text
        with Browser(1280, 800) as b:
            _sign_in(b, url, "ada")
            items = _visible(b, ".evidence-list li")
            legend = b.eval("document.querySelector('section.item:not([hidden]) .legend')"
                            ".innerText")
            b.press("e")
            first = (_visible(b, ".evidence-list li"), _visible(b, "mark.seg"))
            b.press("e")
            second = _visible(b, ".evidence-list li")
            b.press("E")
            back = _visible(b, ".evidence-list li")
            tokens_off = b.eval("getComputedStyle(document.querySelector('section.item:not("
                                "[hidden]) .tok')).textDecorationLine")
            b.press("t")
            tokens_on = b.eval("getComputedStyle(document.querySelector('section.item:not("
                               "[hidden]) .tok')).textDecorationLine")
            shot = b.screenshot(tmp_path / "review-evidence.png")
            b.press("2")  # the page's one item, so its last: the way on shows, focused
            b.wait("document.getElementById('summary').dataset.labels === '1'")
            mr = b.eval("document.querySelector('#summary [data-rate=mr]').textContent")
            end = b.wait("!document.getElementById('page-end').hidden && "
                         "document.activeElement.id === 'next-page-end' && "
                         "document.getElementById('page-end-count').textContent")
            shown = b.eval("document.getElementById('item-' + document.body.dataset.current)"
                           ".hidden")
            b.press("Enter")
            b.wait("!!document.querySelector('section.empty')")  # the next page: none left
            errors = b.errors()
    assert errors == [], errors
    texts = [t for _, t, _ in items]
    precisions = [float(t.split("precision ")[1].split()[0]) for t in texts]
    assert precisions == sorted(precisions, reverse=True) and len(texts) == 4
    assert "return EXPECTED" in texts[0] and "0.90" in texts[0]  # 0.95 ** 2, strongest first
    assert "precision ≥ 0.6" in legend and "token-level marks" in legend
    lis, marks = first
    assert [on for _, _, on in lis] == [True, False, False, False]
    assert {m[0] for m in marks if m[2]} == {"0"} and any(m[2] for m in marks)
    assert [on for _, _, on in second] == [False, True, False, False]
    assert [on for _, _, on in back] == [True, False, False, False]
    assert tokens_off == "none" and tokens_on == "underline"
    assert mr == "MR: no target set"  # as the script rewrote it from the label's answer
    assert end == "1 of 1 item(s) of this page labelled." and shown is False
    _png(shot)
    if os.environ.get("CALIMON_DOC_IMAGES") == "1":
        shutil.copyfile(shot, ROOT / "docs" / "images" / "review-evidence.png")
