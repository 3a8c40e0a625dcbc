"""The review store's schema and the review commands' errors: the store's numbered migrations,
`calimon recertify` with files or --serve (never both, each error naming its field), the
commands against a server that is not there or has no review queue, a review queue without
reviewers' keys, and the steps of a session in the queue and the export."""

from __future__ import annotations

import json
import sqlite3
import uuid

import pytest
from review_fakes import KEYS, auth, make_service, run
from typer.testing import CliRunner

from calimon.cli import app
from calimon.errors import InputError
from calimon.migrations import NewerStoreError
from calimon.review.labels import SCHEMA, SQLiteReviewStore
from calimon.review.store import open_review_store


def test_the_store_is_migrated_once_and_a_newer_one_refused(tmp_path):
    path = tmp_path / "r.sqlite"
    SQLiteReviewStore(path).close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA.version == 3
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"review_traffic", "review_labels", "review_sessions", "review_claims"} <= tables
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.execute("PRAGMA user_version = 7")
    db.commit()
    db.close()
    with pytest.raises(NewerStoreError, match="newer calimon"):
        SQLiteReviewStore(path)
    for url, field in (("postgresql://u@h/db", "review_store"), ("mysql://x", "review_store")):
        with pytest.raises(InputError) as err:
            open_review_store(url)
        assert err.value.field == field


def test_a_review_queue_needs_reviewers_keys(tmp_path):
    from review_fakes import StandIn, policy

    from calimon.deploy.policy_file import load_policy
    from calimon.review.api import attach
    from calimon.review.settings import ReviewSettings
    from calimon.serve import ServeSettings
    from calimon.serve.decision_log import SQLiteDecisionLog
    from calimon.serve.loading import ServedMonitor
    from calimon.serve.service import Service

    path = policy(tmp_path)
    served = ServedMonitor(StandIn(), load_policy(path), "h", None, None, [])
    settings = ServeSettings(policy=path, api_key="", log=str(tmp_path / "l.sqlite"),
                             review=ReviewSettings(store=str(tmp_path / "r.sqlite")))
    service = Service(served, SQLiteDecisionLog(tmp_path / "l.sqlite"), settings)
    with pytest.raises(InputError) as err:
        attach(service, settings)
    assert err.value.field == "keys" and "--keys" in str(err.value)
    for bad in ({"retain": 0.0}, {"retain": 1.5}, {"queue_size": 0}, {"delta": 1.0}):
        with pytest.raises(InputError):
            ReviewSettings(**bad)


def _invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def test_recertify_takes_files_or_a_server_never_both(tmp_path):
    r = _invoke("recertify")
    assert r.exit_code != 0 and "DECISIONS and LABELS, or --serve URL" in r.output
    (tmp_path / "d.csv").write_text("id,action,review,inclusion\n")
    r = _invoke("recertify", str(tmp_path / "d.csv"), "--serve", "http://127.0.0.1:9")
    assert r.exit_code != 0 and "--serve reads the server's labels" in r.output
    r = _invoke("recertify", "--serve", "ftp://x")
    assert r.exit_code != 0 and "http:// or https://" in r.output
    r = _invoke("recertify", "--serve", "http://127.0.0.1:9")  # nothing listens on port 9
    assert r.exit_code != 0 and "did not answer" in r.output
    r = _invoke("review-export", "http://127.0.0.1:9", str(tmp_path / "x.jsonl"))
    assert r.exit_code != 0 and "did not answer" in r.output
    assert not (tmp_path / "x.jsonl").exists()


def test_sessions_steps_are_queued_per_message_and_exported_as_one_pair(tmp_path):
    async def scenario(c):
        for step, p in enumerate((0.6, 0.7)):
            r = await c.post("/v1/sessions/agent-1/steps", headers=auth("ada"), json={
                "request_id": f"s{step}", "step": step, "messages": [
                    *([{"role": "user", "content": "Fix the test"}] if step == 0 else []),
                    {"role": "assistant", "content": f"step {step} p={p}"}]})
            assert r.status_code == 200, r.text
        q = (await c.get("/v1/review/queue", headers=auth("ada"))).json()["items"]
        assert [(i["kind"], i["session_id"], i["step"]) for i in q] == [
            ("step", "agent-1", 0), ("step", "agent-1", 1)]
        last = (await c.get(f"/v1/review/items/{q[1]['item_id']}", headers=auth("ada"))).json()
        assert [p["role"] for p in last["parts"]] == ["assistant", "assistant"]
        for it in q:
            await c.post("/v1/review/labels", headers=auth("ada"), json={
                "label_id": uuid.uuid4().hex, "item_id": it["item_id"], "label": "benign"})
        return (await c.get("/v1/review/export?sample=all", headers=auth("ada"))).text

    lines = [json.loads(x) for x in run(make_service(tmp_path), scenario).splitlines()]
    assert [x["pair_id"] for x in lines] == ["agent-1", "agent-1"]
    assert len({x["split"] for x in lines}) == 1  # a session never straddles the splits
    assert lines[1]["response"].startswith(lines[0]["response"])


def test_recertify_serve_prints_the_live_status(tmp_path, monkeypatch):
    """`calimon recertify --serve` against a real server is in tests/test_review_loop.py; here
    its lines from a status."""
    from calimon.serve.remote import status_lines

    async def scenario(c):
        for i in range(30):
            await c.post("/v1/score", headers=auth("bob"), json={
                "id": f"t{i}", "request_id": f"r{i}", "request": "t",
                "response": f"a p={[0.1, 0.6, 0.9][i % 3]}"})
        return (await c.get("/v1/review/status", headers=auth("bob"))).json()

    st = run(make_service(tmp_path), scenario)
    lines = status_lines(st)
    assert lines[0] == "policy review-test on live traffic: 30 decisions, 0 labels"
    assert any(x.startswith("FAR on live traffic:") for x in lines)
    assert "the policy's certificate is not certified on live traffic yet" in lines
    assert lines[-1] == ("drift: not run (the policy's calibration run (provenance 'source') is "
                         "not on this machine)")
    assert KEYS["bob"] not in "\n".join(lines)


@pytest.mark.parametrize("status,body,says", [
    (404, {"error": {"message": "not found"}}, "has no review queue (start it with calimon serve "
                                               "--review)"),
    (401, {"error": {"message": "authorization: missing or wrong API key"}},
     "set $CALIMON_API_KEY to a reviewer's key"),
    (503, {"error": {"message": "review store unavailable"}}, "503 review store unavailable")])
def test_a_server_that_cannot_answer_is_one_line(monkeypatch, status, body, says):
    import json

    from calimon.serve import remote

    def answer(full, headers):
        return remote._Answer(status, json.dumps(body))

    monkeypatch.setattr(remote, "_fetch", answer)
    r = _invoke("recertify", "--serve", "http://127.0.0.1:8000")
    assert r.exit_code != 0 and says in r.output and "Traceback" not in r.output
