"""Claims and conflicts of the review queue, through the app in this process (no browser):
what a reviewer is shown is leased to them and the others get the next items; labels given
without knowing each other (two reviewers, or one reviewer's two tabs) come back as a conflict
to both pages, while a deliberate second review stays a dispute; a label names its reviewer and
is refused under anyone else's key or sign-in; a review store of schema version 1 migrates.
The same pages in Chromium are in tests/test_review_claims_chromium.py."""

from __future__ import annotations

import json
import shutil
import sqlite3
import uuid
from pathlib import Path

from review_fakes import auth, make_service, run, score

from calimon.review.labels import SCHEMA, SQLiteReviewStore, item_id_of
from calimon.review.settings import ReviewSettings

TAB_A, TAB_B = "tab-aaaaaaaa", "tab-bbbbbbbb"
DATA = Path(__file__).parent / "data"


def label(item: str, kind: str = "benign", **extra) -> dict:
    return {"label_id": uuid.uuid4().hex, "item_id": item, "label": kind, **extra}


async def post(c, who: str, body: dict) -> dict:
    r = await c.post("/v1/review/labels", headers=auth(who), json=body)
    assert r.status_code == 200, r.text
    return r.json()


async def sync(c, who: str, items: dict, renew: bool = False) -> dict:
    r = await c.post("/v1/review/sync", headers=auth(who), json={"items": items,
                                                                  "renew": renew})
    assert r.status_code == 200, r.text
    return r.json()["items"]


async def queue(c, who: str, limit: int = 20, lease: bool = True) -> list[str]:
    r = await c.get(f"/v1/review/queue?limit={limit}&lease={str(lease).lower()}",
                    headers=auth(who))
    assert r.status_code == 200, r.text
    return [i["item_id"] for i in r.json()["items"]]


def play(tmp_path, scenario, n: int = 1):
    """Run ``scenario(client, now)`` on the app after scoring ``n`` transcripts of the review
    band; the claims' clock reads ``now[0]`` (1000 at first)."""
    now = [1000.0]
    svc = make_service(tmp_path, review=ReviewSettings(store=str(tmp_path / "r.sqlite"),
                                                       retain=0.5))
    svc.review.clock = lambda: now[0]

    async def main(c):
        for i in range(n):
            await score(c, 0.6, i)
        return await scenario(c, now)

    return run(svc, main)


async def first(c, who: str = "ada") -> str:
    """The first item of ``who``'s queue, leased to them."""
    return (await queue(c, who))[0]


def test_what_a_reviewer_is_shown_is_leased_and_the_others_get_the_next_items(tmp_path):
    async def scenario(c, now):  # twelve items, all in the review band
        everything = await queue(c, "ada", lease=False)
        assert len(everything) == 12 and await queue(c, "bob", lease=False) == everything
        shown = await queue(c, "ada", limit=5)
        assert shown == everything[:5]
        theirs = await queue(c, "bob", limit=20)
        assert theirs == everything[5:]  # ada's five are hers: bob gets the next ones
        assert await queue(c, "ada", limit=5) == shown  # hers still, renewed
        page = (await c.get("/review", headers=auth("ada"))).text
        assert "yours alone until" in page and all(f'id="item-{i}"' not in page
                                                   for i in theirs)
        # a label releases the claim: the second review ada asks for goes to bob at once
        await post(c, "ada", label(shown[0], "misbehavior", second_review=True))
        now[0] += 60
        assert (await queue(c, "bob", lease=False))[0] == shown[0]
        # a lease ends: bob gets the rest of ada's items
        now[0] += 10 * 60 + 1
        assert set(await queue(c, "bob", lease=False)) == set(everything)
        # renewing: a page at work keeps its items; one not at work lets them go
        fresh = await queue(c, "ada", limit=3)
        now[0] += 9 * 60
        got = await sync(c, "ada", dict.fromkeys(fresh), renew=True)
        assert {n["held_by"] for n in got.values()} == {"ada"}
        now[0] += 9 * 60
        assert not set(fresh) & set(await queue(c, "bob", lease=False))
        await sync(c, "ada", dict.fromkeys(fresh), renew=False)
        now[0] += 2 * 60
        assert set(fresh) <= set(await queue(c, "bob", lease=False))

    play(tmp_path, scenario, 12)


def test_an_item_opened_by_link_says_who_holds_it(tmp_path):
    async def scenario(c, now):
        item = await first(c)
        page = (await c.get(f"/review/items/{item}", headers=auth("bob"))).text
        assert "ada holds it until" in page
        own = (await c.get(f"/review/items/{item}", headers=auth("ada"))).text
        assert "holds it" not in own

    play(tmp_path, scenario)


def test_two_tabs_labelling_one_item_unknowingly_see_a_conflict_on_both(tmp_path):
    async def scenario(c, now):
        item = await first(c)
        a = await post(c, "ada", label(item, "benign", tab=TAB_A, seen=0))
        assert a["conflicts"] == [] and a["item_labels"] == 1
        b = await post(c, "ada", label(item, "misbehavior", tab=TAB_B, seen=0))
        a_id, b_id = a["label"]["label_id"], b["label"]["label_id"]
        assert [x["label_id"] for x in b["conflicts"]] == [a_id] and b["item_labels"] == 2
        seen_a = await sync(c, "ada", {item: a_id})
        assert [x["label_id"] for x in seen_a[item]["conflicts"]] == [b_id]
        assert seen_a[item]["conflicts"][0]["label"] == "misbehavior"
        assert [x["label_id"] for x in (await sync(c, "ada", {item: b_id}))[item]
                ["conflicts"]] == [a_id]
        # tab A labels again knowing both: the conflict ends, and tab B learns its label was
        # changed on another page
        again = await post(c, "ada", label(item, "benign", tab=TAB_A, seen=2))
        assert again["conflicts"] == []
        seen_b = (await sync(c, "ada", {item: b_id}))[item]
        assert seen_b["conflicts"] == [] and seen_b["changed"]["label"] == "benign"
        assert (await sync(c, "ada", {item: again["label"]["label_id"]}))[item][
            "conflicts"] == []
        st = (await c.get("/v1/review/status", headers=auth("ada"))).json()
        assert st["items"] == {"resolved": 1}  # one reviewer: her latest label counts

    play(tmp_path, scenario)


def test_two_reviewers_unknowingly_conflict_but_a_second_review_is_a_dispute(tmp_path):
    async def scenario(c, now):
        x, y = await queue(c, "ada", limit=2)
        # x: ada's lease ends, bob gets x, both label it, neither knowing the other
        a = await post(c, "ada", label(x, "benign", tab=TAB_A, seen=0))
        now[0] += 11 * 60
        b = await post(c, "bob", label(x, "misbehavior", tab=TAB_B, seen=0))
        assert [c_["reviewer"] for c_ in b["conflicts"]] == ["ada"]
        got = await sync(c, "ada", {x: a["label"]["label_id"]})
        assert [c_["reviewer"] for c_ in got[x]["conflicts"]] == ["bob"]
        # y: ada asks for a second review; bob's queue gives it him with its label count
        first = await post(c, "ada", label(y, "benign", tab=TAB_A, seen=0,
                                           second_review=True))
        theirs = (await c.get("/v1/review/queue", headers=auth("bob"))).json()["items"]
        assert (theirs[0]["item_id"], theirs[0]["reason"]) == (y, "second review asked")
        shown = (await c.get(f"/v1/review/items/{y}", headers=auth("bob"))).json()
        assert shown["labels"] == 1
        second = await post(c, "bob", label(y, "misbehavior", tab=TAB_B,
                                            seen=shown["labels"]))
        assert second["conflicts"] == []
        assert (await sync(c, "ada", {y: first["label"]["label_id"]}))[y]["conflicts"] == []
        st = (await c.get("/v1/review/status", headers=auth("ada"))).json()
        assert st["items"]["disputed"] == 2  # both disagree: disputes, as before
        assert st["agreement"]["items"] == 2

    play(tmp_path, scenario, 4)


def test_one_page_labelling_twice_and_api_labels_without_seen_are_no_conflict(tmp_path):
    async def scenario(c, now):
        item = await first(c)
        # an outbox that held two labels of one item (both given as the item was shown)
        await post(c, "ada", label(item, "benign", tab=TAB_A, seen=0))
        assert (await post(c, "ada", label(item, "misbehavior", tab=TAB_A,
                                           seen=0)))["conflicts"] == []
        # a client that does not say what it knew is taken to know every label
        assert (await post(c, "bob", label(item, "benign")))["conflicts"] == []

    play(tmp_path, scenario)


def test_a_label_names_its_reviewer_and_is_refused_under_another(tmp_path):
    async def scenario(c, now):
        item = await first(c)
        body = label(item, "benign", reviewer="ada")
        r = await c.post("/v1/review/labels", headers=auth("bob"), json=body)
        assert r.status_code == 409, r.text
        err = r.json()["error"]
        assert err["field"] == "reviewer" and err["message"] == (
            "reviewer: this label was given by ada and is stored only under ada's key or "
            "sign-in; this request is bob's"), err  # it read "not 'bob''s"
        # a signed-in browser is refused the same way
        r = await c.post("/review/login", content="key=bob-key-0123456789abcdef",
                         headers={"Content-Type": "application/x-www-form-urlencoded"})
        jar = {"Cookie": r.headers["set-cookie"].split(";")[0]}
        r = await c.post("/v1/review/labels", headers=jar, json=body)
        assert r.status_code == 409 and r.json()["error"]["field"] == "reviewer"
        stored = await post(c, "ada", body)
        assert stored["label"]["reviewer"] == "ada" and stored["replayed"] is False
        for bad, field in ((
                {"seen": "0"}, "seen"), ({"seen": 2.0}, "seen"), ({"seen": True}, "seen"),
                ({"seen": -1}, "seen"), ({"tab": "a b c d e f"}, "tab"),
                ({"reviewer": "a/b"}, "reviewer")):
            r = await c.post("/v1/review/labels", headers=auth("ada"),
                             json={**label(item), **bad})
            assert r.status_code == 422 and r.json()["error"]["field"] == field, (bad, r.text)
        r = await c.post("/v1/review/sync", headers=auth("ada"), json={"items": {"x": None}})
        assert r.status_code == 422, r.text
        r = await c.post("/v1/review/sync", headers=auth("ada"),
                         json={"items": {f"{i:024x}": None for i in range(501)}})
        assert r.status_code == 422 and r.json()["error"]["field"] == "items", r.text

    play(tmp_path, scenario)
    rows = sqlite3.connect(tmp_path / "r.sqlite").execute(
        "SELECT reviewer FROM review_labels").fetchall()
    assert rows == [("ada",)]


def test_a_label_over_another_reviewers_claim_is_stored_and_says_whose(tmp_path):
    """A claim keeps an item off the others' queues; it does not lock it (an item opened by
    its link, a label waiting in an outbox past the lease). Before, bob's label of an item ada
    held was stored like any other and nothing said so; now the label, the status, the pages
    and the export name the claim it went over."""
    async def scenario(c, now):
        item, other = await queue(c, "ada", limit=2)  # both leased to ada
        over = await post(c, "bob", label(item, "benign"))
        assert over["label"]["over_claim"] == "ada"
        assert over["status"]["labels_over_claims"] == 1
        own = await post(c, "ada", label(item, "benign"))
        assert own["label"]["over_claim"] is None  # her own claim
        now[0] += 11 * 60  # ada's lease of the other item ends: bob's label goes over nothing
        assert (await post(c, "bob", label(other, "benign")))["label"]["over_claim"] is None
        st = (await c.get("/v1/review/status", headers=auth("ada"))).json()
        assert st["labels"] == 3 and st["labels_over_claims"] == 1
        page = (await c.get("/review/status", headers=auth("ada"))).text
        assert '<span id="over-claims">1 given while another reviewer held the item' in page
        mine = (await c.get(f"/review/items/{item}", headers=auth("bob"))).text
        assert "your label: benign (given while ada held this item)" in mine
        r = await c.get("/v1/review/export?sample=all", headers=auth("ada"))
        meta = {json.loads(x)["id"]: json.loads(x)["meta"] for x in r.text.splitlines()}
        assert sorted((m["over_claims"] for m in meta.values()), key=len) == [
            {}, {"bob": "ada"}]

    play(tmp_path, scenario, 2)
    rows = sqlite3.connect(tmp_path / "r.sqlite").execute(
        "SELECT reviewer, over_claim FROM review_labels ORDER BY created_at").fetchall()
    assert rows == [("bob", "ada"), ("ada", None), ("bob", None)]


def test_the_pages_carry_what_the_script_needs(tmp_path):
    async def scenario(c, now):
        login = (await c.get("/review/login")).text
        page = (await c.get("/review", headers=auth("ada"))).text
        js = (await c.get("/review/static/review.js")).text
        return login, page, js

    login, page, js = play(tmp_path, scenario)
    assert 'src="/review/static/review.js"' in login and 'id="others"' in login
    assert 'data-seen="0"' in page and 'id="sign-out"' in page and 'id="sign-out-note"' in page
    assert "calimon-review-outbox:" in js and "/v1/review/sync" in js


def test_a_review_store_of_schema_version_1_migrates(tmp_path):
    path = tmp_path / "r.sqlite"
    shutil.copyfile(DATA / "review-store-0.1.0.sqlite", path)
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 1
    store = SQLiteReviewStore(path)
    try:
        labels = store.labels()
        assert [(x.label_id, x.reviewer, x.label, x.seen, x.tab) for x in labels] == [
            ("label-ada-0001", "ada", "benign", None, None),
            ("label-bob-0001", "bob", "misbehavior", None, None)]
        assert [x.over_claim for x in labels] == [None, None]
        assert store.session("tok-sha", 20.0) == "ada" and store.version("h") == (3, 2)
        item = item_id_of("r1")
        assert store.claim([item], "ada", 5.0, 50.0)[item].reviewer == "ada"
    finally:
        store.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA.version == 3
