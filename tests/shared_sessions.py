"""Two `calimon serve` processes on one PostgreSQL decision log, as two replicas behind a load
balancer would be, measured on one agent trajectory (the test tests/test_serve_shared_http.py
and the benchmark ``benchmarks/serve/run_serve.py --parts replicas`` both run `pair_run`):

1. ``one``: the trajectory's steps all sent to the first server (a single replica).
2. ``alternated``: the same steps under another session id, sent to the servers in turn.
3. ``/metrics`` of both servers (one ``--deployment``): what each counts of the steps sent.
4. ``killed``: the same steps again, alternated; the first server is SIGKILLed while it scores
   step ``kill_at``, which the client then resends, with its request id, to the other server
   until answered, and the rest go there too. Every step answered before the kill is resent
   there as well, and must come back from the log unchanged.
5. ``/metrics`` of the survivor: the step answers it counts (``steps_counted_at_end``), to
   compare with those the client received (``steps_received``), the killed server's included.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from serve_server import KEY, Server, start_server, trajectory

DEPLOYMENT = "pair"
STEPS_ROUTE = 'calimon_requests_total{route="/v1/sessions/{id}/steps",code="200"}'
ARGS = ("--threads", "1", "--deployment", DEPLOYMENT)


def start_pair(policy: Path, map_path: Path | None, url: str, folder: Path) -> list[Server]:
    """Two servers on the log ``url``, started at once (model loading overlaps)."""
    out: list = [None, None]
    errors: list[BaseException] = []

    def start(k: int) -> None:
        try:
            out[k] = start_server(policy, url, folder / f"server{k}.out", *ARGS, key=KEY,
                                  map_path=map_path)
        except BaseException as exc:  # noqa: BLE001 - raised below, after both tried
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        for s in out:
            if s is not None:
                s.stop()
        raise errors[0]
    return out


def _post(client: httpx.Client, session: str, i: int, msgs: list[dict]) -> httpx.Response:
    return client.post(f"/v1/sessions/{session}/steps",
                       json={"request_id": f"{session}-{i}", "step": i, "messages": msgs})


def _session(clients: list[httpx.Client], session: str, steps: list[list[dict]],
             pick: Callable[[int], int]) -> list[dict]:
    rows = []
    for i, msgs in enumerate(steps):
        start = time.perf_counter()
        r = _post(clients[pick(i)], session, i, msgs)
        rows.append({"step": i, "server": pick(i), "code": r.status_code,
                     "answer": r.json() if r.status_code == 200 else None,
                     "seconds": time.perf_counter() - start})
    return rows


def _metric(text: str, prefix: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(prefix))


def _scrapes(clients: list[httpx.Client]) -> list[dict]:
    time.sleep(1.5)  # each server writes its counts every second
    out = []
    for c in clients:
        text = c.get("/metrics").text
        out.append({"steps_counted": _metric(text, STEPS_ROUTE),
                    "per_replica": [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                                    if line.startswith("calimon_replica_requests_total{")
                                    and 'route="/v1/sessions/{id}/steps",code="200"' in line]})
    return out


def _until_answered(client: httpx.Client, session: str, i: int, msgs: list[dict],
                    tries: int = 60) -> tuple[httpx.Response, int]:
    for attempt in range(1, tries + 1):
        try:
            r = _post(client, session, i, msgs)
            if r.status_code == 200:
                return r, attempt
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise AssertionError(f"step {i} of {session} not answered in {tries} tries")


def _killed(servers: list[Server], clients: list[httpx.Client], steps: list[list[dict]],
            kill_at: int, kill_delay_s: float) -> dict:
    """Part 4 (module docstring)."""
    before = _session(clients, "killed", steps[:kill_at], lambda i: i % 2)
    in_flight: dict = {}

    def send() -> None:
        try:
            in_flight["response"] = _post(clients[0], "killed", kill_at, steps[kill_at])
        except httpx.HTTPError as exc:
            in_flight["error"] = type(exc).__name__

    sender = threading.Thread(target=send)
    sender.start()
    time.sleep(kill_delay_s)
    servers[0].kill()
    sender.join()
    start = time.perf_counter()
    resumed, attempts = _until_answered(clients[1], "killed", kill_at, steps[kill_at])
    rows = [{"step": kill_at, "server": 1, "code": 200, "answer": resumed.json(),
             "seconds": time.perf_counter() - start}]
    for i in range(kill_at + 1, len(steps)):
        t = time.perf_counter()
        r = _post(clients[1], "killed", i, steps[i])
        rows.append({"step": i, "server": 1, "code": r.status_code,
                     "answer": r.json() if r.status_code == 200 else None,
                     "seconds": time.perf_counter() - t})
    answered = [r for r in before if r["code"] == 200]
    resent = [_post(clients[1], "killed", r["step"], steps[r["step"]]) for r in answered]
    cut = in_flight.get("response")
    return {"rows": before + rows, "in_flight": in_flight.get("error") or cut.status_code,
            "in_flight_answer": cut.json() if cut is not None and cut.status_code == 200
            else None, "retry_attempts": attempts,
            "retry_replayed": resumed.headers.get("idempotent-replayed") == "true",
            "resent_unchanged": sum(r.status_code == 200 and r.json() == b["answer"]
                                    for r, b in zip(resent, answered, strict=True)),
            "resent_answered": sum(r.status_code == 200 for r in resent),
            "answered_before_kill": len(answered)}


def pair_run(policy: Path, map_path: Path | None, url: str, folder: Path, *, steps: int = 20,
             kill_at: int = 10, kill_delay_s: float = 0.3) -> dict:
    """The four parts of the module docstring on two fresh servers of the log ``url``."""
    trail = trajectory(steps, "t")
    servers = start_pair(policy, map_path, url, folder)
    try:
        clients = [s.client(timeout=600) for s in servers]
        one = _session(clients, "one", trail, lambda i: 0)
        alternated = _session(clients, "alternated", trail, lambda i: i % 2)
        scrapes = _scrapes(clients)
        killed = _killed(servers, clients, trail, kill_at, kill_delay_s)
        at_end = _metric(clients[1].get("/metrics").text, STEPS_ROUTE)
        for c in clients:
            c.close()
    finally:
        for s in servers:
            s.stop()
    received = (sum(r["code"] == 200 for r in one + alternated + killed["rows"])
                + (killed["in_flight"] == 200) + killed["resent_answered"])
    return {"one": one, "alternated": alternated, "scrapes": scrapes, "killed": killed,
            "steps_sent_before_scrape": 2 * steps, "kill_at": kill_at,
            "steps_counted_at_end": at_end, "steps_received": received}


def largest_dp(rows: list[dict], reference: list[dict]) -> float:
    """The largest |p_raw difference| between answered steps and the reference's."""
    return max(abs(r["answer"]["p_raw"] - ref["answer"]["p_raw"])
               for r, ref in zip(rows, reference, strict=True))


def summary(run: dict) -> dict:
    """The figures of a `pair_run` (what the benchmark reports)."""
    one, alt, killed = run["one"], run["alternated"], run["killed"]
    rows = killed["rows"]
    ok = [r for r in rows if r["code"] == 200]
    return {
        "steps": len(one), "kill_at": run["kill_at"],
        "errors_alternated": sum(r["code"] != 200 for r in alt),
        "errors_killed": sum(r["code"] != 200 for r in rows),
        "dp_alternated": largest_dp(alt, one),
        "dp_killed": largest_dp(ok, one) if len(ok) == len(one) else None,
        "seconds_one": sum(r["seconds"] for r in one),
        "seconds_alternated": sum(r["seconds"] for r in alt),
        "modes_alternated": sorted({r["answer"]["kv"]["mode"] for r in alt if r["answer"]}),
        "scrapes": [s["steps_counted"] for s in run["scrapes"]],
        "steps_sent_before_scrape": run["steps_sent_before_scrape"],
        "in_flight_at_kill": killed["in_flight"],
        "retry_attempts": killed["retry_attempts"],
        "retry_replayed": killed["retry_replayed"],
        "resumed_step_s": rows[run["kill_at"]]["seconds"],
        "answered_before_kill": killed["answered_before_kill"],
        "resent_unchanged": killed["resent_unchanged"],
        "steps_counted_at_end": run["steps_counted_at_end"],
        "steps_received": run["steps_received"],
    }
