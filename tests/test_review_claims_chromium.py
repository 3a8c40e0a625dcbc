"""The review outbox and conflicts in a real headless Chromium against a real
`calimon serve --review` (tests/review_server.py: no model):

- two reviewers, one browser profile, a restart: labels ada gives while the server is down
  wait in the browser, her sign-out says so, bob signing in on the same browser sends none of
  them (and is told they wait), and they are stored as ada's once she signs in again;
- one reviewer, two tabs on one item: the tab that labels second is told of the conflict at
  once, the first on its next poll; labelling again knowing both settles it, and the other tab
  learns its label was changed.

Needs the `chromium` binary (.ci/install-chromium.sh); skipped without it. The API-level cases
are in tests/test_review_claims.py.
"""

from __future__ import annotations

import sqlite3
import time

import pytest
from review_fakes import KEYS
from review_server import served_review

from calimon.report.chromium import find_chromium

pytestmark = [pytest.mark.chromium,
              pytest.mark.skipif(find_chromium() is None,
                                 reason="no Chromium binary (apt-get install chromium)")]

READY = "document.body && document.body.dataset.ready === '1'"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One server (with its stand-in monitor API) for the module, and 30 review decisions."""
    bodies = [{"id": f"t{i}", "request_id": f"r{i}", "request": f"Fix bug {i}",
               "response": f"Looked at the failing test. Then answered p=0.6{i % 10}"}
              for i in range(30)]
    with served_review(tmp_path_factory.mktemp("review-claims-chromium"), bodies) as state:
        yield state


def sign_in(tab, url: str, who: str) -> None:
    """Sign in on the sign-in page (whoever this browser was signed in as before)."""
    tab.open(f"{url}/review/login")
    tab.wait("!!document.getElementById('key')")
    tab.eval("document.getElementById('key').focus()")
    tab.type(KEYS[who])
    tab.press("Enter")
    tab.wait(f"{READY} && !!document.getElementById('reviewer')")
    assert tab.eval("document.getElementById('reviewer').textContent") == who


def labels_of(served, items) -> list[tuple[str, str]]:
    db = sqlite3.connect(served["tmp"] / "review.sqlite")
    marks = ", ".join("?" * len(items))
    return db.execute(f"SELECT item_id, reviewer FROM review_labels WHERE item_id IN ({marks}) "
                      "ORDER BY created_at", tuple(items)).fetchall()


def state_of(item: str) -> str:
    return f"document.getElementById('item-{item}').dataset.state"


def text_of(item: str) -> str:
    return f"document.getElementById('item-{item}').querySelector('.state').textContent"


def test_labels_queued_under_one_reviewer_are_never_sent_under_another(served):
    from review_browser import Browser

    url = served["server"].url
    with Browser(1280, 800) as b:
        sign_in(b, url, "ada")
        served["server"].stop()
        given = []
        for key in "21":  # the server is down: both wait in the outbox
            given.append(b.eval("document.body.dataset.current"))
            b.press(key)
        b.wait("document.body.dataset.outbox === '2'")
        b.eval("document.querySelector('#sign-out button').click()")
        note = b.wait("!document.getElementById('sign-out-note').hidden && "
                      "document.getElementById('sign-out-note').textContent")
        assert note.startswith("2 label(s) not sent yet") and "ada signs in" in note
        assert b.eval("location.pathname") == "/review"  # still signed in, nothing lost
        b.close()
        served["server"] = served["restart"]()
        bob = b.tab()
        sign_in(bob, url, "bob")
        time.sleep(3)  # what bob's page would send, it has sent by now
        assert labels_of(served, given) == []
        others = bob.wait("document.getElementById('others').textContent")
        assert others.startswith("2 label(s) given by ada wait in this browser")
        assert bob.eval("document.body.dataset.outbox") == "0"
        bob.close()
        ada = b.tab()
        sign_in(ada, url, "ada")
        ada.wait("document.body.dataset.outbox === '0' && "
                 "document.getElementById('others').textContent === ''")
        errors = b.errors()
    assert sorted(labels_of(served, given)) == sorted((i, "ada") for i in given)
    assert all("Failed to load resource" in e or "ERR_CONNECTION" in e for e in errors), errors


def test_two_tabs_labelling_one_item_both_show_the_conflict(served):
    from review_browser import Browser

    url = served["server"].url
    with Browser(1280, 800) as b:
        sign_in(b, url, "bob")
        item = b.eval("document.body.dataset.current")
        other = b.tab()
        other.open(f"{url}/review/items/{item}")
        other.wait(READY)
        b.front()
        b.press("2")  # benign in the first tab
        b.wait(f"{state_of(item)} === 'saved'")
        other.front()
        other.press("1")  # misbehavior in the second, not knowing the first
        second = other.wait(f"{state_of(item)} === 'conflict' && {text_of(item)}")
        assert "this page labelled misbehavior" in second and "labelled benign" in second
        b.front()  # the first tab learns on its next poll (or as it comes to the front)
        first = b.wait(f"{state_of(item)} === 'conflict' && {text_of(item)}", timeout=40)
        assert "this page labelled benign" in first and "labelled misbehavior" in first
        b.press("k")  # back to the item; labelling it again, knowing both, settles it
        b.press("2")
        b.wait(f"{state_of(item)} === 'saved'")
        other.front()
        changed = other.wait(f"{state_of(item)} === 'changed' && {text_of(item)}",
                             timeout=40)
        assert "benign" in changed
        errors = b.errors()
    assert errors == [], errors
    assert [r for _, r in labels_of(served, [item])] == ["bob", "bob", "bob"]


def test_a_label_over_another_reviewers_claim_says_whose_on_the_page(served):
    """An item ada holds, opened by its link and labelled by bob: the label is stored (a claim
    is not a lock) and the page, the status and the store say it went over ada's claim."""
    import httpx
    from review_browser import Browser

    url = served["server"].url
    ada = {"Authorization": f"Bearer {KEYS['ada']}"}
    held = httpx.get(f"{url}/v1/review/queue?limit=1", headers=ada,
                     timeout=30).json()["items"][0]["item_id"]
    before = httpx.get(f"{url}/v1/review/status", headers=ada, timeout=30).json()
    with Browser(1280, 800) as b:
        sign_in(b, url, "bob")
        b.open(f"{url}/review/items/{held}")
        b.wait(READY)
        assert "ada holds it until" in b.eval(
            f"document.querySelector('#item-{held} .why').textContent")
        b.press("2")
        text = b.wait(f"{state_of(held)} === 'saved' && {text_of(held)}")
        assert text == "saved: benign · given while ada held this item (recorded with the label)"
        b.open(f"{url}/review/status")
        b.wait("!!document.getElementById('over-claims')")
        shown = b.eval("document.getElementById('over-claims').textContent")
        errors = b.errors()
    assert errors == [], errors
    after = httpx.get(f"{url}/v1/review/status", headers=ada, timeout=30).json()
    assert after["labels_over_claims"] == before["labels_over_claims"] + 1
    assert shown == f"{after['labels_over_claims']} given while another reviewer held the item"
    db = sqlite3.connect(served["tmp"] / "review.sqlite")
    assert db.execute("SELECT reviewer, label, over_claim FROM review_labels WHERE item_id = ?",
                      (held,)).fetchall() == [("bob", "benign", "ada")]
