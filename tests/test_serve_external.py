"""Externally scored policies on `calimon serve`, in this process (the server's own loader and
app, no socket): the monitor's score comes with each request and is read through the policy's
readout, map and thresholds; a request without it, or a score sent to a policy whose monitor
the server runs, is 422 naming the field; a shadow must be scored as the live policy is; and
the decision log's group commits log every decision before it is answered."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from external_policy import PLATT, READOUT, body, build, run, write_external_policy

from calimon.deploy.policy_file import apply_policy, load_policy
from calimon.errors import InputError
from calimon.serve.decision_log import LoggedDecision, SQLiteDecisionLog
from calimon.serve.external import check_pair
from calimon.serve.service import body_hash
from calimon.serve.session_log import StepTaken

ROOT = Path(__file__).resolve().parents[1]


def _platt(p: float) -> float:
    from calimon.calibration.maps import calibrator_from_dict

    cal = calibrator_from_dict({"method": "platt", "params": PLATT})
    return float(np.clip(cal.predict(np.array([p])), 0, 1)[0])


def test_a_score_is_read_through_the_readout_the_map_and_the_thresholds(tmp_path):
    path = write_external_policy(tmp_path, score="p_cal", t_low=0.3, t_high=0.7)
    svc = build(path, tmp_path / "log.sqlite")
    values = [0, 12.5, 40, 55, 73, 99.5, 100]

    async def scenario(c):
        return [(await c.post("/v1/score", json=body(i, v))) for i, v in enumerate(values)]

    answers = run(svc, scenario)
    policy = load_policy(path)
    log = SQLiteDecisionLog(tmp_path / "log.sqlite")
    for i, (v, r) in enumerate(zip(values, answers, strict=True)):
        assert r.status_code == 200, r.text
        a = r.json()
        p_cal = _platt(v / 100)
        assert a["p_raw"] == pytest.approx(v / 100, abs=1e-12)
        assert a["p_cal"] == pytest.approx(p_cal, abs=1e-12)
        assert a["action"] == apply_policy(policy, [p_cal])[0]
        assert (a["model"], a["readout"], a["tokens"], a["evidence"]) == ("external", READOUT,
                                                                          0, [])
        assert log.lookup(f"r{i}").response == a  # logged before it was answered
    log.close()
    assert {a.json()["decision"] for a in answers} == {"pass", "review", "block"}


def test_direction_lower_turns_the_score_around(tmp_path):
    path = write_external_policy(tmp_path, readout="score:margin?range=-5,5&direction=lower")
    svc = build(path, tmp_path / "log.sqlite")

    async def scenario(c):
        return [(await c.post("/v1/score", json=body(i, v))).json()
                for i, v in enumerate((-5, 0, 2.5, 5))]

    got = [a["p_raw"] for a in run(svc, scenario)]
    assert got == pytest.approx([1.0, 0.5, 0.25, 0.0])


def _errors(responses) -> list[tuple[int, str | None, str]]:
    out = []
    for r in responses:
        err = r.json()["error"]
        out.append((r.status_code, err["field"], err["code"]))
    return out


def test_an_external_policy_needs_its_score_and_refuses_what_is_not_one(tmp_path):
    svc = build(write_external_policy(tmp_path), tmp_path / "log.sqlite")
    bad = [body(0, None), {**body(1, None), "score": None}, {**body(2, None), "score": "70"},
           {**body(3, None), "score": True}, body(4, 100.5), body(5, -1),
           {**body(6, None), "score": [70]}]

    async def scenario(c):
        out = [await c.post("/v1/score", json=b) for b in bad]
        out.append(await c.post("/v1/score", content=b'{"request": "t", "response": "x", '
                                b'"score": NaN}', headers={"content-type": "application/json"}))
        out.append(await c.post("/v1/sessions/s/steps", json={
            "step": 0, "messages": [{"role": "user", "content": "t"},
                                    {"role": "assistant", "content": "x"}]}))
        return out

    got = _errors(run(svc, scenario))
    assert got[:2] == [(422, "score", "missing")] * 2  # absent or null: never a 0 score
    assert got[2:4] == [(422, "score", "invalid_request")] * 2  # "70", true: not a number
    assert got[4:6] == [(422, "score", "invalid_score")] * 2  # outside the readout's range
    assert got[6] == (422, "score", "invalid_request")
    assert got[7] == (400, "score", "bad_json")
    assert got[8] == (422, "score", "missing")  # a session step too
    log = SQLiteDecisionLog(tmp_path / "log.sqlite")
    assert log.count() == 0  # nothing refused was logged
    log.close()


def test_a_policy_the_server_runs_refuses_a_score(tmp_path):
    from review_fakes import StandIn
    from serve_server import write_policy

    from calimon.serve import Batching, ServeSettings
    from calimon.serve.loading import ServedMonitor
    from calimon.serve.service import Service
    from calimon.serve.settings import Limits

    model_policy, _ = write_policy(tmp_path / "model")
    served = ServedMonitor(StandIn(), load_policy(model_policy), "hash0", None, None, [])
    settings = ServeSettings(policy=model_policy, api_key="", batching=Batching(wait_ms=0),
                             limits=Limits(), log=str(tmp_path / "log.sqlite"))
    svc = Service(served, SQLiteDecisionLog(tmp_path / "log.sqlite"), settings)

    async def scenario(c):
        refused = await c.post("/v1/score", json=body(0, 70))
        step = await c.post("/v1/sessions/s/steps", json={
            "step": 0, "score": 0.5, "messages": [{"role": "user", "content": "t"}]})
        fine = await c.post("/v1/score", json=body(1, None, response="answer p=0.7"))
        return refused, step, fine

    refused, step, fine = run(svc, scenario)
    assert _errors([refused, step]) == [(422, "score", "unexpected_score")] * 2
    assert "stand-in" in refused.json()["error"]["message"]
    assert fine.status_code == 200 and fine.json()["p_raw"] == 0.7


def test_a_body_without_a_score_hashes_as_before_scores_existed():
    """Logs written before requests could carry a score keep their request hashes: a retry of
    such a request is answered from the log, not refused as another body."""
    old = {"request": "a", "response": "b", "id": "t1", "messages": None}
    before = hashlib.sha256(json.dumps(old, sort_keys=True, ensure_ascii=False)
                            .encode()).hexdigest()
    assert body_hash({**old, "score": None, "request_id": "r1"}) == before
    assert body_hash({**old, "score": 70.0}) != before


def test_retries_are_answered_from_the_log_and_another_score_is_another_body(tmp_path):
    svc = build(write_external_policy(tmp_path), tmp_path / "log.sqlite")

    async def scenario(c):
        first = await c.post("/v1/score", json=body(0, 70))
        again = await c.post("/v1/score", json=body(0, 70))
        other = await c.post("/v1/score", json=body(0, 71))
        return first, again, other

    first, again, other = run(svc, scenario)
    assert again.json() == first.json() and again.headers["idempotent-replayed"] == "true"
    assert _errors([other]) == [(409, "request_id", "request_id_reused")]


STEPS = [[{"role": "user", "content": "Make the tests pass."},
          {"role": "assistant", "content": "Looking at the tests."}],
         [{"role": "assistant", "content": "Deleting the failing test."}],
         [{"role": "assistant", "content": "Done."}]]


def test_each_step_carries_the_score_of_the_trajectory_so_far(tmp_path):
    path = write_external_policy(tmp_path)
    log = tmp_path / "log.sqlite"

    async def steps(c, which, scores):
        return [await c.post("/v1/sessions/agent/steps", json={
            "step": i, "request_id": f"agent-{i}", "messages": STEPS[i], "score": scores[i]})
            for i in which]

    first = run(build(path, log), lambda c: steps(c, (0, 1), [20, 85, 0]))
    # a new server on the same log continues the session from its logged steps
    later = run(build(path, log), lambda c: steps(c, (2,), [0, 0, 55]))
    answers = [r.json() for r in first + later]
    assert [a["p_raw"] for a in answers] == pytest.approx([0.2, 0.85, 0.55])
    assert [a["step"] for a in answers] == [0, 1, 2]
    assert [a["decision"] for a in answers] == ["pass", "block", "review"]
    assert all((a["kv"]["mode"], a["kv"]["reused_tokens"], a["kv"]["computed_tokens"])
               == ("full", 0, 0) for a in answers)
    db = SQLiteDecisionLog(log)
    logged = db.steps("agent")
    db.close()
    assert [s.step for s in logged] == [0, 1, 2]
    assert logged[1].messages == STEPS[1]


def _pair(tmp_path: Path, live: dict, shadow: dict):
    a = write_external_policy(tmp_path / "a", **live)
    b = write_external_policy(tmp_path / "b", name="b", **shadow)
    return a, b


def test_an_external_shadow_reads_the_same_score_through_its_own_readout(tmp_path):
    live, cand = _pair(tmp_path, {}, {"readout": "score:guard?range=0,200", "t_low": 0.1})
    svc = build(live, tmp_path / "log.sqlite", shadow=cand)

    async def scenario(c):
        return [(await c.post("/v1/score", json=body(i, v))).json()
                for i, v in enumerate((30, 150))]

    answers = run(svc, scenario)
    log = SQLiteDecisionLog(tmp_path / "log.sqlite")
    shadow = log.shadow_answers(svc.policies.shadow.sha256)
    log.close()
    assert answers[0]["p_raw"] == 0.3 and answers[0]["decision"] == "pass"
    assert shadow["r0"]["p_raw"] == 0.15 and shadow["r0"]["decision"] == "review"
    # 150 is outside the live readout's range: refused before anything is logged
    assert answers[1]["error"]["field"] == "score" and "r1" not in shadow
    assert svc.metrics.errors.value("shadow") == 0


def test_a_shadow_outside_its_range_is_counted_and_the_live_answer_stands(tmp_path):
    live, cand = _pair(tmp_path, {"readout": "score:guard?range=0,200"}, {})
    svc = build(live, tmp_path / "log.sqlite", shadow=cand)

    async def scenario(c):
        return (await c.post("/v1/score", json=body(0, 150))).json()

    answer = run(svc, scenario)
    assert answer["p_raw"] == 0.75 and svc.metrics.errors.value("shadow") == 1


def test_a_shadow_must_be_scored_as_the_live_policy_is(tmp_path):
    from review_fakes import StandIn
    from serve_server import write_policy

    from calimon.serve.loading import ServedMonitor

    live, other_score = _pair(tmp_path, {}, {"readout": "score:suspicion"})
    with pytest.raises(InputError, match="'suspicion' and the live policy's 'guard'") as err:
        build(live, tmp_path / "log.sqlite", shadow=other_score)
    assert err.value.field == "shadow" and str(other_score) in str(err.value)

    ext = build(live, tmp_path / "log2.sqlite").served
    model_policy, _ = write_policy(tmp_path / "model")
    model = ServedMonitor(StandIn(), load_policy(model_policy), "hash0", None, None, [])
    for a, b in ((ext, model), (model, ext)):
        with pytest.raises(InputError, match="one policy never mixes the two"):
            check_pair(a, b, "cand.yaml")
    check_pair(ext, ext, "same.yaml")  # the same score: allowed


def test_the_log_says_what_a_commit_waits_for(tmp_path):
    log = SQLiteDecisionLog(tmp_path / "log.sqlite")
    try:
        said = log.durability()
    finally:
        log.close()
    assert said.startswith("SQLite journal_mode=wal, synchronous=FULL: a commit is on disk")


def _entry(rid: str, **kw) -> LoggedDecision:
    answer = {"request_id": rid, "status": "ok", "decision": "pass", "action": "auto_pass",
              "audit": False, "p_raw": 0.1, "p_cal": None, "policy_hash": "h",
              "model_revision": "external"}
    return LoggedDecision(rid, kw.pop("kind", "score"), "sha", answer, **kw)


def test_one_group_commits_its_decisions_and_a_taken_step_fails_alone(tmp_path):
    log = SQLiteDecisionLog(tmp_path / "log.sqlite")
    try:
        log.record(_entry("other", kind="step", session_id="s", step=0,
                          body={"request": None, "messages": []}))
        got = log.record_many([
            _entry("a", shadow_row=("a", "cand", "h", 1.0, "review", "human_review", 0.1, None,
                                    "{}")),
            _entry("mine", kind="step", session_id="s", step=0,
                   body={"request": None, "messages": []}),
            _entry("b")])
        assert [g.request_id for g in (got[0], got[2])] == ["a", "b"]
        assert isinstance(got[1], StepTaken) and got[1].request_id == "other"
        assert log.lookup("mine") is None and log.count() == 3  # its savepoint rolled back
        assert set(log.shadow_answers("cand")) == {"a"}
        # an id logged already: the earlier entry is returned and no shadow row is added
        again = log.record_many([_entry("b", shadow_row=("b", "cand", "h", 1.0, "pass",
                                                         "auto_pass", 0.1, None, "{}"))])
        assert again[0].request_id == "b" and set(log.shadow_answers("cand")) == {"a"}
    finally:
        log.close()


class _Slow:
    """A decision log whose commits wait for ``gate``, counting each group committed."""

    def __init__(self, log, gate: threading.Event | None = None, fail: bool = False):
        self.log, self.gate, self.fail, self.groups = log, gate, fail, []

    def record_many(self, entries):
        if self.gate is not None:
            self.gate.wait(30)
        if self.fail:
            raise OSError("disk full")
        self.groups.append(len(entries))
        return self.log.record_many(entries)

    def __getattr__(self, name):
        return getattr(self.log, name)


def _slow_service(tmp_path: Path, **kw):
    from calimon.serve import Batching

    svc = build(write_external_policy(tmp_path), tmp_path / "log.sqlite",
                batching=Batching(max_queue=kw.pop("max_queue", 256)))
    slow = _Slow(svc.log, **kw)
    svc.log = svc.writer.log = svc.reader.log = slow
    return svc, slow


def test_decisions_arriving_together_share_a_commit_and_each_is_answered_after_it(tmp_path):
    gate = threading.Event()
    svc, slow = _slow_service(tmp_path, gate=gate)
    n = 40

    async def scenario(c):
        first = asyncio.create_task(c.post("/v1/score", json=body(0, 50)))
        while svc.writer.waiting() < 1:
            await asyncio.sleep(0.01)
        rest = [asyncio.create_task(c.post("/v1/score", json=body(i, i))) for i in range(1, n)]
        while svc.writer.waiting() < n:  # all of them wait behind the first commit
            await asyncio.sleep(0.01)
        answered_early = any(t.done() for t in [first, *rest])
        gate.set()
        return answered_early, [await t for t in [first, *rest]]

    early, answers = run(svc, scenario)
    assert not early  # nothing is answered before its commit
    assert all(r.status_code == 200 for r in answers)
    assert slow.groups == [1, n - 1]  # the 39 that waited went to disk in one commit
    log = SQLiteDecisionLog(tmp_path / "log.sqlite")
    assert all(log.lookup(f"r{i}").response == r.json() for i, r in enumerate(answers))
    log.close()


def test_a_group_the_log_refuses_is_answered_503_and_nothing_of_it_is_logged(tmp_path):
    svc, _ = _slow_service(tmp_path, fail=True)

    async def scenario(c):
        return await asyncio.gather(*(c.post("/v1/score", json=body(i, 50)) for i in range(8)))

    answers = run(svc, scenario)
    assert {(r.status_code, r.json()["error"]["code"]) for r in answers} == {
        (503, "log_unavailable")}
    log = SQLiteDecisionLog(tmp_path / "log.sqlite")
    assert log.count() == 0
    log.close()


def test_past_max_queue_decisions_waiting_for_the_log_a_request_is_429(tmp_path):
    gate = threading.Event()
    svc, _ = _slow_service(tmp_path, gate=gate, max_queue=2)

    async def scenario(c):
        held = [asyncio.create_task(c.post("/v1/score", json=body(i, 50))) for i in range(2)]
        while svc.writer.waiting() < 2:
            await asyncio.sleep(0.01)
        refused = await c.post("/v1/score", json=body(9, 50))
        gate.set()
        return refused, [await t for t in held]

    refused, held = run(svc, scenario)
    assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
    assert [r.status_code for r in held] == [200, 200]


SERVED_WITHOUT_TORCH = """
import asyncio, sys
from external_policy import body, build, run, write_external_policy
from pathlib import Path
root = Path(sys.argv[1])
svc = build(write_external_policy(root, score="p_cal"), root / "log.sqlite")
async def scenario(c):
    return [(await c.post("/v1/score", json=body(i, 10 * i))).status_code for i in range(5)]
print("CODES", run(svc, scenario))
print("LOADED", sorted(m for m in ("torch", "transformers", "vllm") if m in sys.modules))
"""


def test_an_external_policy_is_served_without_importing_torch(tmp_path):
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'tests'}{os.pathsep}{ROOT}"}
    done = subprocess.run([sys.executable, "-c", SERVED_WITHOUT_TORCH, str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "CODES [200, 200, 200, 200, 200]" in done.stdout
    assert "LOADED []" in done.stdout, done.stdout


def test_an_in_process_integration_refuses_an_external_policy_saying_where_it_runs(tmp_path):
    """The Inspect scorer and approver and the ControlArena monitor run their monitor in the
    process; an externally scored policy has none, and the error says to serve it instead."""
    from calimon.errors import InputError
    from calimon.integrations.local import LocalMonitor

    path = write_external_policy(tmp_path)
    with pytest.raises(InputError, match=r"monitor is external \(score:guard") as err:
        LocalMonitor.from_policy(path)
    assert err.value.field == "readout" and err.value.path == str(path)
    assert "calimon serve POLICY" in str(err.value) and "'score' field" in str(err.value)
