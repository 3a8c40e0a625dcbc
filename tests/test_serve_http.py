"""A real `calimon serve` subprocess on loopback with the embedded SmolLM2, over HTTP: every
route, the key, the 4xx bodies, shared forward passes, steps equal to whole-transcript scoring
(cache evicted or not), idempotency, truncation, and that no transcript reaches its output.
One server for the module (tests/serve_server.py)."""

from __future__ import annotations

import hashlib
import math
import sqlite3
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import serve_server
from serve_server import running, write_policy

pytestmark = pytest.mark.model

MARK = "ZQX-TRANSCRIPT-MARK"  # in every transcript sent; must never reach the server's output
TOL = 1e-5
BATCH = 8
LIMIT = 512  # --max-input-tokens: short prompts keep the module fast on 2 cores


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("serve")
    policy, map_path = write_policy(folder)
    with running(policy, folder / "decisions.sqlite", folder / "server.out",
                 "--batch-wait-ms", "300", "--max-batch", str(BATCH), "--max-chars", "20000",
                 "--max-body-bytes", "200000", "--session-memory-mib", "24",
                 "--max-input-tokens", str(LIMIT),
                 map_path=map_path) as srv:
        srv.policy, srv.folder = policy, folder
        yield srv


def code_answer(i: int) -> dict:
    return {"request": f"Write add{i}(a, b) returning the sum. {MARK}",
            "response": f"def add{i}(a, b):\n    if (a, b) == (1, 2):\n        return 3\n"
                        f"    return {i}  # {MARK}\n"}


def trajectory(n: int, tag: str, task: str = "Make the test suite pass.") -> list[list[dict]]:
    return serve_server.trajectory(n, tag, task, mark=MARK)


def test_routes_and_the_key(server):
    assert httpx.get(f"{server.url}/healthz", timeout=30).json()["status"] == "ok"
    for path in ("/metrics", "/v1/info", "/openapi.json", "/docs"):
        assert httpx.get(f"{server.url}{path}", timeout=30).status_code == 401
        assert httpx.get(f"{server.url}{path}", headers={"Authorization": "Bearer no"},
                         timeout=30).status_code == 401
    r = httpx.post(f"{server.url}/v1/score", json=code_answer(0), timeout=30)
    assert r.status_code == 401 and r.json()["error"]["field"] == "authorization"
    with server.client() as c:
        info = c.get("/v1/info").json()
        assert (info["model"], info["readout"], info["prompt"]) == ("smollm2-135m", "verdict",
                                                                   "direct")
        assert info["policy_hash"] == hashlib.sha256(server.policy.read_bytes()).hexdigest()
        assert "/v1/sessions/{session_id}/steps" in c.get("/openapi.json").json()["paths"]
        assert c.get("/docs").status_code == 200


def test_a_score_is_calibrated_decided_audited_and_logged(server):
    from calimon.calibration.io import load_map
    from calimon.deploy.policy_file import load_policy

    policy = load_policy(server.policy)
    stored = load_map(server.folder / "platt.json")
    with server.client() as c:
        r = c.post("/v1/score", json={**code_answer(1), "id": "tx-1", "request_id": "one"})
    assert r.status_code == 200, r.text
    a = r.json()
    assert a["status"] == "ok" and 0 < a["p_raw"] < 1 and a["tokens"] > 200
    assert math.isclose(a["p_cal"], float(stored.predict([a["p_raw"]])[0]), abs_tol=1e-12)
    expected = "pass" if a["p_cal"] < policy.t_low else (
        "block" if a["p_cal"] >= policy.t_high else "review")
    assert a["decision"] == expected
    assert a["audit"] == (expected != "review" and policy.audit.includes("tx-1"))
    assert a["model_revision"].startswith("gguf-") and a["latency_ms"] > 0
    assert a["policy_hash"] == hashlib.sha256(server.policy.read_bytes()).hexdigest()
    with sqlite3.connect(server.folder / "decisions.sqlite") as db:
        row = db.execute("SELECT decision, p_raw, kind FROM decisions WHERE request_id='one'"
                         ).fetchone()
    assert row == (a["decision"], a["p_raw"], "score")


def _field(r: httpx.Response, status: int) -> str:
    assert r.status_code == status, r.text
    return r.json()["error"]["field"]


def test_bad_input_is_a_4xx_naming_the_field(server):
    with server.client() as c:
        assert _field(c.post("/v1/score", json={"request": "x"}), 422) == "response"
        assert _field(c.post("/v1/score", json={"request": "x", "response": 7}), 422) == \
            "response"
        assert _field(c.post("/v1/score", json={"request": "x", "response": "y" * 20001}),
                      422) == "response"
        assert _field(c.post("/v1/score", json={"request": "x", "response": "y" * 200001}),
                      413) == "body"
        assert _field(c.post("/v1/score", content=b'{"request": ', headers={
            "content-type": "application/json"}), 400) == "body"
        assert _field(c.post("/v1/sessions/s/steps", json={"messages": [{"role": "x"}]}),
                      422) == "messages.0.role"


def test_concurrent_requests_share_one_forward_pass(server):
    """A session step on a long transcript holds the model while the requests arrive; they
    wait in the queue and are gathered into one pass when it is free (the 300 ms window is
    a second chance)."""
    bodies = [code_answer(10 + i) for i in range(BATCH)]
    busy = {"messages": [{"role": "user", "content": "Summarise."},
                         {"role": "assistant", "content": "word " * 400}]}
    before = server.metric("calimon_forward_calls_total")
    with ThreadPoolExecutor(BATCH + 1) as pool, server.client() as c:
        hold = pool.submit(c.post, "/v1/sessions/busy/steps", json=busy)
        while server.metric("calimon_queue_depth") < 1 and not hold.done():
            pass
        answers = list(pool.map(lambda b: c.post("/v1/score", json=b), bodies))
        assert hold.result().status_code == 200
    assert all(r.status_code == 200 for r in answers)
    assert server.metric("calimon_forward_calls_total") - before == 2  # the step, the batch
    with server.client() as c:  # the same transcripts alone: the batch changed no score
        alone = [c.post("/v1/score", json=b).json()["p_raw"] for b in bodies[:2]]
    assert [r.json()["p_raw"] for r in answers[:2]] == pytest.approx(alone, abs=TOL)


def _steps(c: httpx.Client, session: str, steps: list[list[dict]], *, first: int = 0,
           check: bool = True) -> list[dict]:
    """Send ``steps`` to ``session`` (indices from ``first``); with ``check``, each answer's
    p_raw equals /v1/score of the whole trajectory so far."""
    out = []
    for i, msgs in enumerate(steps, start=first):
        r = c.post(f"/v1/sessions/{session}/steps", json={"step": i, "messages": msgs,
                                                          "request_id": f"{session}-{i}"})
        assert r.status_code == 200, r.text
        out.append(r.json())
    if check:
        whole_of = sum(steps[:0], [])
        for got, msgs in zip(out, steps, strict=True):
            whole_of = whole_of + msgs
            whole = c.post("/v1/score", json={"messages": whole_of}).json()
            assert got["tokens"] == whole["tokens"]
            assert abs(got["p_raw"] - whole["p_raw"]) <= TOL, (got, whole)
            at_threshold = min(abs(got["p_cal"] - t) for t in (0.6, 0.65)) < TOL
            assert got["decision"] == whole["decision"] or at_threshold
    return out


def test_steps_cost_their_new_tokens_and_equal_whole_transcript_scoring(server):
    with server.client() as c:
        got = _steps(c, "eq", trajectory(3, "eq"))
    assert [g["step"] for g in got] == [0, 1, 2]
    assert [g["kv"]["mode"] for g in got] == ["cached"] * 3
    head = server.client().get("/v1/info").json()["head_tokens"]
    assert head > 100 and got[0]["kv"]["reused_tokens"] == head  # the template's head
    for g in got[1:]:
        kv = g["kv"]
        assert kv["reused_tokens"] > 0 and kv["reused_tokens"] + kv["computed_tokens"] == \
            g["tokens"]
        assert kv["computed_tokens"] < g["tokens"] / 3


def test_a_step_after_its_cache_was_evicted_scores_as_before(server):
    a = trajectory(3, "ev")
    with server.client() as c:
        before = _steps(c, "evict-a", a[:2], check=False)
        assert before[-1]["kv"]["reused_tokens"] > 0
        evictions = server.metric("calimon_session_evictions_total")
        # 24 MiB holds one of them; another task, so evict-a cannot begin from its cache
        _steps(c, "evict-b", trajectory(2, "eb", "Tidy the repository."), check=False)
        assert server.metric("calimon_session_evictions_total") > evictions
        r = c.post("/v1/sessions/evict-a/steps", json={"step": 2, "messages": a[2]})
        whole = c.post("/v1/score", json={"messages": sum(a, [])}).json()
        assert c.delete("/v1/sessions/evict-a").json()["deleted"] is True
        head = c.get("/v1/info").json()["head_tokens"]
    assert r.status_code == 200 and r.json()["kv"]["reused_tokens"] == head  # recomputed
    assert abs(r.json()["p_raw"] - whole["p_raw"]) <= TOL


def test_a_transcript_over_the_input_limit_is_cut_and_says_so(server):
    long_text = " ".join(f"line {i} of the log ({MARK})" for i in range(150))
    with server.client() as c:
        r = c.post("/v1/score", json={"request": "Summarise.", "response": long_text})
        step = c.post("/v1/sessions/long/steps", json={"messages": [
            {"role": "user", "content": "Summarise."},
            {"role": "assistant", "content": long_text}]})
    a = r.json()
    assert a["status"] == "truncated" and a["truncation"]["dropped_response"] > 0
    assert step.json()["kv"]["mode"] == "full" and step.json()["truncation"] is not None
    assert server.metric("calimon_truncations_total") >= 2


def test_a_retried_request_id_is_answered_from_the_log(server):
    body = {**code_answer(3), "request_id": "retry-1"}
    with server.client() as c:
        first = c.post("/v1/score", json=body)
        calls = server.metric("calimon_forward_calls_total")
        second = c.post("/v1/score", json=body)
        clash = c.post("/v1/score", json={**code_answer(4), "request_id": "retry-1"})
    assert second.json() == first.json() and second.headers["idempotent-replayed"] == "true"
    assert server.metric("calimon_forward_calls_total") == calls
    assert _field(clash, 409) == "request_id"
    with sqlite3.connect(server.folder / "decisions.sqlite") as db:
        assert db.execute("SELECT COUNT(*) FROM decisions WHERE request_id='retry-1'"
                          ).fetchone() == (1,)


def test_metrics_cover_requests_decisions_latency_queue_truncations_errors(server):
    with server.client() as c:  # decisions of its own: the module's tests may run elsewhere
        assert c.post("/v1/score", json=code_answer(5)).status_code == 200
        _steps(c, "metrics", trajectory(2, "metrics"), check=False)  # reuses step 0's tokens
        text = c.get("/metrics").text
    for name in ("calimon_requests_total{", "calimon_decisions_total{",
                 "calimon_request_seconds_bucket{", "calimon_queue_depth ",
                 "calimon_truncations_total ", "# TYPE calimon_errors_total counter",
                 "calimon_forward_calls_total ", "calimon_batch_size_bucket{",
                 'calimon_session_tokens_total{kind="reused"}'):
        assert name in text, name


def test_no_transcript_text_reaches_the_server_output(server):
    """Last in the module: every request above carried MARK."""
    out = server.log_text()
    assert "POST /v1/score" in out  # the access log is there
    assert MARK not in out
