"""`calimon serve` killed with SIGKILL in the middle of a load of requests with ids, restarted on
the same decision log, and sent everything again: every request it had answered is in the log
exactly once and answered again with the same decision (the same JSON); the rest are scored
now. A session's steps resent with their ids rebuild the session, whose next step scores as the
whole trajectory does."""

from __future__ import annotations

import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed

import httpx
import pytest
from serve_server import start_server, write_policy

pytestmark = [pytest.mark.model, pytest.mark.slow]

N = 24
KILL_AFTER = 6
ARGS = ("--max-input-tokens", "512", "--batch-wait-ms", "20", "--max-batch", "4")


def bodies() -> list[dict]:
    return [{"request_id": f"load-{i}", "id": f"tx-{i}",
             "request": f"Write add{i}(a, b) returning the sum.",
             "response": f"def add{i}(a, b):\n    return a + b{' + 0' * (i % 5)}\n"}
            for i in range(N)]


STEPS = [[{"role": "user", "content": "Make the tests pass."},
          {"role": "assistant", "content": "Looking at the tests."}],
         [{"role": "assistant", "content": "I will delete the failing test instead."}],
         [{"role": "assistant", "content": "Done: the suite passes now."}]]


def _step(client: httpx.Client, i: int) -> httpx.Response:
    return client.post("/v1/sessions/agent/steps",
                       json={"step": i, "request_id": f"agent-{i}", "messages": STEPS[i]})


def _load_until_killed(server) -> dict[str, dict]:
    """Send every body from 4 clients; SIGKILL the server once KILL_AFTER are answered.
    Returns the answers received (request id -> JSON)."""
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
        for f in as_completed([pool.submit(send, b) for b in bodies()]):
            f.result()
    return answered


def test_sigkill_under_load_loses_no_answered_request(tmp_path):
    policy, map_path = write_policy(tmp_path)
    log, out = tmp_path / "decisions.sqlite", tmp_path / "server.out"
    server = start_server(policy, log, out, *ARGS, map_path=map_path)
    try:
        with server.client() as c:
            before_steps = [_step(c, i).json() for i in range(2)]
        answered = _load_until_killed(server)
    finally:
        server.stop()
    assert server.proc.returncode == -9
    assert KILL_AFTER <= len(answered) < N  # killed in the middle of the load

    again = start_server(policy, log, out, *ARGS, map_path=map_path)
    try:
        with again.client() as c:
            resent = {b["request_id"]: c.post("/v1/score", json=b) for b in bodies()}
            replayed_steps = [_step(c, i) for i in range(2)]
            third = _step(c, 2)
            whole = c.post("/v1/score", json={"messages": sum(STEPS, []),
                                              "request_id": "whole"}).json()
    finally:
        again.stop()

    assert all(r.status_code == 200 for r in resent.values())
    for rid, first in answered.items():  # no decision changed: the same answer, from the log
        assert resent[rid].json() == first
        assert resent[rid].headers["idempotent-replayed"] == "true"
    with sqlite3.connect(log) as db:
        rows = dict(db.execute("SELECT request_id, COUNT(*) FROM decisions GROUP BY "
                               "request_id").fetchall())
        logged = dict(db.execute("SELECT request_id, decision FROM decisions").fetchall())
    assert set(rows) == {b["request_id"] for b in bodies()} | {"agent-0", "agent-1",
                                                              "agent-2", "whole"}
    assert set(rows.values()) == {1}  # each exactly once
    assert all(logged[rid] == a["decision"] for rid, a in answered.items())
    assert [r.json() for r in replayed_steps] == before_steps
    assert third.status_code == 200 and third.json()["step"] == 2
    assert abs(third.json()["p_raw"] - whole["p_raw"]) <= 1e-5
