"""``run_serve.py --parts external``: externally scored decisions per second on one `calimon
serve`, bound by its decision log, on SQLite and on PostgreSQL.

The policy is made as a user makes one: a CSV of an external guard's scores (0 to 100) with
transcripts (tests/external_policy.py), `calimon curve --readout 'score:guard?range=0,100'` and
`calimon escalate` on the run. The server has no model to run: each request carries the guard's
score and is answered once its decision is committed (group commits, docs/serve.md). 16
clients (asyncio, one keep-alive HTTP/1.1 connection each, a request sent as soon as the last
one is answered) send requests with distinct request ids over loopback: a warm-up, then up to
``--external-n`` requests or ``--external-s`` seconds, whichever ends first. Latency is what a
client saw from sending a request to reading its whole answer. The servers write no access log
(`calimon serve --no-access-log`; ``--external-access-log``: they do, as by default; its cost
on its own: benchmarks/serve/access_log.py). After each run every answered
request id is looked up in the log and its logged answer compared with the one the client got.

PostgreSQL is Debian's server, started here for the run (tests/pg_server.py: a fresh data
folder, loopback, ``fsync`` and ``synchronous_commit`` left on). Beside both, the same load on
the framework alone (benchmarks/serve/bare_app.py: a FastAPI route on uvicorn that validates
the body and answers, no decision and no log) says what one process of it answers on this
machine now, and the SQLite server with ``--review`` (each decision's row stored in the review
store before it is logged, grouped the same way) what the review side adds. The three take turns over ``--external-rounds`` rounds (the order rotating); the
report gives each round and the medians, with the load average before and after each run and
the server's CPU seconds per answer (from /proc), which a loaded machine inflates less than it
does the rate.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import time
from pathlib import Path

from serve_server import CALIMON, KEY, start_server

CLIENTS = 16
KINDS = ("sqlite", "postgres", "review", "floor")  # review: SQLite log and --review
READOUT = "score:guard?range=0,100"
WARMUP = 300


def make_policy(folder: Path) -> tuple[Path, str]:
    """A policy on the external guard's scores, by `calimon curve` and `calimon escalate`;
    ``(policy, the commands)``."""
    from external_policy import write_scores_csv

    csv_path = write_scores_csv(folder / "scores.csv")
    run, policy = folder / "run", folder / "policy.yaml"
    curve = [str(CALIMON), "curve", "--benchmark", str(csv_path), "--readout", READOUT,
             "--split", "test", "--no-binary", "--quiet", "--out", str(run)]
    escalate = [str(CALIMON), "escalate", str(run), "--budget", "0.3", "--far-alpha", "0.2",
                "--audit-fraction", "0.1", "--out", str(policy)]
    for cmd in (curve, escalate):
        subprocess.run(cmd, check=True, capture_output=True, cwd=folder, timeout=900)
    return policy, (f"calimon curve --readout '{READOUT}' on a 300-row CSV of scores "
                    "(tests/external_policy.py), then calimon escalate --budget 0.3 "
                    "--far-alpha 0.2 --audit-fraction 0.1")


def bodies(n: int, tag: str, seed: int) -> list[dict]:
    """``n`` request bodies with distinct request ids and guard scores."""
    rng = random.Random(seed)
    return [{"request_id": f"{tag}-{i}", "id": f"{tag}-t{i}",
             "request": f"Task {i}: make the test suite pass.",
             "response": f"Step {i}: the agent edits the config and runs the tests.",
             "score": round(rng.uniform(0, 100), 2)} for i in range(n)]


async def _client(host: str, port: int, queue: list, out: list, deadline: float) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        while queue and time.perf_counter() < deadline:
            body = queue.pop()
            data = json.dumps(body).encode()
            head = (f"POST /v1/score HTTP/1.1\r\nHost: {host}:{port}\r\n"
                    f"Authorization: Bearer {KEY}\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(data)}\r\n\r\n").encode()
            t0 = time.perf_counter()
            writer.write(head + data)
            await writer.drain()
            status_line = await reader.readuntil(b"\r\n")
            headers = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").lower()
            length = int(headers.split("content-length:", 1)[1].split("\r\n", 1)[0])
            answer = await reader.readexactly(length)
            out.append((time.perf_counter() - t0, int(status_line.split()[1]),
                        body["request_id"], answer))
    finally:
        writer.close()


async def _load(url: str, todo: list[dict], seconds: float) -> tuple[list, float]:
    host, port = url.removeprefix("http://").split(":")
    queue, out = list(reversed(todo)), []
    t0 = time.perf_counter()
    await asyncio.gather(*(_client(host, int(port), queue, out, t0 + seconds)
                           for _ in range(CLIENTS)))
    return out, time.perf_counter() - t0


def load(url: str, todo: list[dict], seconds: float) -> tuple[list, float]:
    """Send ``todo`` from `CLIENTS` connections until done or ``seconds`` passed: the answers
    ``(latency s, status, request id, body bytes)`` and the wall seconds."""
    return asyncio.run(_load(url, todo, seconds))


def _quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds a process has used (Linux: /proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pg_cpu_seconds(data: Path) -> float:
    """CPU seconds of a PostgreSQL server: its postmaster (with the children it has reaped)
    and every process it runs now (the backends, the WAL writer, the checkpointer)."""
    pid = int((data / "postmaster.pid").read_text().split()[0])
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # a process that ended meanwhile
            continue
        own = int(stat.parent.name) == pid
        if own or int(fields[1]) == pid:
            ticks = int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14])
                                                           if own else 0)
            total += ticks / os.sysconf("SC_CLK_TCK")
    return total


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def check_logged(target: str, answers: list) -> dict:
    """Every answered request id looked up in the log: how many are there with the answer the
    client got."""
    from calimon.serve.decision_log import open_log

    log = open_log(target)
    try:
        same = sum(1 for _, status, rid, raw in answers if status == 200
                   and (got := log.lookup(rid)) is not None and got.response == json.loads(raw))
    finally:
        log.close()
    return {"answered": sum(1 for a in answers if a[1] == 200), "logged_same": same}


def review_flags(folder: Path, tag: str) -> tuple[str, ...]:
    """`calimon serve --review` with a reviewer's key file and a store of its own (the drift
    watch left to its own schedule, which this load does not reach)."""
    keys = folder / "keys.txt"
    keys.write_text("ada ada-key-0123456789abcdef\n")
    return ("--review", "--keys", str(keys), "--review-store", str(folder / f"{tag}.review"),
            "--drift-every", "1000000")


def measure(policy: Path, target: str, folder: Path, tag: str, args, seed: int,
            flags: tuple[str, ...] = (), db_cpu=None) -> dict:
    """One run on the decision log ``target`` (module docstring), the server started with
    ``flags``; ``db_cpu``: the database server's CPU seconds so far (PostgreSQL's)."""
    import httpx

    out = folder / f"{tag}.out"
    load_start = os.getloadavg()[0]
    server = start_server(policy, target, out, *flags, key=KEY, cwd=folder)
    try:
        load(server.url, bodies(WARMUP, f"{tag}-warm", seed), 120)
        metrics0 = httpx.get(f"{server.url}/metrics", headers=server.headers()).text
        cpu0, client0 = cpu_seconds(server.proc.pid), time.process_time()
        db0 = db_cpu() if db_cpu else None
        answers, wall = load(server.url, bodies(args.external_n, tag, seed + 1),
                             args.external_s)
        cpu1, client1 = cpu_seconds(server.proc.pid), time.process_time()
        db1 = db_cpu() if db_cpu else None
        metrics1 = httpx.get(f"{server.url}/metrics", headers=server.headers()).text
    finally:
        server.stop()
    ok = [a for a in answers if a[1] == 200]
    commits = (_metric(metrics1, "calimon_log_commit_decisions_count")
               - _metric(metrics0, "calimon_log_commit_decisions_count"))
    decided = (_metric(metrics1, "calimon_log_commit_decisions_sum")
               - _metric(metrics0, "calimon_log_commit_decisions_sum"))
    said = [line for line in server.log_text().splitlines() if "decision log" in line][-1]
    return {"n": len(answers), "ok": len(ok), "errors": len(answers) - len(ok),
            "wall_s": wall, "throughput": len(ok) / wall,
            "p50_ms": 1000 * _quantile([a[0] for a in ok], 0.5),
            "p99_ms": 1000 * _quantile([a[0] for a in ok], 0.99),
            "commits": commits, "per_commit": decided / commits if commits else None,
            "server_cpu_ms": 1000 * (cpu1 - cpu0) / max(len(answers), 1),
            "client_cpu_ms": 1000 * (client1 - client0) / max(len(answers), 1),
            "db_cpu_ms": (None if db0 is None else
                          1000 * (db1 - db0) / max(len(answers), 1)),
            "load": [load_start, os.getloadavg()[0]],
            "durability": said.split("(", 1)[1].split(";")[0] if "(" in said else said,
            **check_logged(target, answers)}


def floor(folder: Path, args, seed: int) -> dict:
    """The same load on the framework alone (benchmarks/serve/bare_app.py)."""
    import sys

    import httpx
    from ports import free_port

    port, out = free_port(), (folder / "bare.out").open("ab")
    proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("bare_app.py")),
                             str(port), "on" if args.external_access_log else "off"],
                            stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        load_start = os.getloadavg()[0]
        load(url, bodies(WARMUP, "bare-warm", seed), 120)
        cpu0, client0 = cpu_seconds(proc.pid), time.process_time()
        answers, wall = load(url, bodies(args.external_n, "bare", seed + 1), args.external_s)
        cpu1, client1 = cpu_seconds(proc.pid), time.process_time()
    finally:
        proc.terminate()
        proc.wait(30)
        out.close()
    ok = [a for a in answers if a[1] == 200]
    return {"n": len(answers), "ok": len(ok), "throughput": len(ok) / wall,
            "p50_ms": 1000 * _quantile([a[0] for a in ok], 0.5),
            "p99_ms": 1000 * _quantile([a[0] for a in ok], 0.99), "per_commit": None,
            "server_cpu_ms": 1000 * (cpu1 - cpu0) / max(len(answers), 1),
            "client_cpu_ms": 1000 * (client1 - client0) / max(len(answers), 1),
            "load": [load_start, os.getloadavg()[0]]}


def external_part(folder: Path, args, log) -> dict:
    """Both backends over ``args.external_rounds`` rounds: ``{"sqlite": [...], "postgres":
    [...], "policy": ...}``."""
    from pg_server import postgres_server

    policy, made = make_policy(folder)
    log(f"external: policy made ({made})")
    runs: dict = {kind: [] for kind in KINDS}
    quiet = () if args.external_access_log else ("--no-access-log",)
    from calimon.serve.runner import http_stack

    runs.update(policy=made, clients=CLIENTS, warmup=WARMUP, http_stack=http_stack())
    with postgres_server() as pg:
        for r in range(args.external_rounds):
            for kind in KINDS[r % 4:] + KINDS[:r % 4]:
                tag = f"{kind}-{r}"
                if kind == "floor":
                    runs[kind].append(floor(folder, args, seed=10 * r))
                else:
                    target = (pg.create_schema(f"bench{r}") if kind == "postgres" else
                              str(folder / f"{tag}.sqlite"))
                    flags = (review_flags(folder, tag) if kind == "review" else ()) + quiet
                    db_cpu = ((lambda: pg_cpu_seconds(pg.data)) if kind == "postgres"
                              else None)
                    runs[kind].append(measure(policy, target, folder, tag, args,
                                              seed=10 * r, flags=flags, db_cpu=db_cpu))
                got = runs[kind][-1]
                log(f"external round {r + 1}, {kind}: {got['throughput']:.0f}/s, p50 "
                    f"{got['p50_ms']:.1f} ms, p99 {got['p99_ms']:.1f} ms, "
                    f"{got['per_commit'] or 0:.1f} per commit, load {got['load']}")
    return runs
