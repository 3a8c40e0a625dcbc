"""The whole loop on the stand-in served model (tests/review_server.py: the real `calimon serve`
behind ``--backend chat``): label the live policy's traffic, train a candidate on the labels,
run it in shadow, promote it, restart, roll back. Before the promotion every answered decision
is the live policy's; after it the candidate's; after the rollback the first one's again; the
decision log has every change, and a restarted server serves the policy it says is live.

The candidate is made by `train_candidate`, one call on the exported labels (`calimon curve` and
`calimon escalate` today; `calimon heads train --from-review` can take its place).
"""

from __future__ import annotations

import httpx
import pytest
from review_fakes import KEYS, keys_file
from review_server import chat_flags, chat_server, standin_samples, start
from serve_server import free_port
from test_review_loop import cli

from calimon.review.labels import item_id_of
from calimon.samples import write_samples

pytestmark = pytest.mark.slow  # 63-173 s on 2 shared cores: three server starts, six commands


def policy_of(samples: str, run: str, out: str, api: str, budget: float) -> None:
    """`calimon curve` then `calimon escalate` (FAR <= 0.1, a 10% audit slice, ``budget``)."""
    cli("curve", *chat_flags(api), "--model", "stand-in", "--benchmark", samples, "--split",
        "test", "--no-binary", "--n-boot", "20", "--quiet", "--out", run, "--store",
        f"{run}.store.sqlite")
    cli("escalate", run, "--out", out, "--far-alpha", "0.1", "--budget", str(budget),
        "--audit-fraction", "0.1")


def train_candidate(labelled: str, run: str, out: str, api: str) -> None:
    """The candidate policy from the reviewed labels (one call). Recalibrating the same
    stand-in monitor cannot rank better, so the candidate gets a larger review budget than the
    live policy (0.5 against 0.1): it misses less, which is what the promotion checks must see;
    a head trained on the labels would earn that by ranking better instead."""
    policy_of(labelled, run, out, api, budget=0.5)


def send(c: httpx.Client, traffic, tag: str) -> set[str]:
    """Score the traffic; the policies that answered."""
    seen = set()
    for s in traffic:
        r = c.post("/v1/score", json={"id": f"{tag}-{s.id}", "request_id": f"{tag}-{s.id}",
                                      "request": s.request, "response": s.response})
        assert r.status_code == 200, r.text
        seen.add(r.json()["policy_hash"])
    return seen


def label(c: httpx.Client, traffic, tag: str) -> None:
    """Label every transcript of the traffic (all are kept: --review-retain 1)."""
    for s in traffic:
        item = item_id_of(f"{tag}-{s.id}")
        r = c.post("/v1/review/labels", json={"label_id": f"l-{item}", "item_id": item,
                                              "label": "misbehavior" if s.label else "benign"})
        assert r.status_code == 200, r.text


def test_label_train_shadow_promote_restart_and_roll_back(tmp_path, monkeypatch):
    monkeypatch.setenv("CALIMON_API_JOURNAL", str(tmp_path / "journal.sqlite"))
    monkeypatch.setenv("CALIMON_API_KEY", KEYS["ada"])
    source = write_samples(standin_samples(150, 0.15, 1, "srcA"), tmp_path / "a.jsonl")
    a, b = str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml")
    port = free_port()
    flags = ("--keys", str(keys_file(tmp_path)), "--review-retain", "1", "--drift-every",
             "100000")
    head = {"Authorization": f"Bearer {KEYS['ada']}"}
    with chat_server() as api:
        policy_of(str(source), str(tmp_path / "run-a"), a, api.url, budget=0.1)
        server = start(tmp_path / "a.yaml", tmp_path, port, api.url, *flags)
        try:  # label the live policy's traffic, export it, train the candidate
            with httpx.Client(base_url=server.url, headers=head, timeout=120) as c:
                first = standin_samples(60, 0.85, 2, "srcB", split=False)
                live_hash = send(c, first, "t1").pop()
                label(c, first, "t1")
            cli("review-export", server.url, str(tmp_path / "labelled.jsonl"), "--sample", "all")
        finally:
            server.stop()
        train_candidate(str(tmp_path / "labelled.jsonl"), str(tmp_path / "run-b"), b, api.url)
        server = start(tmp_path / "a.yaml", tmp_path, port, api.url, *flags, "--shadow", b)
        try:  # the candidate in shadow: scored and logged, never answered
            with httpx.Client(base_url=server.url, headers=head, timeout=120) as c:
                second = standin_samples(100, 0.85, 3, "srcC", split=False)
                assert send(c, second, "t2") == {live_hash}
                refused = c.post("/v1/policy/promote")  # no labels of its traffic yet
                label(c, second, "t2")
                checks = c.get("/v1/policy").json()["candidate"]
                promoted = cli("promote", server.url)
                cand_hash = checks["policy_hash"]
                assert send(c, standin_samples(10, 0.85, 4, "srcD", split=False),
                            "t3") == {cand_hash}
                metrics = c.get("/metrics").text
        finally:
            server.stop()
        server = start(tmp_path / "a.yaml", tmp_path, port, api.url, *flags)
        try:  # restarted on the first policy's file: the log says the candidate is live
            with httpx.Client(base_url=server.url, headers=head, timeout=120) as c:
                after_restart = c.get("/v1/info").json()["policy_hash"]
                rolled = cli("rollback", server.url)
                assert send(c, standin_samples(10, 0.85, 5, "srcE", split=False),
                            "t4") == {live_hash}
                changes = c.get("/v1/policy").json()["changes"]
        finally:
            server.stop()

    assert refused.status_code == 409, refused.text
    assert "certificate:" in refused.json()["error"]["message"]
    assert checks["promotable"], checks["reasons"]
    assert checks["mr"]["lower"] > 0 and checks["certificate_holds"]
    assert f"policy 'b' (sha256 {cand_hash[:12]}) is live" in promoted
    assert "checked: MR live" in promoted
    assert f'calimon_policy_info{{role="live",policy="b",sha256="{cand_hash}"}} 1' in metrics
    assert after_restart == cand_hash
    assert "live policy from the decision log: 'b' (promote" in server.log_text()
    assert f"policy 'a' (sha256 {live_hash[:12]}) is live" in rolled
    assert [(ch["kind"], ch["policy_hash"]) for ch in changes] == [
        ("deploy", live_hash), ("refused", cand_hash), ("promote", cand_hash),
        ("rollback", live_hash)]
