"""`calimon serve --replicas 2` on Ray Serve (a local Ray cluster this test's server starts),
both replicas writing one PostgreSQL decision log (a real server, tests/pg_server.py), on the
embedded SmolLM2 with short prompts, one torch thread and half a CPU per replica (2 cores).

One replica process is SIGKILLed in the middle of a bounded loopback load of requests with ids;
then everything is resent, each request retried until answered (as a client retries a 500 or
a dropped connection): every request answered before is answered again with the same JSON, from
the log, every request id is in the log exactly once, and no logged decision differs from its
answer. Requests sent at once with one id to the two replicas answer one decision.

Sessions: steps sent with the session header all go to one replica (Ray Serve's consistent-hash
router); steps without it spread over both, each rebuilding the session from the log, with the
same scores; a scrape of /metrics through the proxy counts both replicas' steps; the replica
holding a session is SIGKILLed and the session goes on at the other."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import httpx
import pytest
from pg_server import postgres_server
from serve_server import CALIMON, KEY, ROOT, free_port, write_policy

pytestmark = [pytest.mark.ray, pytest.mark.postgres, pytest.mark.model]

N = 32
CLIENTS = 8
KILL_AFTER = 8
KILL_DELAY_S = 0.3
START_TIMEOUT_S = 300
ARGS = ("--replicas", "2", "--cpus-per-replica", "0.5", "--threads", "1",
        "--max-input-tokens", "512", "--batch-wait-ms", "20", "--max-batch", "4")
REPLICA = "calimon-replica"


def bodies() -> list[dict]:
    return [{"request_id": f"ray-{i}", "id": f"tx-{i}",
             "request": f"Write mul{i}(a, b) returning the product.",
             "response": f"def mul{i}(a, b):\n    return a * b{' * 1' * (i % 4)}\n"}
            for i in range(N)]


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def replica_pids(server_pid: int) -> list[int]:
    """The Ray Serve replica processes of our deployment below the server."""
    pids = []
    for pid in _descendants(server_pid):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if cmd.startswith("ray::ServeReplica:calimon:calimon-serve"):
            pids.append(pid)
    return sorted(pids)


class RayServer:
    """`calimon serve --replicas 2` as a subprocess in its own session (so that stopping it
    stops the Ray processes it started)."""

    def __init__(self, policy: Path, map_path: Path | None, url: str, output: Path,
                 args: tuple[str, ...] = ARGS, env: dict | None = None):
        self.port, self.output = free_port(), output
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "CALIMON_API_KEY": KEY, "RAY_DEDUP_LOGS": "0", **(env or {})}
        pinned = ("--map", str(map_path)) if map_path else ()
        with output.open("ab") as fh:
            self.proc = subprocess.Popen(
                [str(CALIMON), "serve", str(policy), *pinned, "--log", url,
                 "--port", str(self.port), *args],
                stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT, env=env,
                start_new_session=True)

    def text(self) -> str:
        return self.output.read_text(errors="replace")

    def wait_listening(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"calimon serve exited ({self.proc.returncode}):\n"
                                   f"{self.text()[-6000:]}")
            if "calimon serve: listening on" in self.text():
                return
            time.sleep(1)
        raise RuntimeError(f"not up in {START_TIMEOUT_S} s:\n{self.text()[-6000:]}")

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {KEY}"},
                            timeout=120)

    def stop(self) -> None:
        """SIGTERM (the replicas and the local cluster shut down), then SIGKILL the group."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # whatever of Ray is left
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)


def _load_with_a_replica_killed(server: RayServer) -> tuple[dict, dict, int, list[int]]:
    """Send every body from CLIENTS threads; SIGKILL one replica KILL_DELAY_S after KILL_AFTER
    are answered (when both replicas are in the middle of their next batches). Returns
    (answers by id, replica of each answer, requests that failed, killed pids)."""
    answered, replica, killed = {}, {}, []
    failed = [0]
    lock, local, due = threading.Lock(), threading.local(), threading.Event()

    def kill_one():
        if due.wait(300):
            time.sleep(KILL_DELAY_S)
            pid = replica_pids(server.proc.pid)[0]
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    def send(body):
        if not hasattr(local, "client"):
            local.client = server.client()
        try:
            r = local.client.post("/v1/score", json=body)
        except httpx.HTTPError:
            with lock:
                failed[0] += 1
            return
        with lock:
            if r.status_code != 200:
                failed[0] += 1
                return
            answered[body["request_id"]] = r.json()
            replica[body["request_id"]] = r.headers[REPLICA]
            if len(answered) == KILL_AFTER:
                due.set()

    killer = threading.Thread(target=kill_one)
    killer.start()
    try:
        with ThreadPoolExecutor(CLIENTS) as pool:
            for f in as_completed([pool.submit(send, b) for b in bodies()]):
                f.result()
    finally:
        due.set()
        killer.join()
    return answered, replica, failed[0], killed


def _until_answered(client: httpx.Client, body: dict, tries: int = 30) -> httpx.Response:
    """Post ``body`` until it is answered 200 (a client's retry of a 5xx or a dropped
    connection), at most ``tries`` times a second apart."""
    for _ in range(tries):
        try:
            r = client.post("/v1/score", json=body)
            if r.status_code == 200:
                return r
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise AssertionError(f"{body['request_id']} not answered in {tries} tries")


@pytest.fixture(scope="module")
def pg():
    """One PostgreSQL server for the module's tests (initdb and a start cost seconds on 2
    cores); each test's log is a schema of its own."""
    with postgres_server() as server:
        yield server


def test_a_replica_killed_under_load_loses_no_answered_request(tmp_path, pg):
    import psycopg

    policy, map_path = write_policy(tmp_path)
    url = pg.create_schema("ray_serve")
    t0 = time.monotonic()
    server = RayServer(policy, map_path, url, tmp_path / "server.out")
    try:
        server.wait_listening()
        t_up = time.monotonic()
        assert len(replica_pids(server.proc.pid)) == 2
        with server.client() as c:
            body = {**bodies()[0], "request_id": "together"}
            with ThreadPoolExecutor(4) as pool:
                together = list(pool.map(lambda _: c.post("/v1/score", json=body),
                                         range(4)))
        answered, replica, failed, killed = _load_with_a_replica_killed(server)
        t_load = time.monotonic()
        with server.client() as c:
            resent = {b["request_id"]: _until_answered(c, b) for b in bodies()}
        survivors = replica_pids(server.proc.pid)
        t_resent = time.monotonic()
    finally:
        server.stop()
    print(f"up {t_up - t0:.0f} s, load {t_load - t_up:.0f} s ({len(answered)} answered, "
          f"{failed} failed), resend {t_resent - t_load:.0f} s, stop "
          f"{time.monotonic() - t_resent:.0f} s")
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT request_id, decision, response FROM decisions")\
            .fetchall()
    output = server.text()

    assert all(r.status_code == 200 for r in together), [r.text for r in together]
    assert len({json.dumps(r.json(), sort_keys=True) for r in together}) == 1
    assert len(killed) == 1 and killed[0] not in survivors
    assert len(set(replica.values())) == 2  # both replicas answered, into one log
    assert failed >= 1  # the killed replica had requests in flight
    assert KILL_AFTER <= len(answered) < N
    for rid, first in answered.items():  # no decision changed: the same answer, from the log
        assert resent[rid].json() == first
        assert resent[rid].headers["idempotent-replayed"] == "true"
    counts: dict[str, int] = {}
    for rid, _, _ in rows:
        counts[rid] = counts.get(rid, 0) + 1
    assert set(counts) == {b["request_id"] for b in bodies()} | {"together"}
    assert set(counts.values()) == {1}  # every request id in the log exactly once
    logged = {rid: (decision, json.loads(response)) for rid, decision, response in rows}
    for rid, r in resent.items():
        assert logged[rid] == (r.json()["decision"], r.json())
    assert "Write mul" not in output  # no transcript in the server's output


# -- sessions across replicas -----------------------------------------------------------------

SESSION_STEPS, KILL_STEP, KILLED_STEPS = 20, 10, 14
UP = re.compile(r"pid=(\d+)\)(?:\x1b\[[0-9;]*m)?\s*calimon serve: replica (\S+) is up")


def _replica_pids_by_name(server: RayServer, n: int = 2) -> dict[str, int]:
    """Replica id -> pid, from the lines Ray relays from each replica (prefixed ``pid=N``)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = {name: int(pid) for pid, name in UP.findall(server.text())}
        if len(found) >= n:
            return found
        time.sleep(1)
    raise AssertionError(f"no 'replica ... is up' lines:\n{server.text()[-4000:]}")


def _steps(c: httpx.Client, session: str, steps: list[list[dict]], sticky: bool,
           first: int = 0) -> list[httpx.Response]:
    headers = {"x-session-id": session} if sticky else {}
    return [c.post(f"/v1/sessions/{session}/steps", headers=headers,
                   json={"request_id": f"{session}-{i}", "step": i, "messages": msgs})
            for i, msgs in enumerate(steps[first:], start=first)]


def _resume(c: httpx.Client, session: str, i: int, msgs: list[dict]) -> httpx.Response:
    for _ in range(60):  # until the proxy routes it to a live replica
        try:
            r = c.post(f"/v1/sessions/{session}/steps", headers={"x-session-id": session},
                       json={"request_id": f"{session}-{i}", "step": i, "messages": msgs})
            if r.status_code == 200:
                return r
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise AssertionError(f"step {i} of {session} not answered")


def _p(responses: list[httpx.Response]) -> list[float]:
    return [r.json()["p_raw"] for r in responses]


def test_a_session_is_answered_on_either_replica_and_past_a_killed_one(tmp_path, pg):
    """With the session header every step goes to one replica; without it they spread, and
    each replica rebuilds the session from the log: the same scores. Both replicas' steps are
    in either's /metrics. The replica holding a session is SIGKILLed after its step 9: the
    session goes on at the other, with the same scores and every earlier answer unchanged."""
    from serve_server import trajectory

    policy, map_path = write_policy(tmp_path)
    trail = trajectory(SESSION_STEPS, "r")
    t = [time.monotonic()]
    server = RayServer(policy, map_path, pg.create_schema("sessions"),
                       tmp_path / "server.out")
    try:
        server.wait_listening()
        pids = _replica_pids_by_name(server)
        t.append(time.monotonic())
        with server.client() as c:
            sticky = _steps(c, "sticky", trail, True)
            spread = _steps(c, "spread", trail, False)
            time.sleep(1.5)  # every replica has written its counts
            metrics = [c.get("/metrics").text for _ in range(4)]
            before = _steps(c, "killed", trail[:KILL_STEP], True)
            holder = before[-1].headers[REPLICA]
            t.append(time.monotonic())
            os.kill(pids[holder], signal.SIGKILL)
            after = [_resume(c, "killed", i, trail[i])
                     for i in range(KILL_STEP, KILLED_STEPS)]
            again = _steps(c, "killed", trail[:KILL_STEP], True)
            t.append(time.monotonic())
    finally:
        server.stop()
    print("up {:.0f} s, steps {:.0f} s, past the kill {:.0f} s, stop {:.0f} s".format(
        *(b - a for a, b in zip(t, [*t[1:], time.monotonic()], strict=True))))

    assert [r.status_code for r in sticky + spread + before] == [200] * (2 * SESSION_STEPS
                                                                         + KILL_STEP)
    assert len({r.headers[REPLICA] for r in sticky}) == 1  # Ray routed the session to one
    assert max(abs(a - b) for a, b in zip(_p(spread), _p(sticky), strict=True)) <= 1e-5
    assert [r.json()["step"] for r in spread] == list(range(SESSION_STEPS))
    assert len({r.headers[REPLICA] for r in spread}) == 2  # so each rebuilt it from the log
    route = 'calimon_requests_total{route="/v1/sessions/{id}/steps",code="200"} '
    for text in metrics:  # whichever replica the scrape reached
        counted = [line for line in text.splitlines() if line.startswith(route)]
        assert counted == [f"{route}{2 * SESSION_STEPS}"], counted
    assert {r.headers[REPLICA] for r in after}.isdisjoint({holder})
    assert max(abs(a - b) for a, b in zip(_p(after), _p(sticky)[KILL_STEP:KILLED_STEPS],
                                          strict=True)) <= 1e-5
    assert [r.json() for r in again] == [r.json() for r in before]  # nothing answered lost
    assert all(r.headers["idempotent-replayed"] == "true" for r in again)


# -- an externally scored policy ----------------------------------------------------------------

def test_an_external_policy_on_two_replicas_with_no_access_log(tmp_path, pg):
    """Scores sent with the requests are decided by either replica as the policy file says,
    one without its score is 422 naming the field, and with --no-access-log neither Ray Serve's
    proxy nor a replica writes a line per request to Ray's logs."""
    import shutil
    import tempfile

    from external_policy import deciding, write_external_policy

    policy = write_external_policy(tmp_path / "policy", score="p_cal", t_low=0.3, t_high=0.7)
    ray_tmp = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))  # short: Ray's socket paths
    server = RayServer(policy, None, pg.create_schema("external"), tmp_path / "server.out",
                       args=("--replicas", "2", "--cpus-per-replica", "0.5",
                             "--no-access-log"), env={"RAY_TMPDIR": str(ray_tmp)})
    scores = [i * 2.5 for i in range(41)]
    try:
        server.wait_listening()
        with server.client() as c:
            answers = [c.post("/v1/score", json={"request_id": f"x{i}", "score": s,
                                                 "request": f"task {i}", "response": "done"})
                       for i, s in enumerate(scores)]
            missing = c.post("/v1/score", json={"request": "task", "response": "done"})
    finally:
        server.stop()  # Ray's logs are read once it has stopped writing them
        serve_logs = {p.name: p.read_text(errors="replace")
                      for p in ray_tmp.glob("ray/session_2*/logs/serve/*.log")}
        shutil.rmtree(ray_tmp, ignore_errors=True)
    action = deciding(policy)
    assert [a.status_code for a in answers] == [200] * len(scores)
    assert [a.json()["action"] for a in answers] == [action(s) for s in scores]
    assert len({a.json()["action"] for a in answers}) == 3  # all three actions were taken
    assert len({a.headers[REPLICA] for a in answers}) == 2  # both replicas decided
    assert missing.status_code == 422 and missing.json()["error"]["field"] == "score"
    assert any(name.startswith("proxy_") for name in serve_logs), list(serve_logs)
    assert not [name for name, text in serve_logs.items() if "POST /" in text]
