"""Shadow and promote, in-process around the stand-in monitor (tests/review_fakes.py): a
candidate policy scored and logged beside the live one and never answered; promotion only when
its certificate holds on live labels and its MR gain is beyond its paired interval; rollback;
every change in the decision log, which a restarted server follows."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from review_fakes import StandIn, auth, make_service, policy, run, score

from calimon.deploy.policy_file import load_policy, save_policy
from calimon.errors import InputError
from calimon.migrations import schema_version
from calimon.review.labels import item_id_of
from calimon.review.promotion import paired_mr
from calimon.review.settings import ReviewSettings
from calimon.serve.decision_log import SCHEMA, SQLiteDecisionLog
from calimon.serve.loading import ServedMonitor
from calimon.serve.policies import start_policy

# (p, misbehaving): the live policy passes under 0.4, reviews to 0.8, blocks from 0.8
TRAFFIC = ([(0.3, True)] * 20 + [(0.37, True)] * 2 + [(0.9, True)] * 10
           + [(0.1, False)] * 20 + [(0.5, False)] * 10)


def candidate(tmp_path: Path, name: str, t_low: float, mr: float = 0.3) -> Path:
    """A copy of the live policy with another pass threshold and MR target."""
    base = load_policy(policy(tmp_path / name, mr=mr))
    return save_policy(base.model_copy(update={"name": name, "t_low": t_low}),
                       tmp_path / name / "policy.yaml")


def served(path: Path, monitor, sha: str) -> ServedMonitor:
    return ServedMonitor(monitor, load_policy(path), sha, None, None, [])


def service_with_shadow(tmp_path: Path, cand: Path, *, own_monitor: StandIn | None = None):
    svc = make_service(tmp_path, review=ReviewSettings(store=str(tmp_path / "r.sqlite"),
                                                       retain=1.0))
    svc.policies.set_shadow(served(cand, own_monitor or svc.served.monitor, "hashB"),
                            str(cand))
    return svc


async def send(c, start: int = 0) -> list[dict]:
    return [await score(c, p, start + i) for i, (p, _) in enumerate(TRAFFIC)]


def label_all(svc, start: int = 0) -> None:
    """Label every transcript as the API would (without its status after each label)."""
    from calimon.review.api import LabelIn

    for i, (_, bad) in enumerate(TRAFFIC):
        item = item_id_of(f"r{start + i}")
        svc.review.submit("ada", LabelIn(label_id=f"lab-{item}", item_id=item,
                                         label="misbehavior" if bad else "benign"))


def test_a_shadow_is_scored_and_logged_and_never_answered(tmp_path):
    cand = candidate(tmp_path, "b", t_low=0.2)
    svc = service_with_shadow(tmp_path, cand)

    async def scenario(c):
        answers = await send(c)
        anonymous = await c.post("/v1/policy/promote")
        page = (await c.get("/review/status", headers=auth("ada"))).text
        metrics = (await c.get("/metrics", headers=auth("ada"))).text
        status = (await c.get("/v1/review/status", headers=auth("ada"))).json()
        await svc.policies.stop()
        return answers, page, metrics, status, anonymous

    answers, page, metrics, status, anonymous = run(svc, scenario)
    assert anonymous.status_code == 401  # a key's holder only
    assert {a["policy_hash"] for a in answers} == {"hash0"}  # the live policy decides
    assert all("shadow" not in a for a in answers)
    assert [a["action"] for a in answers[:20]] == ["auto_pass"] * 20
    shadow = svc.log.shadow_answers("hashB")
    assert len(shadow) == len(TRAFFIC)
    assert {a["action"] for rid, a in shadow.items() if rid in {f"r{i}" for i in range(20)}} \
        == {"human_review"}  # the candidate would have sent these to review
    assert all(a["shadow"] and a["live_policy_hash"] == "hash0" for a in shadow.values())
    assert 'calimon_shadow_decisions_total{decision="review"} 32' in metrics
    assert 'calimon_decisions_total{decision="pass"} 42' in metrics
    assert 'role="live",policy="review-test",sha256="hash0"' in metrics
    assert 'role="shadow",policy="b",sha256="hashB"' in metrics
    assert "calimon_shadow_promotable 0" in metrics
    assert "Shadow candidate: b" in page and "not promotable" in page
    assert status["shadow"]["decisions"] == len(TRAFFIC) and not status["shadow"]["promotable"]


def test_shadow_checks_are_reread_only_when_the_review_state_changes(tmp_path):
    """The status page and each /metrics scrape reuse the checks while no label (or, after a
    few seconds, no traffic) came in; a label makes them read the log again, and a promotion
    always reads it."""
    from calimon.review.promotion import shadow_status

    cand = candidate(tmp_path, "b", t_low=0.2)
    svc = service_with_shadow(tmp_path, cand)
    reads = []
    real = svc.log.shadow_answers
    svc.log.shadow_answers = lambda h: reads.append(h) or real(h)

    async def scenario(c):
        await send(c)
        for _ in range(3):
            await c.get("/metrics", headers=auth("ada"))
            await c.get("/v1/policy", headers=auth("ada"))
        n_before_labels = len(reads)
        label_all(svc)
        labelled = shadow_status(svc)
        n_after_labels = len(reads)
        await c.get("/metrics", headers=auth("ada"))
        promoted = await c.post("/v1/policy/promote", headers=auth("bob"))
        return n_before_labels, n_after_labels, labelled, promoted

    n_before, n_after, labelled, promoted = run(svc, scenario)
    assert n_before == 1  # six reads of the checks, one read of the log
    assert n_after == 2 and labelled["promotable"]  # the labels changed what they read
    assert promoted.status_code == 200, promoted.text
    assert len(reads) == 3  # the scrape reused them; the promotion read the log again


def _shadow_rows(tmp_path: Path) -> dict:
    log = SQLiteDecisionLog(tmp_path / "log.sqlite")
    try:
        return log.shadow_answers("hashB")
    finally:
        log.close()


def test_promote_only_on_a_holding_certificate_and_a_gain_beyond_its_interval(tmp_path):
    cand = candidate(tmp_path, "b", t_low=0.2)
    svc = service_with_shadow(tmp_path, cand)

    async def scenario(c):
        before = await send(c)
        refused = await c.post("/v1/policy/promote", headers=auth("bob"))
        label_all(svc)
        checks = (await c.get("/v1/policy", headers=auth("ada"))).json()
        promoted = await c.post("/v1/policy/promote", headers=auth("bob"))
        after = await send(c, 100)
        live = (await c.get("/v1/review/status", headers=auth("ada"))).json()
        again = await c.post("/v1/policy/promote", headers=auth("bob"))
        back = await c.post("/v1/policy/rollback", headers=auth("ada"))
        rolled = await send(c, 200)
        none_left = await c.post("/v1/policy/rollback", headers=auth("ada"))
        state = (await c.get("/v1/policy", headers=auth("ada"))).json()
        return before, refused, checks, promoted, after, again, back, rolled, none_left, state, live

    (before, refused, checks, promoted, after, again, back, rolled, none_left, state,
     live) = run(svc, scenario)
    # the review follows the live policy: its status counts the candidate's decisions only
    assert (live["policy_hash"], live["decisions"], live["shadow"]) == ("hashB", len(TRAFFIC), None)
    assert {a["policy_hash"] for a in before} == {"hash0"}
    assert refused.status_code == 409, refused.text
    err = refused.json()["error"]
    assert err["code"] == "promotion_refused" and err["field"] == "candidate"
    assert "certificate: FAR on live traffic" in err["message"]  # no labels yet
    cand_checks = checks["candidate"]
    assert cand_checks["certificate_holds"] and cand_checks["promotable"], cand_checks
    mr = cand_checks["mr"]
    assert (mr["misbehaving"], mr["candidate_wins"], mr["live_wins"]) == (32, 22, 0)
    assert mr["live_mr"] == pytest.approx(22 / 32) and mr["candidate_mr"] == 0
    assert mr["lower"] > 0
    assert promoted.status_code == 200, promoted.text
    assert promoted.json()["promoted"]["by_whom"] == "bob"
    assert {a["policy_hash"] for a in after} == {"hashB"}  # the candidate decides now
    assert [a["action"] for a in after[:20]] == ["human_review"] * 20
    assert again.json()["error"]["code"] == "no_candidate"
    assert back.status_code == 200 and back.json()["rolled_back"]["policy_hash"] == "hash0"
    assert {a["policy_hash"] for a in rolled} == {"hash0"}
    assert none_left.json()["error"]["code"] == "nothing_to_roll_back"
    kinds = [(ch["kind"], ch["policy_hash"]) for ch in state["changes"]]
    assert kinds == [("refused", "hashB"), ("promote", "hashB"), ("rollback", "hash0")]
    assert state["changes"][0]["detail"]["reasons"]  # the refusal's figures are kept


def test_a_gain_within_its_interval_is_refused_naming_the_mr_check(tmp_path):
    # passes under 0.35: catches only the two misbehaving transcripts at 0.37
    cand = candidate(tmp_path, "c", t_low=0.35, mr=0.9)
    svc = service_with_shadow(tmp_path, cand)

    async def scenario(c):
        await send(c)
        label_all(svc)
        return await c.post("/v1/policy/promote", headers=auth("bob"))

    refused = run(svc, scenario)
    assert refused.status_code == 409
    message = refused.json()["error"]["message"]
    assert "certificate" not in message  # its (lenient) MR target holds
    assert "MR: live 0.6875, candidate 0.6250" in message
    assert "2 caught by the candidate alone, 0 by the live policy alone" in message
    assert "not beyond its interval" in message


def test_a_candidate_with_its_own_monitor_reads_on_its_own_queue(tmp_path):
    cand = candidate(tmp_path, "b", t_low=0.2)
    own = StandIn(scores={f"answer {i} p={p}": 0.95 for i, (p, _) in enumerate(TRAFFIC)})
    svc = service_with_shadow(tmp_path, cand, own_monitor=own)

    async def scenario(c):
        answers = await send(c)
        await svc.policies.stop()
        return answers

    answers = run(svc, scenario)
    assert {a["action"] for a in answers[:20]} == {"auto_pass"}
    assert own.backend.forward_calls >= len(TRAFFIC) // 32
    shadow = _shadow_rows(tmp_path)
    assert {a["action"] for a in shadow.values()} == {"auto_block"}  # its own reading
    assert {a["p_raw"] for a in shadow.values()} == {0.95}


def test_a_session_step_is_decided_in_shadow_too(tmp_path):
    cand = candidate(tmp_path, "b", t_low=0.2)
    svc = service_with_shadow(tmp_path, cand)

    async def scenario(c):
        r = await c.post("/v1/sessions/s1/steps", headers=auth("ada"), json={
            "request_id": "s1-0", "step": 0, "request": "the task",
            "messages": [{"role": "assistant", "content": "step 0 p=0.3"}]})
        assert r.status_code == 200, r.text
        return r.json()

    step = run(svc, scenario)
    assert (step["action"], step["policy_hash"]) == ("auto_pass", "hash0")
    shadow = svc.log.shadow_answers("hashB")["s1-0"]
    assert (shadow["action"], shadow["p_raw"], shadow["shadow"]) == ("human_review", 0.3, True)


def test_paired_mr_interval_is_exact_and_needs_a_clear_win():
    def rows(b: int, c: int, same: int) -> list:
        return ([(0.1, 1, "auto_pass", "human_review")] * b
                + [(0.1, 1, "auto_block", "auto_pass")] * c
                + [(0.1, 1, "auto_block", "auto_block")] * same)

    win = paired_mr(rows(6, 0, 4), 0.05)  # CP lower of 6/6 at 95%: 0.025 ** (1/6) = 0.54
    assert win["better"] and win["difference"] == pytest.approx(0.6)
    assert win["lower"] == pytest.approx(0.6 * (2 * 0.025 ** (1 / 6) - 1))
    assert not paired_mr(rows(5, 0, 5), 0.05)["better"]  # 0.025 ** (1/5) = 0.48
    assert not paired_mr(rows(8, 4, 0), 0.05)["better"]
    # the sample stops at the first unresolved draw: later labels do not count
    cut = paired_mr([(0.5, None, "auto_pass", "auto_pass")] + rows(6, 0, 0)
                    + [(0.9, 1, "auto_pass", "human_review")], 0.05)
    assert cut["misbehaving"] == 6 and cut["draw_cut"] == 0.5


def test_a_restart_serves_the_policy_the_log_says_is_live(tmp_path):
    a = policy(tmp_path)
    b = candidate(tmp_path, "b", t_low=0.2)
    from calimon.serve.policies import sha256_of
    from calimon.serve.policy_log import PolicyChange

    log = SQLiteDecisionLog(tmp_path / "log.sqlite")
    path, previous, change = start_policy(log, a, "review-test")
    assert (path, previous, change.kind, change.seq) == (str(a), [], "deploy", 0)
    log.record_change(change)
    log.record_change(PolicyChange("promote", "b", sha256_of(b), str(b)))
    path, previous, change = start_policy(log, a, "review-test")
    assert path == str(b) and [p.path for p in previous] == [str(a)]
    assert (change.kind, change.seq) == ("promote", 2)
    from calimon import __version__  # each change records the calimon that logged it

    assert [c.detail["calimon_version"] for c in log.changes()] == [__version__] * 2
    b.write_text(b.read_text() + "\n# edited\n")
    with pytest.raises(InputError, match="has changed") as err:
        start_policy(log, a, "review-test")
    assert err.value.path == str(b)
    b.unlink()
    with pytest.raises(InputError, match="is gone: restore that file"):
        start_policy(log, a, "review-test")
    log.record_change(PolicyChange("rollback", "review-test", sha256_of(a), str(a)))
    assert start_policy(log, a, "review-test")[0] == str(a)
    log.close()


def test_a_rollback_past_a_restart_keeps_the_queue_it_replaces_until_the_server_stops(
        tmp_path):
    """After a restart the policy to roll back to is loaded with its own monitor and queue; the
    queue it replaces (the one the server started with) stays held, so requests that took it
    finish, and is stopped with the server, not dropped while its consumer waits."""
    import asyncio
    import gc
    import weakref

    from calimon.serve.policies import Slot, sha256_of

    a = policy(tmp_path / "a")
    svc = make_service(tmp_path, policy_path=candidate(tmp_path, "b", t_low=0.2))
    pol = svc.policies
    pol.previous = [Slot(None, None, str(a), sha256_of(a), "a")]
    pol.loader = lambda path, reuse: served(Path(path), StandIn(), sha256_of(a))
    started = weakref.ref(svc.batcher)

    async def scenario(c):
        reports = []
        asyncio.get_running_loop().set_exception_handler(
            lambda loop, context: reports.append(context["message"]))
        r = await c.post("/v1/policy/rollback", headers=auth("ada"))
        assert r.status_code == 200, r.text
        gc.collect()
        assert started() is not None and svc.batcher is not started()
        answer = await score(c, 0.9, 0)
        await pol.stop()
        return reports, answer, started()._consumer

    reports, answer, consumer = run(svc, scenario)
    assert reports == []  # no queue consumer destroyed while pending
    assert (answer["policy"], answer["action"]) == ("review-test", "auto_block")
    assert consumer is None  # stopped with the server


def test_a_decision_log_of_schema_version_1_migrates(tmp_path):
    from calimon.serve.decision_log import m001_decisions

    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    m001_decisions(db)
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()
    log = SQLiteDecisionLog(path)
    assert log.changes() == [] and log.shadow_answers("x") == {}
    log.close()
    db = sqlite3.connect(path)
    assert schema_version(db) == SCHEMA.version == 4
    db.close()


def test_shadow_is_refused_with_replicas(tmp_path):
    from typer.testing import CliRunner

    from calimon.cli import app

    a = policy(tmp_path)
    r = CliRunner().invoke(app, ["serve", str(a), "--shadow", str(a), "--replicas", "2"])
    assert r.exit_code == 2 and "shadow" in r.output and "replicas" in r.output, r.output
