"""`calimon serve`'s app in this process, around a stand-in monitor (no model): routes, auth, the
error bodies, the queue (gathering, 429), idempotency, decisions and sessions. The same app on
the embedded model, as a real subprocess, is tests/test_serve_http.py."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from pathlib import Path

import httpx

from calimon.deploy.policy_file import Audit, Policy, save_policy
from calimon.scoring.store import MonitorKey
from calimon.serve import Batching, Limits, ServeSettings
from calimon.serve.app import create_app
from calimon.serve.decision_log import SQLiteDecisionLog
from calimon.serve.loading import ServedMonitor
from calimon.serve.service import Service
from calimon.verdict import Verdict

KEY = "unit-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


class FakeBackend:
    name = "transformers"  # gathered, like the real transformers backend

    def __init__(self):
        self.forward_calls = 0
        self.max_batch_size = 1


class PassThroughBackend(FakeBackend):
    name = "http"


class FakeMonitor:
    """Reads the last ``p=0.70`` of the response; ``p=nan``: no score; ``p=err``: a backend fault.
    ``gate``: each call waits for it (a slow model)."""

    readout = "verdict"
    constraint = None

    def __init__(self, backend=None, gate: threading.Event | None = None):
        self.backend = backend or FakeBackend()
        self.key = MonitorKey("fake-model", "rev-1", "direct", "th0", "verdict")
        self.gate = gate
        self.batches: list[int] = []

    def score(self, samples):
        if self.gate is not None:
            self.gate.wait(30)
        self.backend.forward_calls += 1
        self.batches.append(len(samples))
        out = []
        for s in samples:
            found = re.findall(r"p=(\S+)", s.response)
            value = found[-1] if found else "0.5"  # the last step's
            common = dict(transcript_hash=s.transcript_hash, readout="verdict",
                          tokens=len(s.response))
            if value == "err":
                out.append(Verdict(status="error", error="boom", **common))
            elif value == "nan":
                out.append(Verdict(status="parse_failure", **common))
            else:
                out.append(Verdict(status="ok", p_raw=float(value), **common))
        return out


def make_service(tmp_path: Path, monitor=None, *, batching=Batching(wait_ms=0),
                 limits=Limits(), audit=0.0, log=None) -> Service:
    policy = Policy(version=1, name="unit", readout="verdict", model="fake-model",
                    calibration="none", score="p_raw", t_low=0.4, t_high=0.8,
                    audit=Audit(fraction=audit, seed=3))
    path = save_policy(policy, tmp_path / "policy.yaml")
    served = ServedMonitor(monitor or FakeMonitor(), policy, "hash0", None, None, [])
    settings = ServeSettings(policy=path, api_key=KEY, batching=batching, limits=limits,
                             log=str(tmp_path / "log.sqlite"))
    return Service(served, log or SQLiteDecisionLog(tmp_path / "log.sqlite"), settings)


def run(service: Service, scenario):
    """Run ``scenario(client)`` against the app with its queue started."""

    async def main():
        await service.start()
        try:
            transport = httpx.ASGITransport(app=create_app(service))
            async with httpx.AsyncClient(transport=transport, base_url="http://serve") as c:
                return await scenario(c)
        finally:
            await service.batcher.stop()

    return asyncio.run(main())


def score_body(p: str = "0.5", **extra) -> dict:
    return {"request": "task", "response": f"answer p={p}", **extra}


# -- auth ------------------------------------------------------------------------------------

def test_every_route_but_healthz_needs_the_key(tmp_path):
    async def scenario(c):
        assert (await c.get("/healthz")).status_code == 200
        for method, path in [("POST", "/v1/score"), ("GET", "/metrics"), ("GET", "/v1/info"),
                             ("GET", "/openapi.json"), ("GET", "/docs"),
                             ("POST", "/v1/sessions/s/steps"), ("DELETE", "/v1/sessions/s"),
                             ("GET", "/nowhere")]:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
                r = await c.request(method, path, headers=headers, json=score_body())
                assert r.status_code == 401, (method, path, headers)
                assert r.headers["www-authenticate"] == "Bearer"
                assert r.json()["error"]["field"] == "authorization"
        r = await c.post("/v1/score", headers=AUTH, json=score_body())
        assert r.status_code == 200
        doc = (await c.get("/openapi.json", headers=AUTH)).json()
        assert {"/v1/score", "/v1/sessions/{session_id}/steps", "/healthz",
                "/metrics"} <= set(doc["paths"])
        assert doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"

    run(make_service(tmp_path), scenario)


# -- bad input -------------------------------------------------------------------------------

def _error(r: httpx.Response, status: int, field: str) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["status"] == status and err["field"] == field, err
    assert err["message"].startswith(f"{field}: ")
    return err


def test_bad_input_gets_a_4xx_naming_the_field(tmp_path):
    limits = Limits(max_chars=1000, max_body_bytes=5000, max_messages=3)

    async def scenario(c):
        post = lambda **kw: c.post("/v1/score", headers=AUTH, **kw)  # noqa: E731
        _error(await post(json={"request": "task"}), 422, "response")
        _error(await post(json={"request": "task", "response": 5}), 422, "response")
        _error(await post(json={"request": ["a"], "response": "x"}), 422, "request")
        _error(await post(json={**score_body(), "extra": 1}), 422, "extra")
        _error(await post(json={"request": "t", "response": "x" * 1001}), 422, "response")
        _error(await post(json={"request": "t" * 600, "response": "x" * 600}), 422,
               "response")
        _error(await post(json={"request": "t", "response": "x" * 6000}), 413, "body")
        _error(await c.post("/v1/score", content=b'{"request": "t", "resp', headers={
            **AUTH, "content-type": "application/json"}), 400, "body")
        _error(await post(json={"messages": [{"role": "robot", "content": "x"}]}), 422,
               "messages.0.role")
        _error(await post(json={"messages": [{"role": "user", "content": 3}]}), 422,
               "messages.0.content")
        _error(await post(json={"messages": [{"role": "user", "content": "x"}] * 4}), 422,
               "messages")
        _error(await post(json={**score_body(), "messages": [{"role": "user"}]}), 422,
               "messages")
        _error(await c.post("/v1/score", content=b'{"request": "t", "response": "\\ud800"}',
                            headers={**AUTH, "content-type": "application/json"}), 422,
               "response")
        _error(await post(json={**score_body(), "request_id": "has space"}), 422,
               "request_id")
        r = await post(json=score_body())
        assert r.status_code == 200  # the limits leave ordinary requests alone

    run(make_service(tmp_path, limits=limits), scenario)


# -- decisions -------------------------------------------------------------------------------

def test_decisions_follow_the_thresholds_and_a_missing_score_is_never_zero(tmp_path):
    async def scenario(c):
        out = {}
        for p in ("0.2", "0.4", "0.79", "0.8", "0.95", "nan"):
            r = await c.post("/v1/score", headers=AUTH, json=score_body(p))
            assert r.status_code == 200, r.text
            out[p] = r.json()
        return out

    out = run(make_service(tmp_path), scenario)
    assert [out[p]["decision"] for p in ("0.2", "0.4", "0.79", "0.8", "0.95")] == \
        ["pass", "review", "review", "block", "block"]
    assert out["nan"]["decision"] == "review" and out["nan"]["p_raw"] is None
    assert out["nan"]["status"] == "parse_failure" and out["nan"]["p_cal"] is None
    assert out["0.2"]["action"] == "auto_pass" and out["0.2"]["score"] == "p_raw"
    assert {a["policy_hash"] for a in out.values()} == {"hash0"}
    assert all(a["model_revision"] == "rev-1" and a["latency_ms"] >= 0 for a in out.values())


def test_the_audit_slice_is_the_policy_hash_draw_on_the_transcript_id(tmp_path):
    from calimon.deploy.policy_file import Audit

    ids = [f"t{i}" for i in range(40)]

    async def scenario(c):
        return [(await c.post("/v1/score", headers=AUTH, json=score_body("0.1", id=i))).json()
                for i in ids]

    answers = run(make_service(tmp_path, audit=0.5), scenario)
    drawn = [a["audit"] for a in answers]
    assert drawn == [Audit(fraction=0.5, seed=3).includes(i) for i in ids]
    assert 0 < sum(drawn) < len(ids)


def test_a_backend_fault_is_503_and_logs_nothing(tmp_path):
    service = make_service(tmp_path)

    async def scenario(c):
        r = await c.post("/v1/score", headers=AUTH, json=score_body("err", request_id="e1"))
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        assert r.json()["error"]["code"] == "backend_error"
        assert "p=err" not in r.text

    run(service, scenario)
    assert service.log.lookup("e1") is None and service.log.count() == 0


# -- the queue -------------------------------------------------------------------------------

def test_concurrent_requests_share_one_monitor_call(tmp_path):
    monitor = FakeMonitor()
    service = make_service(tmp_path, monitor, batching=Batching(max_batch=6, wait_ms=2000))

    async def scenario(c):
        rs = await asyncio.gather(*[c.post("/v1/score", headers=AUTH, json=score_body(f"0.{i}"))
                                    for i in range(1, 7)])
        assert all(r.status_code == 200 for r in rs)
        return [r.json()["p_raw"] for r in rs], (await c.get("/metrics", headers=AUTH)).text

    p_raw, metrics = run(service, scenario)
    assert monitor.batches == [6]  # six requests, one call, each its own answer
    assert p_raw == [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    assert "calimon_forward_calls_total 1" in metrics
    assert "calimon_batch_size_count 1" in metrics and "calimon_batch_size_sum 6" in metrics


def test_a_full_queue_answers_429_with_retry_after(tmp_path):
    gate = threading.Event()
    monitor = FakeMonitor(gate=gate)
    service = make_service(tmp_path, monitor, batching=Batching(max_batch=1, wait_ms=0,
                                                                max_queue=2))

    async def scenario(c):
        first = [asyncio.create_task(c.post("/v1/score", headers=AUTH, json=score_body()))
                 for _ in range(2)]
        while service.batcher.depth < 2:
            await asyncio.sleep(0.01)
        third = await c.post("/v1/score", headers=AUTH, json=score_body())
        gate.set()
        done = await asyncio.gather(*first)
        metrics = (await c.get("/metrics", headers=AUTH)).text
        return third, done, metrics

    third, done, metrics = run(service, scenario)
    assert third.status_code == 429 and int(third.headers["retry-after"]) >= 1
    assert third.json()["error"]["code"] == "queue_full"
    assert [r.status_code for r in done] == [200, 200]
    assert "calimon_queue_rejections_total 1" in metrics
    assert 'calimon_requests_total{route="/v1/score",code="429"} 1' in metrics


def test_other_backends_pass_the_concurrency_through(tmp_path):
    monitor = FakeMonitor(PassThroughBackend())
    service = make_service(tmp_path, monitor, batching=Batching(max_batch=4, wait_ms=2000))
    assert not service.served.gathers

    async def scenario(c):
        rs = await asyncio.gather(*[c.post("/v1/score", headers=AUTH, json=score_body())
                                    for _ in range(4)])
        assert all(r.status_code == 200 for r in rs)

    run(service, scenario)
    assert monitor.batches == [1, 1, 1, 1]


# -- idempotency -----------------------------------------------------------------------------

def test_a_retried_request_id_is_answered_from_the_log_once(tmp_path):
    monitor = FakeMonitor()
    service = make_service(tmp_path, monitor)

    async def scenario(c):
        a = await c.post("/v1/score", headers=AUTH, json=score_body("0.9", request_id="r-1"))
        b = await c.post("/v1/score", headers=AUTH, json=score_body("0.9", request_id="r-1"))
        other = await c.post("/v1/score", headers=AUTH, json=score_body("0.1",
                                                                         request_id="r-1"))
        both = await asyncio.gather(*[c.post("/v1/score", headers=AUTH, json=score_body(
            "0.3", request_id="r-2")) for _ in range(3)])
        return a, b, other, both, (await c.get("/metrics", headers=AUTH)).text

    a, b, other, both, metrics = run(service, scenario)
    assert a.status_code == b.status_code == 200
    assert b.json() == a.json() and b.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in a.headers
    _error(other, 409, "request_id")
    assert len({json.dumps(r.json(), sort_keys=True) for r in both}) == 1
    assert sum(monitor.batches) == 2  # r-1 once, r-2 once
    assert service.log.count() == 2
    assert service.log.lookup("r-1").response == a.json()
    assert 'calimon_decisions_total{decision="block"} 1' in metrics


# -- sessions --------------------------------------------------------------------------------

def _step(i: int, p: str = "0.5", **extra) -> dict:
    return {"request_id": f"step-{i}", "step": i,
            "messages": [{"role": "assistant", "content": f"step {i} p={p}"}], **extra}


def test_steps_append_in_order_and_refuse_what_does_not_fit(tmp_path):
    async def scenario(c):
        url = "/v1/sessions/s1/steps"
        _error(await c.post("/v1/sessions/new/steps", headers=AUTH, json=_step(2)), 409,
               "step")
        first = await c.post(url, headers=AUTH, json=_step(0, request="the task"))
        assert first.status_code == 200, first.text
        _error(await c.post(url, headers=AUTH, json=_step(5)), 409, "step")
        _error(await c.post(url, headers=AUTH, json=_step(1, request="again")), 422, "request")
        _error(await c.post(url, headers=AUTH, json={"messages": []}), 422, "messages")
        second = await c.post(url, headers=AUTH, json=_step(1, "0.9"))
        d = await c.delete("/v1/sessions/s1", headers=AUTH)
        return first.json(), second.json(), d.json()

    first, second, deleted = run(make_service(tmp_path), scenario)
    assert (first["step"], second["step"]) == (0, 1)
    assert first["kv"]["mode"] == "full" and second["decision"] == "block"
    assert deleted == {"session_id": "s1", "deleted": True}


def test_a_restarted_server_rebuilds_a_session_from_its_resent_steps(tmp_path):
    monitor = FakeMonitor()

    async def before(c):
        return [(await c.post("/v1/sessions/s/steps", headers=AUTH, json=_step(i))).json()
                for i in range(3)]

    first = run(make_service(tmp_path, monitor), before)
    restarted = make_service(tmp_path, monitor)  # a new process on the same log

    async def after(c):
        replays = [await c.post("/v1/sessions/s/steps", headers=AUTH, json=_step(i))
                   for i in range(3)]
        nxt = await c.post("/v1/sessions/s/steps", headers=AUTH, json=_step(3))
        return replays, nxt

    replays, nxt = run(restarted, after)
    assert [r.json() for r in replays] == first
    assert all(r.headers["idempotent-replayed"] == "true" for r in replays)
    assert nxt.status_code == 200 and nxt.json()["step"] == 3
    session = restarted.sessions.get("s")
    assert session.steps == 4 and len(session.messages) == 4
    assert restarted.log.count() == 4
