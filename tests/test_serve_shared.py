"""Servers sharing one decision log are one service, in this process around a stand-in monitor
whose score depends on the whole trajectory: a session's steps alternated between two servers
score as on one (each rebuilds the session from the log's steps), two servers taking one step
index at once log it once, a deleted session is forgotten by every server, a log from before
the steps were kept is migrated in place, and the ``/metrics`` of a named deployment count the
requests of both servers. Each case runs on SQLite and on a real PostgreSQL server; the
module is in the postgres suite (``pytest -m postgres``), which keeps `make test` as it was. The same on the embedded model, two `calimon serve` processes and one of them
SIGKILLed at step 10, is tests/test_serve_shared_http.py; on Ray Serve, tests/test_serve_ray.py.
"""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
import threading
from dataclasses import replace

import httpx
import pytest
from test_serve_app import AUTH, FakeMonitor, make_service, score_body
from test_serve_postgres import Target, pg  # noqa: F401 - pg: the module's server fixture

from calimon.serve.app import create_app
from calimon.serve.decision_log import SCHEMA, TABLE_SQL, open_log
from calimon.verdict import Verdict

pytestmark = pytest.mark.postgres

N_STEPS = 20


@pytest.fixture(params=["sqlite", "postgres"])
def target(request, tmp_path) -> Target:
    return Target(request.param, request, tmp_path)


class Race:
    """The first ``parties`` monitor calls wait for each other (servers scoring at once)."""

    def __init__(self, parties: int = 2):
        self.barrier, self.left, self.lock = threading.Barrier(parties), parties, threading.Lock()

    def join(self) -> None:
        with self.lock:
            mine, self.left = self.left > 0, self.left - 1
        if mine:
            self.barrier.wait(30)


class TrajectoryMonitor(FakeMonitor):
    """p_raw: a number drawn from the hash of the whole transcript, so a step scored on a
    trajectory missing any earlier step scores otherwise. ``race["now"]``: a `Race` its calls
    join."""

    def __init__(self, race: dict | None = None):
        super().__init__()
        self.race = race if race is not None else {}

    def score(self, samples):
        if self.race.get("now") is not None:
            self.race["now"].join()
        self.backend.forward_calls += 1
        out = []
        for s in samples:
            digest = hashlib.sha256(f"{s.request}\0{s.response}".encode()).hexdigest()
            out.append(Verdict(transcript_hash=s.transcript_hash, readout="verdict",
                               status="ok", p_raw=int(digest[:8], 16) / 0xFFFFFFFF,
                               tokens=len(s.response)))
        return out


def step_body(i: int, **extra) -> dict:
    body = {"request_id": f"{extra.pop('tag', 's')}-{i}", "step": i,
            "messages": [{"role": "assistant", "content": f"step {i}: ran test {i}"},
                         {"role": "tool", "content": f"{i} passed, {i % 3} failed"}]}
    if i == 0:
        body["messages"].insert(0, {"role": "user", "content": "Make the tests pass."})
    return {**body, **extra}


def servers(tmp_path, target: Target, n: int = 2, monitor=None, **settings):
    """``n`` services on ``target``'s log (each its own connection), as n processes would be."""
    out = []
    for k in range(n):
        folder = tmp_path / f"server{k}"
        folder.mkdir(parents=True)
        service = make_service(folder, monitor or TrajectoryMonitor(), log=target.open())
        if settings:
            service.settings = replace(service.settings, **settings)
        service.replica = f"server{k}"  # in one process: named apart, as processes are
        out.append(service)
    return out


def run_all(services, scenario):
    """``scenario(clients)`` with every service's app and queue running in this loop."""

    async def main():
        for s in services:
            await s.start()
        clients = [httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(s)),
                                     base_url=f"http://server{k}", headers=AUTH)
                   for k, s in enumerate(services)]
        try:
            return await scenario(clients)
        finally:
            for c in clients:
                await c.aclose()
            for s in services:
                await s.stop()

    return asyncio.run(main())


def test_steps_alternated_between_two_servers_score_as_on_one(tmp_path, target):
    async def alternate(clients):
        return [await clients[i % len(clients)].post("/v1/sessions/run/steps",
                                                     json=step_body(i))
                for i in range(N_STEPS)]

    two = run_all(servers(tmp_path / "two", target), alternate)
    one = run_all(servers(tmp_path / "one", Target("sqlite", None, tmp_path / "one"), 1),
                  alternate)
    assert [r.status_code for r in two] == [200] * N_STEPS, two[-1].text
    assert [r.json()["step"] for r in two] == list(range(N_STEPS))
    assert max(abs(a.json()["p_raw"] - b.json()["p_raw"]) for a, b in zip(two, one,
                                                                           strict=True)) == 0
    assert [a.json()["decision"] for a in two] == [b.json()["decision"] for b in one]
    log = target.open()
    assert [s.step for s in log.steps("run")] == list(range(N_STEPS))
    assert log.steps("run", 19)[0].messages == step_body(19)["messages"]
    log.close()


def test_a_server_that_holds_an_old_copy_follows_the_log(tmp_path, target):
    """Server 0 holds steps 0-1; server 1 takes 2-4; step 5 on server 0 scores the whole
    trajectory, as server 1 would."""
    a, b = servers(tmp_path, target)

    async def scenario(clients):
        for i in range(N_STEPS // 4):
            await clients[0 if i < 2 else 1].post("/v1/sessions/r/steps", json=step_body(i))
        on_a = await clients[0].post("/v1/sessions/r/steps", json=step_body(5))
        return on_a, await clients[1].post("/v1/sessions/r/steps",
                                           json=step_body(5, tag="again", request_id="x"))

    on_a, again = run_all([a, b], scenario)
    assert on_a.status_code == 200 and on_a.json()["step"] == 5
    assert again.status_code == 409 and again.json()["error"]["code"] == "step_mismatch"
    assert a.sessions.get("r").steps == 6 and a.metrics.rebuilds.value() == 0
    assert b.metrics.rebuilds.value() == 1  # step 2 arrived at a server without the session


def test_two_servers_taking_one_step_at_once_log_it_once(tmp_path, target):
    race: dict = {}
    a, b = servers(tmp_path, target, monitor=TrajectoryMonitor(race))

    async def both(clients, i, tag, **extra):
        race["now"] = Race()  # both score step i at once, then both commit
        return await asyncio.gather(*(c.post("/v1/sessions/r/steps",
                                             json={**step_body(i, tag=f"{tag}{k}"), **extra})
                                      for k, c in enumerate(clients)))

    async def scenario(clients):
        await clients[0].post("/v1/sessions/r/steps", json=step_body(0))
        await clients[1].post("/v1/sessions/r/steps", json=step_body(0))  # replayed: b holds it
        return await both(clients, 1, "n"), await both(clients, 2, "u", step=None)

    named, unnamed = run_all([a, b], scenario)
    assert sorted(r.status_code for r in named) == [200, 409]
    assert next(r for r in named if r.status_code == 409).json()["error"]["code"] == \
        "step_mismatch"
    assert [r.status_code for r in unnamed] == [200, 200]  # the loser scored as step 3
    assert sorted(r.json()["step"] for r in unnamed) == [2, 3]
    log = target.open()
    logged = log.steps("r")
    assert [s.step for s in logged] == [0, 1, 2, 3]
    winner = next(r for r in named if r.status_code == 200).json()["request_id"]
    assert logged[1].request_id == winner
    loser = ({"n0-1", "n1-1"} - {winner}).pop()
    assert log.lookup(loser) is None  # its decision was rolled back with its step
    log.close()


def test_a_deleted_session_is_forgotten_by_every_server(tmp_path, target):
    async def scenario(clients):
        for i in range(3):
            await clients[i % 2].post("/v1/sessions/d/steps", json=step_body(i))
        gone = await clients[1].delete("/v1/sessions/d")
        later = await clients[0].post("/v1/sessions/d/steps", json=step_body(3, tag="l"))
        anew = await clients[1].post("/v1/sessions/d/steps", json=step_body(0, tag="new"))
        return gone, later, anew

    a, b = servers(tmp_path, target)
    gone, later, anew = run_all([a, b], scenario)
    assert gone.json() == {"session_id": "d", "deleted": True}
    assert later.status_code == 409 and later.json()["error"]["code"] == "unknown_session"
    assert anew.status_code == 200 and anew.json()["step"] == 0
    log = target.open()
    assert [s.request_id for s in log.steps("d")] == ["new-0"]
    assert log.lookup("s-2") is not None  # the decisions stay
    log.close()


def test_a_log_from_before_the_steps_were_kept_is_migrated_in_place(tmp_path):
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.execute(TABLE_SQL)
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()
    log = open_log(str(path))
    assert log.steps("any") == [] and log.pull_metrics("d") == []
    log.close()
    version = sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0]
    assert version == SCHEMA.version == 4


def _value(text: str, line_start: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(line_start))


def test_the_metrics_of_a_deployment_count_every_server(tmp_path, target, monkeypatch):
    from calimon.serve import deployment_metrics

    monkeypatch.setattr(deployment_metrics, "PUSH_S", 0.05)
    services = servers(tmp_path, target, deployment="unit")
    alone = servers(tmp_path / "alone", target)[0]  # same log, no deployment: its own

    async def scenario(clients):
        for k in range(5):
            assert (await clients[k % 2].post("/v1/score", json=score_body())).status_code == 200
        await clients[1].post("/v1/sessions/m/steps", json=step_body(0))
        await clients[0].post("/v1/sessions/m/steps", json=step_body(1))
        await asyncio.sleep(0.3)  # every server has written its counts since (PUSH_S)
        return [(await c.get("/metrics")).text for c in clients]

    texts = run_all([*services, alone], scenario)
    score = 'calimon_requests_total{route="/v1/score",code="200"}'
    for text in texts[:2]:
        assert _value(text, score) == 5
        assert _value(text, 'calimon_requests_total{route="/v1/sessions/{id}/steps"') == 2
        assert _value(text, "calimon_session_rebuilds_total ") == 1
        per = [line for line in text.splitlines()
               if line.startswith('calimon_replica_requests_total{replica="')
               and 'route="/v1/score"' in line]
        assert len(per) == 2 and sum(float(p.rsplit(" ", 1)[1]) for p in per) == 5
        assert "# TYPE calimon_replica_request_seconds histogram" in text
    assert 'calimon_request_seconds_count{route="/v1/score"} 5' in texts[0]
    assert "calimon_replica_" not in texts[2] and _value(texts[2], score) == 0
