"""The review queue of a real `calimon serve --review` in a real headless Chromium: a reviewer
signs in, labels ten transcripts with the keyboard and watches the status change; the server is
SIGKILLed in the middle of labelling and started again, and no label given is lost or stored
twice. The queue and status screenshots of docs/serve.md come from here (with
CALIMON_DOC_IMAGES=1 they are copied into docs/images; else they stay in the test's tmp folder).

Needs the `chromium` binary (.ci/install-chromium.sh); skipped without it. The monitor is the
stand-in of tests/review_server.py behind ``--backend chat``: no model is loaded.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import time
import uuid
from pathlib import Path

import httpx
import pytest
from review_fakes import KEYS
from review_server import served_review
from serve_server import ROOT

from calimon.report.chromium import find_chromium

pytestmark = [pytest.mark.chromium,
              pytest.mark.skipif(find_chromium() is None,
                                 reason="no Chromium binary (apt-get install chromium)")]

SCORES = [0.12, 0.3, 0.55, 0.62, 0.7, 0.93, 0.2, 0.45, 0.85, 0.35]
DOC_IMAGES = ROOT / "docs" / "images"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One server (with its stand-in monitor API) for the module, and 80 decisions."""
    bodies = []
    for i in range(80):
        p = SCORES[i % len(SCORES)]
        evidence = " I EVIDENCE special-cased the test" if p > 0.5 else ""
        bodies.append({"id": f"t{i}", "request_id": f"r{i}", "request": f"Fix bug {i} in parse()",
                       "response": f"Looked at the failing test.{evidence} Then answered p={p}"})
    with served_review(tmp_path_factory.mktemp("review-chromium"), bodies) as state:
        yield state


def _status(server) -> dict:
    return httpx.get(f"{server.url}/v1/review/status", timeout=60,
                     headers={"Authorization": f"Bearer {KEYS['ada']}"}).json()


def _sign_in(b, url: str, who: str, page: str = "/review") -> None:
    """Open ``page`` signed out, sign in where it sends the browser, land on ``page``."""
    b.open(f"{url}{page}")  # not signed in: sent to the sign-in page
    b.wait("!!document.getElementById('key')")
    assert b.eval("location.pathname") == "/review/login"
    b.eval("document.getElementById('key').focus()")
    b.type(KEYS[who])
    b.press("Enter")
    # the sign-in page runs the script too: wait for the page signed in
    b.wait("document.body && document.body.dataset.ready === '1' && "
           "!!document.getElementById('reviewer')")
    assert b.eval("document.getElementById('reviewer').textContent") == who
    assert b.eval("location.pathname + location.search") == page  # the page asked for


def _label_current(b, key: str) -> str:
    """Press a label key on the item shown; the item's id."""
    item = b.eval("document.body.dataset.current")
    b.press(key)
    return item


def _keep(shot: Path, name: str) -> None:
    if os.environ.get("CALIMON_DOC_IMAGES") == "1":
        DOC_IMAGES.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, DOC_IMAGES / name)


def test_sign_in_label_ten_with_the_keyboard_and_watch_the_status(served, tmp_path):
    from review_browser import Browser

    server = served["server"]
    before = _status(server)
    with Browser(1280, 800) as b:
        _sign_in(b, server.url, "ada", "/review/status?from=mail")  # and back to that page
        b.open(f"{server.url}/review")
        b.wait("document.body.dataset.ready === '1'")
        first = b.eval("document.body.dataset.current")
        b.press("j")
        assert b.eval("document.body.dataset.current") != first
        b.press("k")
        assert b.eval("document.body.dataset.current") == first
        assert b.eval("document.querySelectorAll('section.item:not([hidden])').length") == 1
        width = b.eval("document.documentElement.scrollWidth")
        assert width <= 1280  # readable at 1280x800: nothing runs off to the side
        labelled = []
        for n in range(10):
            p = float(b.eval("document.querySelector('section.item:not([hidden]) .item-head')"
                             ".textContent.match(/p_raw ([0-9.]+)/)[1]"))
            if n == 3:
                b.press("n")
                b.type("special-cases the test")
                b.press("Escape")
            labelled.append(_label_current(b, "1" if p > 0.5 else "2"))
        b.wait("document.body.dataset.outbox === '0'")
        b.wait("document.getElementById('summary').dataset.labels === '10'")
        assert b.eval("document.querySelectorAll('#queue li[data-state=saved]').length") == 10
        b.open(f"{server.url}/review/status")
        b.wait("!!document.getElementById('verdict')")
        status_text = b.eval("document.body.innerText")
        status_png = b.screenshot(tmp_path / "review-status.png")
        errors = b.errors()
    after = _status(server)
    assert errors == [], errors
    assert after["labels"] == before["labels"] + 10
    assert sum(s["sampled"] for s in after["strata"].values()) > 0
    assert [c["line"] for c in after["certificates"]] != [c["line"] for c in
                                                           before["certificates"]]
    assert f"{after['labels']} labels" in status_text and "Assumptions" in status_text
    assert after["certificates"][0]["line"].split(";")[0] in status_text
    db = sqlite3.connect(served["tmp"] / "review.sqlite")
    rows = db.execute("SELECT item_id, reviewer, note FROM review_labels WHERE reviewer = 'ada'"
                      ).fetchall()
    assert sorted(r[0] for r in rows) == sorted(labelled)
    assert [r[2] for r in rows if r[2]] == ["special-cases the test"]
    _png(status_png)
    _keep(status_png, "review-status.png")


def _png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_sigkill_in_the_middle_of_labelling_loses_and_duplicates_nothing(served):
    """Labels given before, during and after a SIGKILL: each stored exactly once."""
    from review_browser import Browser

    server = served["server"]
    given = []
    with Browser(1280, 800) as b:
        _sign_in(b, server.url, "bob")
        for key in "212":
            given.append(_label_current(b, key))
        b.wait("document.body.dataset.outbox === '0'")
        given.append(_label_current(b, "1"))  # sent as the server dies, answered or not
        server.kill()
        for key in "21":  # given while the server is down: they wait in the outbox
            given.append(_label_current(b, key))
        time.sleep(1.5)
        assert int(b.eval("document.body.dataset.outbox")) >= 2
        assert b.eval("document.querySelector('#queue li[data-state=waiting]') !== null")
        served["server"] = server = served["restart"]()
        b.wait("document.body.dataset.outbox === '0'", timeout=60)
        for key in "2122":
            given.append(_label_current(b, key))
        b.wait("document.body.dataset.outbox === '0'")
        assert b.errors() == [] or all("Failed to load resource" in e or "ERR_CONNECTION" in e
                                       for e in b.errors())
    db = sqlite3.connect(served["tmp"] / "review.sqlite")
    rows = db.execute("SELECT label_id, item_id FROM review_labels WHERE reviewer = 'bob'"
                      ).fetchall()
    assert len(rows) == len(given) == 10
    assert len({r[0] for r in rows}) == 10  # no label stored twice
    assert sorted(r[1] for r in rows) == sorted(given)  # and each item given is there once
    # a resend of a label the server stored (its answer lost) is answered from the store
    body = {"label_id": uuid.uuid4().hex, "item_id": given[-1], "label": "benign"}
    auth = {"Authorization": f"Bearer {KEYS['bob']}"}
    first = httpx.post(f"{server.url}/v1/review/labels", json=body, headers=auth, timeout=60)
    server.kill()
    served["server"] = server = served["restart"]()
    again = httpx.post(f"{server.url}/v1/review/labels", json=body, headers=auth, timeout=60)
    assert first.json()["replayed"] is False and again.json()["replayed"] is True
    n = sqlite3.connect(served["tmp"] / "review.sqlite").execute(
        "SELECT COUNT(*) FROM review_labels WHERE label_id = ?", (body["label_id"],)).fetchone()
    assert n == (1,)


def test_evidence_spans_are_highlighted_per_message_in_the_browser(tmp_path):
    """A monitor with a token head gives spans with offsets (the chat stand-in gives none):
    the same app in this process, around a stand-in whose spans are known, shows a trajectory
    message by message with each span marked where it is. The queue's screenshots (1280 and 600
px wide); in the narrow window the queue's rows are reached with Tab."""
    from review_browser import Browser
    from review_fakes import app_in_thread, auth, make_service

    from calimon.review.settings import ReviewSettings

    svc = make_service(tmp_path, review=ReviewSettings(store=str(tmp_path / "r.sqlite"),
                                                       retain=0.5))
    with app_in_thread(svc) as url:
        with httpx.Client(base_url=url, headers=auth("ada"), timeout=60) as c:
            offsets = _trajectories(c)
        with Browser(1280, 800) as b:
            _sign_in(b, url, "ada")
            for _ in range(20):  # j to the first trajectory with evidence
                if b.eval("!!document.querySelector('section.item:not([hidden]) mark.ev')"):
                    break
                b.press("j")
            first = b.eval("document.body.dataset.current")
            marks = b.eval("Array.from(document.querySelectorAll('section.item:not([hidden]) "
                           "mark.ev')).map((m) => [m.textContent, +m.dataset.start])")
            parts = b.eval("Array.from(document.querySelectorAll('section.item:not([hidden]) "
                           ".part-head')).map((h) => h.textContent)")
            shot = b.screenshot(tmp_path / "review-queue.png")
            wide = b.eval(WIDTHS)
            b.resize(600, 800)  # a narrow window: the queue stacks above the transcript
            narrow = b.wait(f"(w => w[0] < 600 && w)({WIDTHS})")
            narrow_shot = b.screenshot(tmp_path / "review-queue-600.png")
            rows, enter = _tab_through_the_queue(b)
            errors = b.errors()
    assert errors == [], errors
    assert parts == ["#1 assistant", "#1 tool call: bash", "#2 tool result: bash",
                     "#3 assistant"]
    assert marks == [["EVIDENCE", offsets[first]]]
    assert wide[2] <= 1280 and wide[0] > 850  # the side bar beside the item at 1280
    assert narrow[0] >= 550 and narrow[1] >= 520 and narrow[2] <= 600, narrow
    assert [r[0] for r in rows[:4]] == [0, 1, 2, 3]  # each row reached with Tab, in order
    assert all(r[1] == "solid" and r[2] >= 2 for r in rows), rows  # and its focus visible
    assert enter[0] == enter[1] and enter[2] == "true"  # Enter shows the row's item
    _png(shot)
    _keep(shot, "review-queue.png")
    _keep(narrow_shot, "review-queue-600.png")


# the items column, the transcript's width and the page's: at 600 px a side bar beside the
# item left them 230 and 186 px
WIDTHS = ("[document.querySelector('.items').getBoundingClientRect().width, "
          "document.querySelector('section.item:not([hidden]) .response pre')"
          ".getBoundingClientRect().width, document.documentElement.scrollWidth]")


def _tab_through_the_queue(b) -> tuple[list, list]:
    """Tab from the top of the page through the first queue rows (index, outline style and
    width of each focused row); then Enter on the third: [the item shown, the row's item,
    the row's aria-current]."""
    b.eval("document.activeElement.blur()")
    rows, enter = [], None
    for _ in range(8):
        b.press("Tab")
        row = b.eval("(a => a.closest('#queue li') && [+a.closest('#queue li').dataset.index, "
                     "getComputedStyle(a).outlineStyle, parseFloat(getComputedStyle(a)"
                     ".outlineWidth)])(document.activeElement)")
        if row is not None:
            rows.append(row)
        if len(rows) == 3:
            b.press("Enter")
            enter = b.eval("(li => [document.body.dataset.current, li.dataset.item, "
                           "li.getAttribute('aria-current')])(document.activeElement"
                           ".closest('#queue li'))")
    return rows, enter


def _trajectories(c) -> dict[str, int]:
    """Score agent trajectories and plain transcripts; the evidence offset of each
    trajectory's item."""
    from calimon.review.labels import item_id_of

    out = {}
    for i in range(30):
        p = SCORES[i % len(SCORES)]
        if i % 3 == 0:
            body = {"request_id": f"traj-{i}", "id": f"traj-{i}", "messages": [
                {"role": "user", "content": f"Make the failing test in tests/test_parse.py "
                                            f"pass (case {i})."},
                {"role": "assistant", "content": "Let me run the tests first.", "tool_calls": [
                    {"id": "c1", "type": "function",
                     "function": {"name": "bash", "arguments": "{\"cmd\": \"pytest -x\"}"}}]},
                {"role": "tool", "tool_call_id": "c1",
                 "content": "FAILED tests/test_parse.py::test_dates - expected 2024-01-31"},
                {"role": "assistant", "content": "The parser is fine; I will EVIDENCE return "
                 f"the expected string when the input matches the test. p={p}"}]}
        else:
            body = {"request_id": f"plain-{i}", "id": f"plain-{i}", "request": f"Task {i}",
                    "response": f"Answered the question. p={p}"}
        r = c.post("/v1/score", json=body)
        assert r.status_code == 200, r.text
        for ev in r.json()["evidence"]:
            out[item_id_of(body["request_id"])] = ev["start"]
    return out
