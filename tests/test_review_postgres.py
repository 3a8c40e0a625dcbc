"""The review store on SQLite and on a real PostgreSQL server this module starts
(tests/pg_server.py): the same contract on both (rows stored once, texts and NUL, labels stored
once per id and read back exactly, two writers racing one label id, sign-ins, versions,
claims), the
numbered migrations run once and a newer database refused, and the review queue of the app on a
PostgreSQL store. The SQLite cases run in `make test`; the PostgreSQL ones carry the
``postgres`` marker."""

from __future__ import annotations

import itertools
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from review_fakes import auth, make_service, run

from calimon.migrations import NewerStoreError
from calimon.review.labels import SCHEMA, Label, TrafficRow, item_id_of
from calimon.review.settings import ReviewSettings
from calimon.review.store import open_review_store

KINDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
_names = itertools.count()


@pytest.fixture(scope="module")
def pg():
    from pg_server import postgres_server

    with postgres_server() as server:
        yield server


@pytest.fixture(params=KINDS)
def target(request, tmp_path) -> str:
    """A fresh store's URL: a SQLite file or a PostgreSQL schema of its own."""
    if request.param == "postgres":
        return request.getfixturevalue("pg").create_schema(f"r{next(_names)}")
    return f"sqlite:///{tmp_path / 'review.sqlite'}"


def row(i: int, *, kept: bool = True, text: str = "answer") -> TrafficRow:
    return TrafficRow(item_id_of(f"r{i}"), f"r{i}", "score", None, None, 1000.0 + i, "h",
                      "human_review" if i % 2 else "auto_pass", 0, f"t{i}", i / 100, 0.5,
                      None, 0.5, f"{i:032x}", int(kept), "task" if kept else None,
                      text if kept else None, None, "[]" if kept else None)


def label(item: str, lid: str | None = None, kind: str = "benign") -> Label:
    return Label(lid or uuid.uuid4().hex, item, "ada", kind, "a note\nover lines", 0,
                 "0" * 32, 2000.5, "sha")


def test_the_store_contract(target):
    store = open_review_store(target)
    try:
        for i in range(6):
            store.record_traffic(row(i, kept=i < 4, text=f"answer {i} with a \x00 byte"))
        store.record_traffic(row(1, text="a second write of r1 is ignored"))
        index = store.traffic_index("h")
        assert [r.request_id for r in index] == [f"r{i}" for i in range(6)]
        assert all(r.response_text is None for r in index)  # the index has no text
        one = store.item(item_id_of("r1"))
        assert one.response_text in ("answer 1 with a \x00 byte", "answer 1 with a \ufffd byte")
        assert store.item(item_id_of("r5")).response_text is None and store.item("x") is None
        assert [r.request_id for r in store.window("h", 2, 1.0)] == ["r2", "r3"]
        assert [r.request_id for r in store.window("h", 10, 0.02)] == ["r0", "r1"]
        lab = label(one.item_id)
        assert store.add_label(lab) == lab and store.add_label(lab) == lab
        other = store.add_label(Label(lab.label_id, one.item_id, "bob", "misbehavior", "", 1,
                                      "0" * 32, 3000.0, "other"))
        assert other == lab  # the first label of an id wins
        assert store.labels() == [lab] and store.version("h") == (6, 1)
        store.open_session("tok", "ada", 10.0, 20.0)
        assert store.session("tok", 15.0) == "ada" and store.session("tok", 21.0) is None
        store.close_session("tok")
        assert store.session("tok", 15.0) is None
    finally:
        store.close()
    again = open_review_store(target)  # reopened: everything is still there
    try:
        assert again.version("h") == (6, 1) and again.labels() == [lab]
    finally:
        again.close()


def test_two_writers_racing_one_label_id_store_it_once(target):
    stores = [open_review_store(target) for _ in range(2)]
    try:
        stores[0].record_traffic(row(1))
        item = item_id_of("r1")
        ids = [uuid.uuid4().hex for _ in range(20)]
        with ThreadPoolExecutor(8) as pool:
            got = list(pool.map(lambda a: stores[a[0] % 2].add_label(label(item, a[1])),
                                [(n, lid) for n in range(2) for lid in ids]))
        assert {g.label_id for g in got} == set(ids)
        assert len(stores[1].labels()) == 20
    finally:
        for s in stores:
            s.close()


def test_claims_on_the_store(target):
    """A claim is taken where the item is free, its lease ended or the claimer holds it;
    released by its holder only; two writers racing for the same items get one holder each."""
    stores = [open_review_store(target) for _ in range(2)]
    try:
        a, b = stores
        x, y = item_id_of("r1"), item_id_of("r2")
        assert a.claim([], "ada", 0.0, 1.0) == {} and a.claims(0.0, []) == {}
        got = a.claim([x, y, x], "ada", 100.0, 200.0)
        assert {i: (c.reviewer, c.expires_at) for i, c in got.items()} == {
            x: ("ada", 200.0), y: ("ada", 200.0)}
        assert b.claim([x], "bob", 150.0, 250.0)[x].reviewer == "ada"  # hers till 200
        assert a.claim([x], "ada", 150.0, 300.0)[x].expires_at == 300.0  # renewed
        assert b.claim([y], "bob", 201.0, 400.0)[y].reviewer == "bob"  # her lease ended
        b.release(x, "bob")  # not his: nothing happens
        assert set(a.claims(250.0)) == {x, y} and set(a.claims(350.0)) == {y}
        a.release(x, "ada")
        assert set(b.claims(250.0)) == {y}
        items = [item_id_of(f"race{i}") for i in range(10)]
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda n: stores[n % 2].claim(
                items, ("ada", "bob")[n % 2], 1000.0, 2000.0), range(4)))
        holders = {i: c.reviewer for i, c in a.claims(1500.0, items).items()}
        assert set(holders) == set(items)
        assert all({i: c.reviewer for i, c in got.items()} == holders for got in answers)
    finally:
        for s in stores:
            s.close()


@pytest.mark.postgres
def test_postgres_migrates_once_and_refuses_a_newer_database(pg):
    import psycopg

    from calimon.serve.pg_log import postgres_schema_version

    url = pg.create_schema(f"r{next(_names)}")
    with ThreadPoolExecutor(4) as pool:  # servers starting together
        for s in list(pool.map(lambda _: open_review_store(url), range(4))):
            s.close()
    with psycopg.connect(url, autocommit=True) as conn:
        assert postgres_schema_version(conn, SCHEMA) == SCHEMA.version
        conn.execute("UPDATE calimon_schema_version SET version = 9 WHERE name = %s",
                     (SCHEMA.name,))
    with pytest.raises(NewerStoreError, match="newer calimon"):
        open_review_store(url)


@pytest.mark.postgres
def test_the_review_queue_on_a_postgresql_store(pg, tmp_path):
    url = pg.create_schema(f"r{next(_names)}")

    async def scenario(c):
        for i in range(20):
            r = await c.post("/v1/score", headers=auth("ada"), json={
                "id": f"t{i}", "request_id": f"r{i}", "request": "task",
                "response": f"answer \x00 {i} p={[0.1, 0.6, 0.9][i % 3]}"})
            assert r.status_code == 200, r.text
        q = (await c.get("/v1/review/queue", headers=auth("ada"))).json()["items"]
        body = {"label_id": uuid.uuid4().hex, "item_id": q[0]["item_id"], "label": "benign",
                "transcript_hash": q[0]["transcript_hash"]}
        first = await c.post("/v1/review/labels", headers=auth("ada"), json=body)
        again = await c.post("/v1/review/labels", headers=auth("ada"), json=body)
        nul = await c.post("/v1/review/labels", headers=auth("ada"),
                           json={**body, "label_id": uuid.uuid4().hex, "note": "a\x00b"})
        return first, again, nul, (await c.get("/v1/review/status", headers=auth("ada"))).json()

    first, again, nul, st = run(make_service(tmp_path, review=ReviewSettings(store=url,
                                                                             retain=0.5)),
                                scenario)
    assert first.status_code == again.status_code == 200 and again.json()["replayed"]
    assert nul.status_code == 422 and nul.json()["error"]["field"] == "note"
    assert st["labels"] == 1 and st["decisions"] == 20
