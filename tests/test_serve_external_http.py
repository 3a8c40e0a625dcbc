"""An externally scored policy on a real `calimon serve` on loopback, over HTTP: the whole review
loop (decisions on the scores clients send, the queue, labels, live recertification with
`calimon recertify --serve`, the drift watch, a shadow candidate promoted on its checks, the
promotion kept across a restart), with no model loaded and no torch in the server; and the
server SIGKILLed right after answers arrive, on SQLite and on PostgreSQL: every answer a client
got is in the log, as answered."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import httpx
import pytest
from external_policy import READOUT, deciding, write_scores_csv
from review_fakes import KEYS, auth, keys_file
from serve_server import start_server
from typer.testing import CliRunner

from calimon.cli import app
from calimon.deploy.pinned import resolve_policy
from calimon.deploy.policy_file import load_policy, save_policy
from calimon.review.labels import item_id_of
from calimon.serve.decision_log import open_log

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def cli(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def design(folder: Path) -> tuple[Path, Path]:
    """The live policy (`calimon curve` on a CSV of scores, `calimon escalate` with FAR and MR
    targets) and a candidate passing less (a lower ``t_low``)."""
    scores = write_scores_csv(folder / "scores.csv")
    run, live = folder / "run", folder / "live.yaml"
    cli("curve", "--benchmark", str(scores), "--readout", READOUT, "--split", "test",
        "--no-binary", "--quiet", "--out", str(run))
    cli("escalate", str(run), "--budget", "0.4", "--far-alpha", "0.2", "--mr-alpha", "0.3",
        "--audit-fraction", "0.1", "--out", str(live))
    policy = load_policy(live)
    assert policy.model == "external" and all(g.certified for g in policy.guarantees)
    cand = policy.model_copy(update={"name": "candidate", "t_low": policy.t_low / 3})
    return live, save_policy(cand, folder / "candidate.yaml")


def traffic(live: Path, cand: Path) -> list[tuple[float, bool]]:
    """(raw score, misbehaving): 22 misbehaving transcripts the live policy passes and the
    candidate sends to review, 10 both block, 20 benign both pass, 10 benign both review."""
    a, b = deciding(live), deciding(cand)
    grid = [x / 2 for x in range(201)]

    def first(live_action: str, cand_action: str) -> float:
        return next(x for x in grid if a(x) == live_action and b(x) == cand_action)

    return ([(first("auto_pass", "human_review"), True)] * 22
            + [(first("auto_block", "auto_block"), True)] * 10
            + [(first("auto_pass", "auto_pass"), False)] * 20
            + [(first("human_review", "human_review"), False)] * 10)


def send(c: httpx.Client, rows: list[tuple[float, bool]], start: int) -> list[dict]:
    out = []
    for i, (raw, bad) in enumerate(rows, start):
        r = c.post("/v1/score", json={"request_id": f"r{i}", "id": f"t{i}", "score": raw,
                                      "request": f"Task {i}: make the test suite pass.",
                                      "response": f"Step {i}: the agent "
                                                  + ("deletes the failing test." if bad else
                                                     "fixes the off-by-one.")})
        assert r.status_code == 200, r.text
        out.append(r.json())
    return out


def no_torch(pid: int) -> bool:
    """Whether the process maps no torch library (Linux: /proc/PID/maps)."""
    maps = Path(f"/proc/{pid}/maps").read_text()
    return "libtorch" not in maps and "/torch/" not in maps


@pytest.mark.slow
def test_an_external_policy_through_the_review_loop_over_http(tmp_path, monkeypatch):
    monkeypatch.setenv("CALIMON_API_KEY", KEYS["ada"])
    live, cand = design(tmp_path)
    rows = traffic(live, cand)
    keys = str(keys_file(tmp_path))
    flags = ("--keys", keys, "--review", "--review-store", str(tmp_path / "review.sqlite"),
             "--review-retain", "1.0", "--drift-every", "100000", "--drift-permutations", "50")
    log, out = tmp_path / "decisions.sqlite", tmp_path / "server.out"
    server = start_server(live, log, out, *flags, "--shadow", str(cand), key=None,
                          cwd=tmp_path)
    try:
        with httpx.Client(base_url=server.url, headers=auth("ada"), timeout=120) as c:
            answers = send(c, rows, 0)
            missing = c.post("/v1/score", json={"request": "t", "response": "x"})
            queue = c.get("/v1/review/queue", params={"limit": 500}).json()["items"]
            for i, (_, bad) in enumerate(rows):
                item = item_id_of(f"r{i}")
                r = c.post("/v1/review/labels", headers=auth("bob"), json={
                    "label_id": f"lab-{item}", "item_id": item,
                    "label": "misbehavior" if bad else "benign"})
                assert r.status_code == 200, r.text
            status = c.get("/v1/review/status").json()
            recertified = cli("recertify", "--serve", server.url)
            drift = c.post("/v1/review/drift", timeout=300).json()
            checks = c.get("/v1/policy").json()["candidate"]
            promoted = c.post("/v1/policy/promote")
            after = send(c, rows[:22], 100)
            metrics = c.get("/metrics").text
        torchless = no_torch(server.proc.pid)
    finally:
        server.stop()

    first = deciding(live)
    assert [a["action"] for a in answers] == [first(raw) for raw, _ in rows]
    assert {a["model"] for a in answers} == {"external"} and all(a["p_cal"] for a in answers)
    assert missing.status_code == 422 and missing.json()["error"]["field"] == "score"
    review_band = {item_id_of(f"r{i}") for i, a in enumerate(answers)
                   if a["action"] == "human_review"}
    assert review_band <= {q["item_id"] for q in queue}  # the band is asked for first
    assert status["labels"] == len(rows)
    far = next(c for c in status["certificates"] if c["rate"] == "far")
    assert far["state"] == "holds" and far["line"] in recertified
    assert drift["state"] == "checked" and "shifted" in drift, drift
    assert checks["promotable"] and checks["mr"]["candidate_wins"] == 22, checks
    assert promoted.status_code == 200, promoted.text
    cand_hash = resolve_policy(cand).sha256
    assert {a["policy_hash"] for a in after} == {cand_hash}
    assert {a["action"] for a in after} == {"human_review"}  # the candidate catches them
    assert f'role="live",policy="candidate",sha256="{cand_hash}"' in metrics
    assert torchless  # no model, no torch: the server never loaded them

    # a server restarted on the same log serves the promoted policy (with no access log)
    said = server.log_text()
    again = start_server(live, log, out, *flags, "--no-access-log", key=None, cwd=tmp_path)
    try:
        with httpx.Client(base_url=again.url, headers=auth("ada"), timeout=120) as c:
            replay = c.post("/v1/score", json={"request_id": "r0", "id": "t0",
                                               "score": rows[0][0],
                                               "request": "Task 0: make the test suite pass.",
                                               "response": "Step 0: the agent deletes the "
                                                           "failing test."})
            fresh = send(c, rows[:1], 200)
    finally:
        again.stop()
    assert replay.json() == answers[0]  # from the log, as first answered
    assert fresh[0]["policy_hash"] == cand_hash and "live policy from the decision log" \
        in again.log_text()
    assert '"POST /v1/score HTTP/1.1" 200' in said
    assert "POST /v1/score" not in again.log_text()[len(said):]  # the output is appended to


N, CLIENTS, KILL_AFTER = 400, 16, 120


def _kill_under_load(server) -> dict[str, dict]:
    """Send N requests from CLIENTS threads; SIGKILL the server the moment the KILL_AFTER-th
    answer arrives. The answers received (request id -> JSON)."""
    answered: dict[str, dict] = {}
    lock, local = threading.Lock(), threading.local()

    def post(i: int) -> None:
        if not hasattr(local, "client"):
            local.client = server.client(timeout=60)
        body = {"request_id": f"k{i}", "id": f"t{i}", "request": f"task {i}",
                "response": f"answer {i}", "score": (7 * i) % 101}
        try:
            r = local.client.post("/v1/score", json=body)
        except httpx.HTTPError:
            return
        if r.status_code == 200:
            with lock:
                answered[body["request_id"]] = r.json()
                if len(answered) == KILL_AFTER:
                    server.kill()

    with ThreadPoolExecutor(CLIENTS) as pool:
        for f in as_completed([pool.submit(post, i) for i in range(N)]):
            f.result()
    return answered


def _killed_loses_nothing(tmp_path: Path, target: str) -> None:
    from external_policy import write_external_policy

    policy = write_external_policy(tmp_path / "policy", score="p_cal")
    server = start_server(policy, target, tmp_path / "server.out")
    try:
        answered = _kill_under_load(server)
    finally:
        server.stop()
    assert server.proc.returncode == -9
    assert KILL_AFTER <= len(answered) < N
    said = next(line for line in server.log_text().splitlines() if "decision log" in line)
    assert ("synchronous=FULL: a commit is on disk" in said if "://" not in target else
            "synchronous_commit=on, fsync=on" in said and "on the server's disk" in said), said
    log = open_log(target)
    try:
        logged = log.lookup_many(list(answered))
    finally:
        log.close()
    # every answer a client got had been committed, and is logged as it was answered
    assert {rid: e.response for rid, e in logged.items()} == answered


@pytest.mark.slow
def test_sqlite_killed_right_after_answers_loses_none_of_them(tmp_path):
    _killed_loses_nothing(tmp_path, str(tmp_path / "decisions.sqlite"))


@pytest.mark.postgres
def test_postgres_killed_right_after_answers_loses_none_of_them(tmp_path):
    from pg_server import postgres_server

    with postgres_server() as pg:
        _killed_loses_nothing(tmp_path, pg.create_schema("killed"))
