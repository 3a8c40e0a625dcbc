"""`calimon serve --review` in this process, around a stand-in monitor (no model): keys with
names, sign-in, what is kept of each decision, labels (idempotent, refused with the field
named), the queue's order, second reviewers and agreement, live recertification on the status
and /metrics, export, and the pages' markup. The browser and a real server are in
tests/test_review_chromium.py; the closed loop in tests/test_review_loop.py."""

from __future__ import annotations

import json
import sqlite3
import uuid

import pytest
from review_fakes import KEYS, auth, make_service, policy, run, score

from calimon.errors import InputError
from calimon.review.settings import ReviewSettings
from calimon.serve.keys import KeyStore, sha256_hex


def label(item: str, kind: str = "benign", **extra) -> dict:
    return {"label_id": uuid.uuid4().hex, "item_id": item, "label": kind, **extra}


def _error(r, status: int, field: str) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["field"] == field and err["message"].startswith(f"{field}: "), err
    return err


# -- keys and sign-in ----------------------------------------------------------------------

def test_key_files_name_each_key_and_their_errors_name_the_line(tmp_path):
    f = tmp_path / "keys"
    f.write_text(f"# team\nada {KEYS['ada']}\nbob sha256:{sha256_hex(KEYS['bob'])}\n\n"
                 f"ada {'x' * 20}  # rotated\n")
    ks = KeyStore.load(f, "env-key-0123456789")
    assert ks.name_of(KEYS["ada"]) == "ada" and ks.name_of("x" * 20) == "ada"
    assert ks.name_of(KEYS["bob"]) == "bob" and ks.name_of("env-key-0123456789") == "service"
    assert ks.name_of("nope-0123456789abcdef") is None and ks.names() == ["ada", "bob",
                                                                            "service"]
    for text, line, field in [("ada short\n", 1, "key"), ("a/b " + "k" * 20 + "\n", 1, "name"),
                              ("\nada\n", 2, None),
                              (f"ada {'k' * 20}\nbob {'k' * 20}\n", None, "key")]:
        f.write_text(text)
        with pytest.raises(InputError) as err:
            KeyStore.load(f)
        assert err.value.line == line and err.value.field == field, (text, err.value)


def test_pages_need_a_sign_in_and_the_cookie_opens_review_only(tmp_path):
    async def scenario(c):
        r = await c.get("/review")
        assert r.status_code == 303 and r.headers["location"] == "/review/login"
        _error(await c.get("/v1/review/queue"), 401, "authorization")
        assert (await c.get("/review/login")).status_code == 200
        r = await c.post("/review/login", content="key=wrong-key-0123456789",
                         headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert r.status_code == 401 and "not a reviewer" in r.text and "set-cookie" not in r.headers
        r = await c.post("/review/login", content=f"key={KEYS['bob']}",
                         headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert r.status_code == 303 and r.headers["location"] == "/review"
        cookie = r.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        jar = {"Cookie": cookie.split(";")[0]}
        page = await c.get("/review", headers=jar)
        assert page.status_code == 200 and 'id="reviewer">bob<' in page.text
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert (await c.get("/v1/review/queue", headers=jar)).json()["reviewer"] == "bob"
        _error(await c.post("/v1/score", headers=jar, json={"request": "a", "response": "b"}),
               401, "authorization")  # the cookie opens the review routes only
        # a write from a signed-in browser: JSON from the same origin only
        item = (await score(c, 0.6, 1))["request_id"]
        assert item == "r1"
        _error(await c.post("/v1/review/labels", headers={**jar, "Content-Type": "text/plain"},
                            content="x"), 403, "content-type")
        _error(await c.post("/v1/review/labels", headers={**jar, "Origin": "http://evil.test"},
                            json=label("0" * 24)), 403, "origin")
        r = await c.post("/review/logout", headers=jar)
        assert r.status_code == 303 and "Max-Age=0" in r.headers["set-cookie"]
        assert (await c.get("/review", headers=jar)).status_code == 303

    run(make_service(tmp_path), scenario)


def test_a_signed_in_browser_write_from_another_site_is_refused_naming_the_header(tmp_path):
    """A JSON write with the sign-in cookie and no ``Origin`` was taken with a foreign
    ``Referer`` or ``Sec-Fetch-Site: cross-site``. A key is never sent by a browser on its own,
    so a write under a key is taken whatever those headers say."""
    async def scenario(c):
        r = await c.post("/review/login", content=f"key={KEYS['ada']}",
                         headers={"Content-Type": "application/x-www-form-urlencoded"})
        jar = {"Cookie": r.headers["set-cookie"].split(";")[0]}
        await score(c, 0.6, 1)
        item = (await c.get("/v1/review/queue", headers=jar)).json()["items"][0]["item_id"]
        for headers, field in (({"Sec-Fetch-Site": "cross-site"}, "sec-fetch-site"),
                               ({"Sec-Fetch-Site": "same-site"}, "sec-fetch-site"),
                               ({"Referer": "http://evil.test/page"}, "referer"),
                               ({"Origin": "null"}, "origin")):
            _error(await c.post("/v1/review/labels", headers={**jar, **headers},
                                json=label(item)), 403, field)
            _error(await c.post("/v1/review/sync", headers={**jar, **headers},
                                json={"items": {item: None}}), 403, field)
        # what the review page sends (Chromium: Origin and Sec-Fetch-Site; no Referer, the
        # pages' Referrer-Policy is no-referrer), a same-origin Referer, and no header at all
        # (a client that is not a browser: it holds the cookie only if it holds the sign-in)
        for headers in ({"Origin": "http://serve", "Sec-Fetch-Site": "same-origin"},
                        {"Referer": "http://serve/review"}, {}):
            r = await c.post("/v1/review/labels", headers={**jar, **headers}, json=label(item))
            assert r.status_code == 200, (headers, r.text)
        r = await c.post("/v1/review/labels", json=label(item), headers={
            **auth("bob"), "Sec-Fetch-Site": "cross-site", "Referer": "http://evil.test/"})
        assert r.status_code == 200, r.text

    run(make_service(tmp_path), scenario)


def test_one_pair_of_disagreeing_labels_is_measured_and_says_what_it_counts(tmp_path):
    """One item with two conflicting definite labels read agreement null and "no item has two
    definite labels yet"; a second such item then read "50% agreement on 2 label pairs"."""
    async def scenario(c):
        await score(c, 0.6, 1)
        item = (await c.get("/v1/review/queue", headers=auth("ada"))).json()["items"][0]
        for who, kind in (("ada", "benign"), ("bob", "misbehavior"), ("ada", "unsure")):
            await c.post("/v1/review/labels", headers=auth(who), json=label(item["item_id"],
                                                                             kind))
        unsure = (await c.get("/v1/review/status", headers=auth("ada"))).json()
        await c.post("/v1/review/labels", headers=auth("ada"), json=label(item["item_id"],
                                                                          "benign"))
        st = (await c.get("/v1/review/status", headers=auth("ada"))).json()
        m = (await c.get("/metrics", headers=auth("ada"))).text
        return unsure, st, m

    unsure, st, m = run(make_service(tmp_path), scenario)
    # ada's latest label is unsure: bob's is the only definite one, so no pair
    assert unsure["agreement"] == {"pairs": 0, "items": 0, "agreement": None, "kappa": None}
    right = {a["name"]: a for a in unsure["assumptions"]}["reviewers right"]
    assert right["holds"] is None and right["detail"] == (
        "not measured: no item has definite labels from two reviewers yet")
    assert st["agreement"] == {"pairs": 1, "items": 1, "agreement": 0.0, "kappa": None}
    right = {a["name"]: a for a in st["assumptions"]}["reviewers right"]
    assert right["holds"] is False and right["detail"] == (
        "0% agreement on 1 pair of definite labels from two reviewers (1 item; kappa needs 2 "
        "pairs); 1 disputed")
    assert _metric(m, "calimon_review_agreement") == 0.0


# -- what is kept ---------------------------------------------------------------------------

def test_text_is_kept_for_the_review_band_and_the_retained_draws_only(tmp_path):
    svc = make_service(tmp_path, review=ReviewSettings(store=str(tmp_path / "r.sqlite"),
                                                       retain=0.1))

    async def scenario(c):
        for i in range(80):
            r = await c.post("/v1/score", headers=auth("ada"), json={
                "id": f"t{i}", "request_id": f"r{i}", "request": f"task {i}",
                "response": f"SECRET-{i:03d} p={[0.1, 0.6, 0.9][i % 3]}"})
            assert r.status_code == 200
        return (await c.get("/v1/review/status", headers=auth("ada"))).json()

    st = run(svc, scenario)
    assert st["decisions"] == 80 and sum(s["decided"] for s in st["strata"].values()) == 80
    db = sqlite3.connect(tmp_path / "r.sqlite")
    rows = db.execute("SELECT action, draw, retained, response_text, evidence FROM "
                      "review_traffic").fetchall()
    assert len(rows) == 80
    for action, draw, kept, text, evidence in rows:
        want = action == "human_review" or draw < 0.1
        assert bool(kept) == want and (text is not None) == want and (evidence is not None) \
            == want
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("r.sqlite*"))
    kept_secrets = {t[:10] for *_, t, _ in rows if t}
    for i in range(80):
        assert (f"SECRET-{i:03d}".encode() in raw) == (f"SECRET-{i:03d}" in kept_secrets)
    assert 0 < len(kept_secrets) < 80


# -- labels ---------------------------------------------------------------------------------

def test_labels_are_stored_once_and_bad_ones_name_the_field(tmp_path):
    async def scenario(c):
        await score(c, 0.6, 1)
        await score(c, 0.95, 2)
        items = (await c.get("/v1/review/queue", headers=auth("ada"))).json()["items"]
        item = next(i for i in items if i["action"] == "human_review")
        body = label(item["item_id"], "misbehavior", note="hardcodes the test",
                     transcript_hash=item["transcript_hash"])
        first = await c.post("/v1/review/labels", headers=auth("ada"), json=body)
        again = await c.post("/v1/review/labels", headers=auth("ada"), json=body)
        assert first.status_code == again.status_code == 200
        assert first.json()["replayed"] is False and again.json()["replayed"] is True
        assert first.json()["label"] == again.json()["label"]
        assert first.json()["label"]["reviewer"] == "ada"
        _error(await c.post("/v1/review/labels", headers=auth("ada"),
                            json={**body, "label": "benign"}), 409, "label_id")
        _error(await c.post("/v1/review/labels", headers=auth("ada"),
                            json=label("f" * 24)), 404, "item_id")
        _error(await c.post("/v1/review/labels", headers=auth("ada"),
                            json={**label(item["item_id"]), "label": "maybe"}), 422, "label")
        _error(await c.post("/v1/review/labels", headers=auth("ada"),
                            json={**label(item["item_id"]), "transcript_hash": "0" * 32}),
               409, "transcript_hash")
        _error(await c.post("/v1/review/labels", headers=auth("ada"),
                            json={**label(item["item_id"]), "colour": 1}), 422, "colour")
        _error(await c.post("/v1/review/labels", headers=auth("ada"),
                            json={**label(item["item_id"]), "note": "x" * 2001}), 422, "note")
        _error(await c.get("/v1/review/queue?limit=0", headers=auth("ada")), 422, "limit")
        st = (await c.get("/v1/review/status", headers=auth("ada"))).json()
        assert st["labels"] == 1 and st["strata"]["human_review"]["misbehaving"] == 1

    run(make_service(tmp_path), scenario)
    db = sqlite3.connect(tmp_path / "r.sqlite")
    assert db.execute("SELECT COUNT(*) FROM review_labels").fetchone()[0] == 1
    assert db.execute("PRAGMA user_version").fetchone()[0] == 3


def test_second_reviewers_unsure_and_disputes_go_to_the_others_first(tmp_path):
    async def scenario(c):
        for i in range(12):
            await score(c, 0.6, i)  # all in the review band
        q = (await c.get("/v1/review/queue", headers=auth("ada"))).json()["items"]
        a, b, u = q[0]["item_id"], q[1]["item_id"], q[2]["item_id"]
        for body in (label(a, "misbehavior", second_review=True), label(b, "benign"),
                     label(u, "unsure")):
            assert (await c.post("/v1/review/labels", headers=auth("ada"),
                                 json=body)).status_code == 200
        mine = [i["item_id"] for i in (await c.get("/v1/review/queue",
                                                   headers=auth("ada"))).json()["items"]]
        theirs = (await c.get("/v1/review/queue", headers=auth("bob"))).json()["items"]
        assert a not in mine and u not in mine and b not in mine
        assert [(i["item_id"], i["reason"]) for i in theirs[:2]] == [
            (a, "second review asked"), (u, "marked unsure")]
        st = (await c.get("/v1/review/status", headers=auth("bob"))).json()
        assert st["items"]["second review"] == 1 and st["items"]["unsure"] == 1
        assert st["strata"]["human_review"]["unresolved"] == 11
        # bob agrees on a, disagrees on b: a resolves, b is disputed
        for body in (label(a, "misbehavior"), label(b, "misbehavior")):
            await c.post("/v1/review/labels", headers=auth("bob"), json=body)
        st = (await c.get("/v1/review/status", headers=auth("bob"))).json()
        assert st["items"]["disputed"] == 1 and st["items"]["resolved"] == 1
        assert st["agreement"] == {"pairs": 2, "items": 2, "agreement": 0.5,
                                   "kappa": pytest.approx(-1 / 3)}
        assert st["strata"]["human_review"]["misbehaving"] == 1
        # ada changes her mind on b: her latest label counts, and b resolves
        await c.post("/v1/review/labels", headers=auth("ada"), json=label(b, "misbehavior"))
        st = (await c.get("/v1/review/status", headers=auth("ada"))).json()
        assert st["items"]["resolved"] == 2 and "disputed" not in st["items"]

    run(make_service(tmp_path), scenario)


# -- recertification on the status and /metrics ----------------------------------------------

def _metric(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def test_labels_move_the_certificate_on_status_and_metrics(tmp_path):
    """Benign blocks break FAR <= 0.2; labelling the queue says so and /metrics too."""
    async def scenario(c):
        for i in range(90):
            await score(c, [0.1, 0.3, 0.9][i % 3], i)
        before = (await c.get("/v1/review/status", headers=auth("ada"))).json()
        far = before["certificates"][0]
        assert far["rate"] == "far" and far["state"] == "not yet certified"
        assert far["labels_needed"] > 0 and before["holds"] is False
        for _ in range(8):
            q = (await c.get("/v1/review/queue?limit=50", headers=auth("ada"))).json()["items"]
            if not q:
                break
            for it in q:  # every block is benign (a false alarm), every pass benign too
                await c.post("/v1/review/labels", headers=auth("ada"),
                             json=label(it["item_id"], "benign"))
        after = (await c.get("/v1/review/status", headers=auth("ada"))).json()
        m = (await c.get("/metrics", headers=auth("ada"))).text
        return before, after, m

    before, after, m = run(make_service(tmp_path, review=ReviewSettings(
        store=str(tmp_path / "r.sqlite"), retain=1.0)), scenario)
    far = after["certificates"][0]
    assert far["state"] == "broken" and after["broken"] is True and far["lower"] > 0.2
    assert "BROKEN" in far["line"]
    assert _metric(m, 'calimon_review_certificate_broken{rate="far"}') == 1
    assert _metric(m, 'calimon_review_certificate_holds{rate="far"}') == 0
    assert _metric(m, 'calimon_review_labels_total') == after["labels"] > 0
    assert _metric(m, 'calimon_review_decisions{action="auto_block"}') == 30
    assert _metric(m, 'calimon_review_rate_lower{rate="far"}') == pytest.approx(far["lower"])
    assert "# TYPE calimon_review_rate_upper gauge" in m


def test_a_policy_that_holds_says_so(tmp_path):
    async def scenario(c):
        for i in range(120):
            await score(c, [0.1, 0.1, 0.1, 0.9][i % 4], i)
        for _ in range(10):
            q = (await c.get("/v1/review/queue?limit=100", headers=auth("ada"))).json()["items"]
            if not q:
                break
            for it in q:  # passes are benign, blocks misbehave: no false alarm
                kind = "misbehavior" if it["action"] == "auto_block" else "benign"
                await c.post("/v1/review/labels", headers=auth("ada"),
                             json=label(it["item_id"], kind))
        return (await c.get("/v1/review/status", headers=auth("ada"))).json()

    st = run(make_service(tmp_path, policy_path=policy(tmp_path, far=0.3, mr=None),
                          review=ReviewSettings(store=str(tmp_path / "r.sqlite"),
                                                retain=1.0)), scenario)
    far = st["certificates"][0]
    assert far["state"] == "holds" and st["holds"] is True and far["upper"] <= 0.3
    assert st["certificates"][1]["alpha"] is None  # MR: bounds only, no target
    names = [a["name"] for a in st["assumptions"]]
    checked = {a["name"]: a["holds"] for a in st["assumptions"]}
    assert checked["bounds valid however often they are read"] is True
    assert "sample size not chosen by the labels" not in names


# -- export and pages -----------------------------------------------------------------------

def test_export_is_a_samples_jsonl_with_split_and_source(tmp_path):
    from calimon.samples import load_samples

    async def scenario(c):
        for i in range(40):
            await score(c, [0.1, 0.6, 0.9][i % 3], i)
        q = (await c.get("/v1/review/queue?limit=100", headers=auth("ada"))).json()["items"]
        for n, it in enumerate(q):
            await c.post("/v1/review/labels", headers=auth("ada"),
                         json=label(it["item_id"], ["benign", "misbehavior"][n % 2]))
        uni = await c.get("/v1/review/export", headers=auth("ada"))
        every = await c.get("/v1/review/export?sample=all&task=code&source=prod",
                            headers=auth("ada"))
        _error(await c.get("/v1/review/export?sample=some", headers=auth("ada")), 422, "sample")
        _error(await c.get("/v1/review/export?category=x", headers=auth("ada")), 422,
               "category")
        return uni, every, len(q)

    uni, every, n = run(make_service(tmp_path, review=ReviewSettings(
        store=str(tmp_path / "r.sqlite"), retain=0.3)), scenario)
    (tmp_path / "all.jsonl").write_text(every.text)
    samples = load_samples(tmp_path / "all.jsonl")
    assert len(samples) == n == json.loads(every.headers["x-calimon-export"])["exported"]
    assert {s.source for s in samples} == {"prod"} and {s.task for s in samples} == {"code"}
    assert {s.split for s in samples} <= {"calib", "test"} and all(
        s.label is not None for s in samples)
    summary = json.loads(uni.headers["x-calimon-export"])
    assert summary["sample"] == "uniform" and summary["exported"] <= n
    assert all(json.loads(line)["meta"]["audit_draw"] < summary["draw_cut"]
               for line in uni.text.splitlines())


def test_chat_messages_show_per_message_with_evidence_at_its_offsets(tmp_path):
    async def scenario(c):
        r = await c.post("/v1/score", headers=auth("ada"), json={
            "id": "traj", "request_id": "rq", "messages": [
                {"role": "user", "content": "Fix the failing test"},
                {"role": "assistant", "content": "Looking", "tool_calls": [
                    {"id": "c1", "type": "function",
                     "function": {"name": "bash", "arguments": "{\"cmd\": \"pytest\"}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "1 failed <script>x</script>"},
                {"role": "assistant", "content": "I EVIDENCE the answer p=0.6"}]})
        assert r.status_code == 200
        q = (await c.get("/v1/review/queue", headers=auth("ada"))).json()["items"]
        item = (await c.get(f"/v1/review/items/{q[0]['item_id']}", headers=auth("ada"))).json()
        page = await c.get("/review", headers=auth("ada"))
        one = await c.get(f"/review/items/{q[0]['item_id']}", headers=auth("ada"))
        return item, page.text, one

    item, html, one = run(make_service(tmp_path), scenario)
    assert [p["part"] for p in item["parts"]] == ["text", "tool_call", "tool_result", "text"]
    ev = item["evidence"][0]
    assert item["response"][ev["start"]:ev["end"]] == "EVIDENCE"
    assert 'class="part-head">#1 tool call: bash<' in html
    assert (f'<mark class="ev seg none" data-rank="0" data-start="{ev["start"]}" '
            'title="#1, score 0.9"><span class="tok">EVIDENCE</span></mark>') in html
    assert "&lt;script&gt;x&lt;/script&gt;" in html and "<script>x" not in html
    assert one.status_code == 200 and "opened by link" in one.text


# -- drift ----------------------------------------------------------------------------------

def _drift(tmp_path, code_share: float):
    from review_fakes import StandIn

    from calimon.studies.shift.synthetic import synthetic_traffic, write_synthetic_shift

    runs = write_synthetic_shift(tmp_path / "syn", n_calib=300, n_new=10, seed=0)
    samples, p = synthetic_traffic(200, code_share, 11, "live")
    monitor = StandIn({s.response: float(v) for s, v in zip(samples, p, strict=True)})
    pol = policy(tmp_path, far=0.1, mr=None,
                 provenance={"source": str(runs["calib"] / "curve.csv")})
    svc = make_service(tmp_path, policy_path=pol, monitor=monitor, review=ReviewSettings(
        store=str(tmp_path / "r.sqlite"), retain=1.0, drift_window=400, drift_min=50,
        drift_every=10_000, drift_permutations=50))

    async def scenario(c):
        waiting = (await c.get("/v1/review/status", headers=auth("ada"))).json()["drift"]
        for s in samples:
            r = await c.post("/v1/score", headers=auth("ada"), json={
                "id": s.id, "request_id": s.id, "request": s.request, "response": s.response})
            assert r.status_code == 200
        result = (await c.post("/v1/review/drift", headers=auth("ada"))).json()
        st = (await c.get("/v1/review/status", headers=auth("ada"))).json()
        m = (await c.get("/metrics", headers=auth("ada"))).text
        return waiting, result, st, m

    return run(svc, scenario)


def test_drift_watch_flags_the_shifted_traffic_with_its_verdict(tmp_path):
    waiting, result, st, m = _drift(tmp_path, code_share=0.9)
    assert waiting["state"] == "waiting"
    assert result["state"] == "checked" and result["window"] == 400 and result["shifted"]
    assert st["drift"]["line"] == result["line"] and "SHIFT DETECTED" in result["line"]
    (v,) = result["verdicts"]
    assert v["alpha"] == 0.1 and v["kind"].startswith("shift") and v["line"].startswith(
        "FAR <= 0.1")
    assert _metric(m, "calimon_drift_shifted") == 1 and _metric(m, "calimon_drift_window") == 400
    assert _metric(m, 'calimon_drift_breaks{alpha="0.1"}') == int(v["breaks"])
    assert 'calimon_drift_weighted_far{alpha="0.1"}' in m


def test_drift_watch_is_quiet_on_traffic_like_the_calibration(tmp_path):
    _, result, _, m = _drift(tmp_path, code_share=0.2)
    assert result["state"] == "checked" and not result["shifted"], result["line"]
    assert result["verdicts"][0]["kind"] == "no shift"
    assert _metric(m, "calimon_drift_shifted") == 0


def test_drift_watch_says_why_it_cannot_run(tmp_path):
    async def scenario(c):
        return (await c.post("/v1/review/drift", headers=auth("ada"))).json()

    result = run(make_service(tmp_path), scenario)
    assert result["state"] == "not run" and "calibration run" in result["why"]
