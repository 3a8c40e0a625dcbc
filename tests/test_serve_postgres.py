"""The decision log of `calimon serve` in a real PostgreSQL server that this module starts
(tests/pg_server.py: Debian's postgresql, a temporary data folder, loopback only), against the
same tests as the SQLite log: the first answer of an id wins and survives reopening, an answer
round-trips exactly, two racing writers (two connections, two services) answer the same logged
decision, and a retried request is answered from the log. Then what only PostgreSQL has: its
schema versions (numbered migrations, run once by servers starting together; a newer database
refused), a restart of PostgreSQL under an open log, and `calimon serve --log postgresql://...`
on the embedded model, SIGKILLed under load: every answer a client got is in the log once.

The SQLite cases run in `make test`; the PostgreSQL ones carry the ``postgres`` marker (CI's
postgres suite, after .ci/install-postgres.sh)."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import replace

import httpx
import pytest
from pg_server import postgres_server
from test_serve_app import AUTH, FakeMonitor, make_service, run, score_body

from calimon.migrations import NewerStoreError
from calimon.serve.app import create_app
from calimon.serve.decision_log import COLUMNS, SCHEMA, LoggedDecision, open_log
from calimon.serve.pg_log import postgres_schema_version, redact

KINDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
_names = itertools.count()


@pytest.fixture(scope="module")
def pg():
    """One PostgreSQL server for the module; each test makes its own database."""
    with postgres_server() as server:
        yield server


class Target:
    """Where a test's log lives: a fresh SQLite file or a fresh PostgreSQL database."""

    def __init__(self, kind: str, request, tmp_path):
        self.kind = kind
        if kind == "postgres":
            self.pg = request.getfixturevalue("pg")
            self.url = self.pg.create_schema(f"t{next(_names)}")
        else:
            self.url = f"sqlite:///{tmp_path / 'log' / 'decisions.sqlite'}"

    def open(self):
        """A new log (a new connection) on the target."""
        return open_log(self.url)


@pytest.fixture(params=KINDS)
def target(request, tmp_path) -> Target:
    return Target(request.param, request, tmp_path)


@pytest.fixture
def pg_target(request, tmp_path) -> Target:
    return Target("postgres", request, tmp_path)


def _entry(rid: str, decision: str = "pass", **kw) -> LoggedDecision:
    response = {"request_id": rid, "status": "ok", "decision": decision, "action": "auto_pass",
                "audit": False, "p_raw": 0.1, "p_cal": None, "policy_hash": "h",
                "model_revision": "r"}
    return LoggedDecision(rid, "score", kw.pop("digest", "d"), response, **kw)


# -- the same log tests on both ----------------------------------------------------------------

def test_the_log_keeps_the_first_answer_of_an_id_and_survives_reopening(target):
    log = target.open()
    first = log.record(_entry("a", "pass"))
    again = log.record(_entry("a", "block", digest="other"))
    assert first.response["decision"] == again.response["decision"] == "pass"
    assert again.request_sha256 == "d" and log.count() == 1
    log.record(_entry("s1", session_id="sess", step=3))
    log.close()
    log.close()  # twice is fine
    reopened = target.open()
    assert reopened.count() == 2 and reopened.lookup("nope") is None
    got = reopened.lookup("s1")
    assert (got.session_id, got.step, got.response["p_cal"]) == ("sess", 3, None)
    assert got.received_at > 0 and reopened.lookup("a").response["decision"] == "pass"
    reopened.close()


def test_a_logged_answer_round_trips_exactly(target):
    log = target.open()
    e = _entry("x", received_at=1_700_000_000.123456)
    e.response.update(p_raw=0.1234567890123456789, p_cal=1e-300, audit=True,
                      evidence=[{"quote": "rm -rf / ünïcødé \u2028", "score": -0.0}])
    got = log.record(e)
    assert got.response == json.loads(json.dumps(e.response))
    assert got.received_at == 1_700_000_000.123456
    assert target.open().lookup("x").response == got.response
    log.close()


def test_racing_writers_answer_the_same_logged_decision(target):
    """Pairs of writers on two connections record different answers under one id at the same
    moment: both get back the one answer the log keeps."""
    logs = [target.open(), target.open()]
    ids = [f"race-{i}" for i in range(30)]
    barriers = {rid: threading.Barrier(2) for rid in ids}

    def write(side: int, rid: str) -> LoggedDecision:
        barriers[rid].wait(10)
        return logs[side].record(_entry(rid, ("pass", "block")[side], digest=f"d{side}"))

    with ThreadPoolExecutor(2) as pool:
        futures = [(rid, pool.submit(write, side, rid)) for rid in ids for side in (0, 1)]
        got: dict[str, list[LoggedDecision]] = {}
        for rid, f in futures:
            got.setdefault(rid, []).append(f.result(timeout=60))
    for rid, (a, b) in got.items():
        assert a == b, rid  # the same entry: decision, body hash and time
        assert a.response["decision"] == ("pass", "block")[int(a.request_sha256[1])]
    assert logs[0].count() == logs[1].count() == len(ids)
    for log in logs:
        log.close()


def test_a_group_logs_each_id_once_as_one_entry_at_a_time_would(target):
    """A group of plain decisions (PostgreSQL: one insert of one array per column) and the same
    group with a
    session step in it (one statement each) give what `record` one by one gives: an id logged
    before, or earlier in the group, keeps its first answer."""
    log = target.open()
    log.record(_entry("old", "block", digest="d-old"))
    plain = log.record_many([_entry("new", "pass"), _entry("old", "pass"),
                             _entry("new", "block", digest="d2"), _entry("next", "block")])
    assert [(e.request_id, e.response["decision"], e.request_sha256) for e in plain] == [
        ("new", "pass", "d"), ("old", "block", "d-old"), ("new", "pass", "d"),
        ("next", "block", "d")]
    mixed = log.record_many([_entry("m", "block"), _entry("new", "block", digest="d3"),
                             _entry("step", session_id="sess", step=0)])
    assert [(e.request_id, e.response["decision"]) for e in mixed] == [
        ("m", "block"), ("new", "pass"), ("step", "pass")]
    assert log.count() == 5 and log.lookup("next").response["decision"] == "block"
    log.close()


def test_a_group_keeps_every_value_exactly_as_one_entry_at_a_time_would(target):
    """Quotes, backslashes, braces, commas and non-ASCII text, None in every row of a column,
    a float's every digit and steps and times, through a group (on PostgreSQL: arrays sent in
    binary) and through `record` alone: the same entries come back."""
    odd = 'a "quoted" \\ back{slash}, comma; é 漢 \t tab'
    def entry(rid, p_raw, **kw):
        e = _entry(rid, **kw)
        e.response.update(p_raw=p_raw, p_cal=None, policy_hash=odd, model_revision="NULL")
        return replace(e, received_at=1764000000.123456789)
    group = [entry(f"{odd}-{i}", p) for i, p in enumerate((0.1 + 0.2, 1e-300, 1.0, None))]
    log = target.open()
    got = log.record_many(group)
    alone = [target.open().lookup(e.request_id) for e in group]
    assert got == alone
    for e, g in zip(group, got, strict=True):
        assert (g.request_id, g.response, g.received_at, g.session_id, g.step) == (
            e.request_id, e.response, e.received_at, None, None)
    log.close()


@pytest.mark.postgres
def test_a_lookup_never_waits_for_a_commit_under_way(pg_target):
    """Lookups have a connection of their own: the next requests are looked up while the
    writer's connection is busy with a commit."""
    log = pg_target.open()
    log.record(_entry("a"))
    found: list = []
    with log._lock:  # the writer's connection, held as a commit on disk holds it
        reader = threading.Thread(target=lambda: found.append(log.lookup_many(["a", "b"])))
        reader.start()
        reader.join(30)
        assert not reader.is_alive(), "the lookup waited for the writer"
    assert list(found[0]) == ["a"] and found[0]["a"].response["decision"] == "pass"
    log.close()


def test_a_retried_request_is_answered_from_the_log(target, tmp_path):
    """Through the app: a retry of an answered id is the logged answer, scored once; a second
    server on the same log (another replica) answers it from the log without scoring."""
    monitor, other = FakeMonitor(), FakeMonitor()
    service = make_service(tmp_path / "a", monitor, log=target.open())
    second = make_service(tmp_path / "b", other, log=target.open())

    async def scenario(c):
        a = await c.post("/v1/score", headers=AUTH, json=score_body("0.9", request_id="r-1"))
        b = await c.post("/v1/score", headers=AUTH, json=score_body("0.9", request_id="r-1"))
        reused = await c.post("/v1/score", headers=AUTH, json=score_body("0.1",
                                                                          request_id="r-1"))
        return a, b, reused

    async def on_second(c):
        return await c.post("/v1/score", headers=AUTH, json=score_body("0.9", request_id="r-1"))

    a, b, reused = run(service, scenario)
    replica = run(second, on_second)
    assert a.status_code == b.status_code == replica.status_code == 200
    assert a.json()["decision"] == "block"
    assert b.json() == a.json() == replica.json()
    assert b.headers["idempotent-replayed"] == replica.headers["idempotent-replayed"] == "true"
    assert reused.status_code == 409 and reused.json()["error"]["field"] == "request_id"
    assert sum(monitor.batches) == 1 and other.batches == []
    assert second.log.count() == 1


class _Racing(FakeMonitor):
    """A monitor whose calls wait for each other (both servers are scoring at once) and that
    reads ``p`` whatever the transcript says (two replicas disagreeing)."""

    def __init__(self, barrier: threading.Barrier, p: float):
        super().__init__()
        self.barrier, self.p = barrier, p

    def score(self, samples):
        self.barrier.wait(30)
        return [replace(v, p_raw=self.p) for v in super().score(samples)]


def test_two_servers_scoring_one_id_at_once_answer_the_logged_decision(target, tmp_path):
    barrier = threading.Barrier(2)
    services = [make_service(tmp_path / "a", _Racing(barrier, 0.9), log=target.open()),
                make_service(tmp_path / "b", _Racing(barrier, 0.1), log=target.open())]

    async def main():
        for s in services:
            await s.start()
        try:
            clients = [httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(s)),
                                         base_url="http://serve") for s in services]
            body = score_body("0.5", request_id="both")
            answers = await asyncio.gather(*[c.post("/v1/score", headers=AUTH, json=body)
                                             for c in clients])
            for c in clients:
                await c.aclose()
            return answers
        finally:
            for s in services:
                await s.batcher.stop()

    a, b = asyncio.run(main())
    assert a.status_code == b.status_code == 200
    assert a.json() == b.json()  # one of them scored 0.9 and the other 0.1: the log's wins
    assert a.json()["decision"] in ("block", "pass")
    assert services[0].log.lookup("both").response == a.json()
    assert services[0].log.count() == 1


def test_shadow_decisions_and_policy_changes_round_trip_and_survive_reopening(target):
    from calimon.serve.policy_log import PolicyChange, history

    log = target.open()
    shadow = {**_entry("s1").response, "shadow": True, "policy_hash": "B",
              "live_policy_hash": "A", "p_raw": 0.25}
    log.record_shadow("s1", shadow)
    log.record_shadow("s1", {**shadow, "decision": "block"})  # the first one stays
    first = log.record_change(PolicyChange("deploy", "a", "A", "/p/a.yaml"))
    second = log.record_change(PolicyChange("promote", "b", "B", "/p/b.yaml", "A", "ada",
                                            {"mr": {"difference": 0.25}}))
    assert (first.seq, second.seq) == (1, 2)
    log.close()
    again = target.open()
    assert again.shadow_answers("B") == {"s1": shadow} and again.shadow_answers("A") == {}
    changes = again.changes()
    assert [(c.seq, c.kind, c.by_whom) for c in changes] == [(1, "deploy", "server"),
                                                               (2, "promote", "ada")]
    from calimon import __version__

    assert changes[1].detail == {"mr": {"difference": 0.25}, "calimon_version": __version__}
    assert [s.path for s in history(changes)] == ["/p/a.yaml", "/p/b.yaml"]
    again.close()


# -- what only PostgreSQL has ------------------------------------------------------------------

@pytest.mark.postgres
def test_the_postgres_table_is_the_sqlite_schema_at_a_recorded_version(pg_target):
    import psycopg

    log = pg_target.open()
    with psycopg.connect(pg_target.url) as conn:
        assert postgres_schema_version(conn, SCHEMA) == SCHEMA.version == 4
        types = dict(conn.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = "
            "'decisions' AND table_schema = current_schema() ORDER BY ordinal_position")
            .fetchall())
        key = conn.execute("SELECT a.attname FROM pg_index i JOIN pg_attribute a ON "
                           "a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) WHERE "
                           "i.indrelid = 'decisions'::regclass AND i.indisprimary").fetchall()
        indexes = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE "
                                              "tablename = 'decisions' AND schemaname = "
                                              "current_schema()")}
    assert tuple(types) == COLUMNS
    assert types["request_id"] == "text" and types["step"] == "integer"
    assert types["p_raw"] == types["received_at"] == "double precision"
    assert key == [("request_id",)] and "decisions_session" in indexes
    log.close()


@pytest.mark.postgres
def test_servers_starting_together_migrate_once_and_a_newer_database_is_refused(pg_target):
    import psycopg

    barrier = threading.Barrier(4)

    def start():
        barrier.wait(10)
        return pg_target.open()

    with ThreadPoolExecutor(4) as pool:
        logs = list(pool.map(lambda _: start(), range(4)))
    logs[0].record(_entry("kept"))
    assert all(log.count() == 1 for log in logs)
    for log in logs:
        log.close()
    with psycopg.connect(pg_target.url, autocommit=True) as conn:
        assert conn.execute("SELECT name, version FROM calimon_schema_version").fetchall() == \
            [("decision log", 4)]
        conn.execute("UPDATE calimon_schema_version SET version = 5")
    with pytest.raises(NewerStoreError, match="schema version 5.*newer calimon") as err:
        pg_target.open()
    assert "127.0.0.1" in str(err.value)


@pytest.mark.postgres
def test_a_database_with_the_table_from_before_versions_is_migrated_in_place(pg_target):
    import psycopg

    from calimon.serve.decision_log import TABLE_SQL

    row = _entry("old").row()
    with psycopg.connect(pg_target.url, autocommit=True) as conn:
        conn.execute(TABLE_SQL)
        conn.execute(f"INSERT INTO decisions ({', '.join(COLUMNS)}) VALUES "
                     f"({', '.join(['%s'] * len(COLUMNS))})", row)
    log = pg_target.open()
    assert log.lookup("old").response["decision"] == "pass" and log.count() == 1
    with psycopg.connect(pg_target.url) as conn:
        assert postgres_schema_version(conn, SCHEMA) == SCHEMA.version == 4
    assert log.changes() == []  # migration 4's tables are there too
    log.close()


@pytest.mark.postgres
def test_an_open_log_outlives_a_postgres_restart_and_a_stopped_one_is_503(pg_target, tmp_path):
    log = pg_target.open()
    log.record(_entry("before"))
    pg_target.pg.restart()  # every connection is cut
    assert log.lookup("before").response["decision"] == "pass"  # opened again, retried
    log.record(_entry("after"))
    assert log.count() == 2

    service = make_service(tmp_path, FakeMonitor(), log=log)

    async def scenario(c):
        pg_target.pg.pg_ctl("-m", "fast", "-w", "stop")
        try:
            down = [await c.post("/v1/score", headers=AUTH, json=score_body(
                "0.9", request_id=rid)) for rid in ("new", None)]
        finally:
            pg_target.pg.start()
        up = await c.post("/v1/score", headers=AUTH, json=score_body("0.9", request_id="new"))
        return down, up, (await c.get("/metrics", headers=AUTH)).text

    down, up, metrics = run(service, scenario)
    for r in down:  # read (with an id) or write (without): nothing unlogged is answered
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        assert r.json()["error"]["code"] == "log_unavailable"
    assert up.status_code == 200 and "idempotent-replayed" not in up.headers
    assert 'calimon_errors_total{kind="log"} 2' in metrics
    assert log.count() == 3
    log.close()


def test_a_password_in_a_url_is_never_shown():
    assert redact("postgresql://u:s3cret@db:5432/x?sslmode=require") == \
        "postgresql://u:***@db:5432/x?sslmode=require"
    assert redact("postgres://db/x?user=u&password=s3cret&sslmode=require") == \
        "postgres://db/x?user=u&password=***&sslmode=require"
    assert redact("postgresql://u@db/x") == "postgresql://u@db/x"
    assert redact("runs/serve/decisions.sqlite") == "runs/serve/decisions.sqlite"


# -- calimon serve --log postgresql://... on the embedded model --------------------------------

N = 16
KILL_AFTER = 5
ARGS = ("--max-input-tokens", "512", "--batch-wait-ms", "20", "--max-batch", "4")


def _bodies() -> list[dict]:
    return [{"request_id": f"pg-{i}", "id": f"tx-{i}",
             "request": f"Write sub{i}(a, b) returning a minus b.",
             "response": f"def sub{i}(a, b):\n    return a - b{' - 0' * (i % 4)}\n"}
            for i in range(N)]


def _load_until_killed(server) -> dict[str, dict]:
    answered: dict[str, dict] = {}
    lock, local = threading.Lock(), threading.local()

    def send(body):
        if not hasattr(local, "client"):
            local.client = server.client(timeout=60)
        try:
            r = local.client.post("/v1/score", json=body)
        except httpx.HTTPError:
            return
        if r.status_code == 200:
            with lock:
                answered[body["request_id"]] = r.json()
                if len(answered) == KILL_AFTER:
                    server.kill()

    with ThreadPoolExecutor(4) as pool:
        for f in as_completed([pool.submit(send, b) for b in _bodies()]):
            f.result()
    return answered


@pytest.mark.postgres
@pytest.mark.model
def test_calimon_serve_on_postgres_killed_under_load_loses_no_answered_request(pg, tmp_path):
    """A real `calimon serve --log postgresql://...`: one id sent three times at once is one
    decision, a retry is answered from the log, and after a SIGKILL in the middle of a load
    every answer a client got is in PostgreSQL exactly once, as answered. (Restarting on the
    log and resending is the SQLite fault test, tests/test_serve_faults.py, and for PostgreSQL
    the Ray Serve test, tests/test_serve_ray.py, which restarts a replica.)"""
    import psycopg
    from serve_server import start_server, write_policy

    policy, map_path = write_policy(tmp_path)
    url = pg.create_schema("serve_e2e")
    shown = url.replace("calimon@", "calimon:s3cret-pw@")  # trust auth: the password is unused
    out = tmp_path / "server.out"
    server = start_server(policy, shown, out, *ARGS, map_path=map_path)
    try:
        with server.client() as c:
            body = {**_bodies()[0], "request_id": "twice"}
            with ThreadPoolExecutor(3) as pool:
                same = list(pool.map(lambda _: c.post("/v1/score", json=body), range(3)))
            retry = c.post("/v1/score", json=body)
        answered = _load_until_killed(server)
    finally:
        server.stop()
    assert server.proc.returncode == -9
    assert KILL_AFTER <= len(answered) < N  # killed in the middle of the load
    assert all(r.status_code == 200 for r in [*same, retry])
    assert len({json.dumps(r.json(), sort_keys=True) for r in [*same, retry]}) == 1
    assert retry.headers["idempotent-replayed"] == "true"
    answered["twice"] = retry.json()

    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT request_id, decision, response FROM decisions").fetchall()
    counts = {rid: sum(r[0] == rid for r in rows) for rid in answered}
    logged = {rid: (decision, json.loads(response)) for rid, decision, response in rows}
    assert set(counts.values()) == {1}  # every answered request, exactly once
    for rid, answer in answered.items():  # as it was answered
        assert logged[rid] == (answer["decision"], answer)
    text = out.read_text(errors="replace")
    assert "decision log postgresql://calimon:***@127.0.0.1" in text
    assert "s3cret-pw" not in text and "Write sub" not in text
