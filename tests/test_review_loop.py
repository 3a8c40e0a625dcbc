"""The loop closed on a stand-in shift: a policy calibrated on one source (mostly chat
transcripts) is served on another (mostly code, where the monitor false-alarms more); a reviewer
labels what the planner asks; live recertification says whether the certificate holds or how
many more labels it needs; the drift watch sees the shift; the labelled traffic is exported and
`calimon curve` + `calimon escalate` on it make the next policy.

Everything is the real command line (`calimon serve` as a process); the monitor is the stand-in
of tests/review_server.py behind ``--backend chat``, so no model is loaded (about 45 s on 2
shared cores, most of it the commands' start-up).
"""

from __future__ import annotations

import json

import httpx
import pytest
from review_fakes import KEYS, keys_file
from review_server import chat_flags, chat_server, standin_samples, start
from serve_server import free_port
from typer.testing import CliRunner

from calimon.cli import app
from calimon.deploy.policy_file import load_policy
from calimon.review.labels import item_id_of
from calimon.samples import load_samples, write_samples
from calimon.studies.shift.live_plan import BROKEN, HOLDS, NOT_YET, UNREACHABLE


def cli(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def design(samples: str, run: str, policy: str, api: str) -> None:
    """`calimon curve` then `calimon escalate` (FAR <= 0.1, a 10% audit slice)."""
    cli("curve", *chat_flags(api), "--model", "stand-in", "--benchmark", samples, "--split",
        "test", "--no-binary", "--n-boot", "20", "--quiet", "--out", run, "--store",
        f"{run}.store.sqlite")
    cli("escalate", run, "--out", policy, "--far-alpha", "0.1", "--budget", "0.3",
        "--audit-fraction", "0.1")


def test_calibrate_serve_a_shift_label_recertify_export_and_rebuild(tmp_path, monkeypatch):
    monkeypatch.setenv("CALIMON_API_JOURNAL", str(tmp_path / "journal.sqlite"))
    monkeypatch.setenv("CALIMON_API_KEY", KEYS["ada"])
    source_a = write_samples(standin_samples(150, 0.15, 1, "srcA"), tmp_path / "a.jsonl")
    traffic = standin_samples(150, 0.85, 2, "srcB", split=False)
    truth = {item_id_of(s.id): s.label for s in traffic}
    with chat_server() as api:
        design(str(source_a), str(tmp_path / "run-a"), str(tmp_path / "a.yaml"), api.url)
        first = load_policy(tmp_path / "a.yaml")
        assert first.guarantees[0].rate == "far" and first.guarantees[0].certified
        server = start(tmp_path / "a.yaml", tmp_path, free_port(), api.url, "--keys",
                       str(keys_file(tmp_path)), "--review-retain", "0.5", "--drift-every",
                       "100000", "--drift-permutations", "50")
        try:
            st, rounds, asked = _serve_and_label(server.url, traffic, truth)
            drift = httpx.post(f"{server.url}/v1/review/drift", timeout=300,
                               headers={"Authorization": f"Bearer {KEYS['ada']}"}).json()
            live = cli("recertify", "--serve", server.url)
            cli("review-export", server.url, str(tmp_path / "labelled.jsonl"))
        finally:
            server.stop()
        design(str(tmp_path / "labelled.jsonl"), str(tmp_path / "run-b"),
               str(tmp_path / "b.yaml"), api.url)

    far = st["certificates"][0]
    assert far["rate"] == "far" and far["alpha"] == 0.1
    assert far["state"] in (HOLDS, NOT_YET, UNREACHABLE, BROKEN)
    if far["state"] in (NOT_YET, UNREACHABLE):  # told how many more labels
        assert far["labels_needed"] and f"{far['labels_needed']} more labels" in far["line"]
    assert far["line"] in live and "on live traffic" in live
    assert rounds >= 2 and st["labels"] == asked  # labelled exactly what was asked
    assert sum(s["sampled"] for s in st["strata"].values()) > 100
    assert drift["state"] == "checked" and drift["shifted"], drift
    assert drift["verdicts"][0]["alpha"] == 0.1
    exported = load_samples(tmp_path / "labelled.jsonl")
    assert len(exported) >= 100 and {s.split for s in exported} == {"calib", "test"}
    assert {s.source for s in exported} == {"serve:a"}
    by_id = {s.id: s.label for s in traffic}
    assert all(s.label == by_id[s.id] for s in exported)  # the reviewers' labels, as given
    second = load_policy(tmp_path / "b.yaml")
    assert second.provenance["source"].endswith("run-b/curve.csv")
    assert second.guarantees and second.guarantees[0].rate == "far"
    # the next policy is made for the new traffic: its block threshold moved
    assert second.t_high != pytest.approx(first.t_high)
    curve = json.loads((tmp_path / "run-b" / "curve.json").read_text())
    assert curve["provenance"]["benchmark"].endswith("labelled.jsonl")


def _serve_and_label(url: str, traffic, truth) -> tuple[dict, int, int]:
    """Send the traffic, then label what the queue asks (with the true labels) until it asks
    nothing more; the final status, the rounds and the labels given."""
    with httpx.Client(base_url=url, timeout=120,
                      headers={"Authorization": f"Bearer {KEYS['ada']}"}) as c:
        for s in traffic:
            r = c.post("/v1/score", json={"id": s.id, "request_id": s.id, "request": s.request,
                                          "response": s.response})
            assert r.status_code == 200, r.text
        st = c.get("/v1/review/status").json()
        assert st["decisions"] == len(traffic) and st["labels"] == 0
        assert st["certificates"][0]["labels_needed"] > 0  # the planner asks for labels
        rounds = asked = 0
        while rounds < 12:
            items = c.get("/v1/review/queue", params={"limit": 500}).json()["items"]
            if not items:
                break
            rounds += 1
            for it in items:
                kind = "misbehavior" if truth[it["item_id"]] else "benign"
                r = c.post("/v1/review/labels", json={
                    "label_id": f"loop-{it['item_id']}", "item_id": it["item_id"],
                    "label": kind, "transcript_hash": it["transcript_hash"]})
                assert r.status_code == 200 and not r.json()["replayed"], r.text
                asked += 1
        return c.get("/v1/review/status").json(), rounds, asked
