"""Two real `calimon serve` processes of one ``--deployment`` on one decision log, around the
stand-in monitor's API (tests/review_server.py: no model), as two replicas behind a load
balancer. One of them is SIGKILLed right after its last answers: the survivor's ``/metrics``
counts every request either of them answered, by route and status, the killed server's last
ones included (`calimon.serve.deployment_metrics`: an answer goes out once its count is in
the log). Before, a server wrote its counts every second, so the answers of its last second
were missing from the totals (24 of 25 step answers counted after such a kill, on the embedded
model). The session steps here run on an API backend (``--backend chat``), where a step was a
500 before. The same servers answer every error in the one error body and spacing
(`calimon.serve.errors`). On PostgreSQL with the embedded model: tests/test_serve_shared_http.py.
"""

from __future__ import annotations

import json
import threading
from collections import Counter

import httpx
import pytest
from review_fakes import policy
from review_server import chat_flags, chat_server, env
from serve_server import KEY, Server, start_server

pytestmark = pytest.mark.slow

ROUTES = {"score": "/v1/score", "steps": "/v1/sessions/{id}/steps", "info": "/v1/info",
          "other": "other"}


def _start_two(pol, log, tmp_path, api_url: str) -> list[Server]:
    out: list = [None, None]
    failed: list[BaseException] = []

    def start(k: int) -> None:
        try:
            out[k] = start_server(pol, log, tmp_path / f"server{k}.out", *chat_flags(api_url),
                                  "--deployment", "pair", key=KEY, env=env(tmp_path),
                                  timeout=240)
        except BaseException as exc:  # noqa: BLE001 - raised below, after both tried
            failed.append(exc)

    threads = [threading.Thread(target=start, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failed:
        for s in out:
            if s is not None:
                s.stop()
        raise failed[0]
    return out


def _counted(text: str, prefix: str = "calimon_requests_total{") -> Counter:
    """``(route, code) -> count`` of the request counter lines starting with ``prefix``."""
    out: Counter = Counter()
    for line in text.splitlines():
        if line.startswith(prefix):
            labels, value = line[len(prefix):].rsplit("} ", 1)
            parts = dict(p.split("=", 1) for p in labels.split('",'))
            out[(parts["route"].strip('"'), parts["code"].strip('"'))] += float(value)
    return out


class _Tally:
    """What each server answered, by route and status."""

    def __init__(self):
        self.by_server: list[Counter] = [Counter(), Counter()]

    def send(self, client: httpx.Client, k: int, route: str, method: str, path: str,
             **kw) -> httpx.Response:
        r = client.request(method, path, **kw)
        self.by_server[k][(ROUTES[route], str(r.status_code))] += 1
        return r


def test_a_deployment_counts_every_answer_of_a_server_killed_right_after_them(tmp_path):
    with chat_server() as api:
        pol = policy(tmp_path, audit=0.2)
        servers = _start_two(pol, tmp_path / "decisions.sqlite", tmp_path, api.url)
        tally = _Tally()
        try:
            clients = [s.client(timeout=60) for s in servers]
            for i in range(10):  # scores and one session's steps, alternated
                k = i % 2
                r = tally.send(clients[k], k, "score", "POST", "/v1/score", json={
                    "request_id": f"s{i}", "request": f"task {i}", "response": f"answer p=0.{i}"})
                assert r.status_code == 200, r.text
                r = tally.send(clients[k], k, "steps", "POST", "/v1/sessions/t/steps", json={
                    "request_id": f"t{i}", "step": i,
                    "messages": [{"role": "user" if i == 0 else "assistant",
                                  "content": f"step {i} p=0.{i}"}]})
                assert r.status_code == 200, r.text
            # the killed server's last answers, in quick succession: a 200 of each kind, a 422,
            # a 404; then SIGKILL, before its next write of the second
            last = [("score", "POST", "/v1/score", {"json": {"request": "a", "response": "b"}}),
                    ("steps", "POST", "/v1/sessions/t/steps", {"json": {
                        "step": 10, "messages": [{"role": "assistant", "content": "end"}]}}),
                    ("score", "POST", "/v1/score", {"json": {"request": "a"}}),
                    ("info", "GET", "/v1/info", {}),
                    ("other", "GET", "/v1/nope", {})]
            for route, method, path, kw in last:
                tally.send(clients[0], 0, route, method, path, **kw)
            servers[0].kill()
            text = clients[1].get("/metrics").text
            for c in clients:
                c.close()
        finally:
            for s in servers:
                s.stop()
    answered = tally.by_server[0] + tally.by_server[1]
    assert tally.by_server[0][("/v1/score", "422")] == 1
    assert tally.by_server[0][("other", "404")] == 1
    counted = _counted(text)
    for key, n in answered.items():
        assert counted[key] == n, (key, n, counted[key])
    per_replica = _counted(text, "calimon_replica_requests_total{")
    assert sum(per_replica[k] for k in answered) == sum(answered.values())
    decisions = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                    if line.startswith("calimon_decisions_total{"))
    assert decisions == 22  # every 200 of a score or a step is a decision


def test_every_error_of_a_real_server_has_one_body_and_one_spacing(tmp_path):
    """Refusals of the gate (401, 413, 400, 415) and of the routes (404, 405, 409, 422) come
    in one JSON spacing, each naming a field; 404 names the path, 405 the method."""
    with chat_server() as api:
        pol = policy(tmp_path, audit=0.2)
        server = start_server(pol, tmp_path / "decisions.sqlite", tmp_path / "server.out",
                              *chat_flags(api.url), "--max-body-bytes", "2000", key=KEY,
                              env=env(tmp_path), timeout=240)
        try:
            with server.client(timeout=60) as c:
                answers = {
                    "authorization": httpx.get(f"{server.url}/v1/info"),
                    "body": c.post("/v1/score", content=b"x" * 3000,
                                   headers={"content-type": "application/json"}),
                    "content-type": c.post("/v1/score", content=json.dumps(
                        {"request": "a", "response": "b"}), headers={"content-type":
                                                                     "text/plain"}),
                    "path": c.get("/v1/nope"),
                    "method": c.get("/v1/score"),
                    "response": c.post("/v1/score", json={"request": "", "response": ""}),
                    "messages.0.role": c.post("/v1/score", json={"messages": [{"role": "x"}]}),
                    "step": c.post("/v1/sessions/u/steps", json={
                        "step": 3, "messages": [{"role": "user", "content": "x"}]}),
                }
        finally:
            server.stop()
    statuses = {k: r.status_code for k, r in answers.items()}
    assert statuses == {"authorization": 401, "body": 413, "content-type": 415, "path": 404,
                        "method": 405, "response": 422, "messages.0.role": 422, "step": 409}
    for field, r in answers.items():
        err = r.json()["error"]
        assert err["field"] == field and err["message"].startswith(f"{field}: "), err
        assert r.headers["content-type"] == "application/json"
        assert r.content == json.dumps(r.json(), ensure_ascii=False,
                                       separators=(",", ":")).encode(), r.content
    assert "GET is not allowed on /v1/score (allowed: POST)" in answers["method"].text
    assert "'Content-Type: application/json'" in answers["content-type"].text
