"""The measured runs of benchmarks/serve/run_serve.py, each one function: a load of `calimon serve`
at C clients, one `calimon score` process per transcript, one batch `calimon score`, a trajectory
step by step against rescoring it whole, and the SIGKILL run. Every function returns plain
numbers; run_serve.py interleaves them and writes the table."""

from __future__ import annotations

import json
import queue
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import httpx

CALIMON = str(Path(sys.executable).with_name("calimon"))


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100), linear between order statistics."""
    s = sorted(values)
    if len(s) == 1:
        return s[0]
    k = (len(s) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def serve_load(server, bodies: list[dict], clients: int) -> dict:
    """Send every body once from ``clients`` threads (each takes the next body when free);
    throughput over the wall time, latency per request as the client saw it."""
    todo: queue.Queue = queue.Queue()
    for b in bodies:
        todo.put(b)
    latencies: list[float] = []
    lock = threading.Lock()

    def client() -> None:
        with server.client(timeout=600) as c:
            while True:
                try:
                    body = todo.get_nowait()
                except queue.Empty:
                    return
                start = time.perf_counter()
                r = c.post("/v1/score", json=body)
                r.raise_for_status()
                with lock:
                    latencies.append(time.perf_counter() - start)

    calls0 = server.metric("calimon_forward_calls_total")
    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        for f in [pool.submit(client) for _ in range(clients)]:
            f.result()
    wall = time.perf_counter() - start
    return {"n": len(bodies), "wall_s": wall, "throughput": len(bodies) / wall,
            "p50_s": percentile(latencies, 50), "p99_s": percentile(latencies, 99),
            "forward_calls": server.metric("calimon_forward_calls_total") - calls0}


def _score_cmd(benchmark: Path, store: Path) -> list[str]:
    return [CALIMON, "score", "--model", "smollm2-135m", "--prompt", "direct", "--readout",
            "verdict", "--benchmark", str(benchmark), "--store", str(store), "--quiet"]


def _write_jsonl(path: Path, samples: list[dict]) -> Path:
    path.write_text("".join(json.dumps(s) + "\n" for s in samples), encoding="utf-8")
    return path


def process_per_transcript(samples: list[dict], env: dict) -> dict:
    """One `calimon score` process per transcript, one after another, each with a fresh store:
    seconds per transcript, start-up and model load included."""
    seconds = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, s in enumerate(samples):
            bench = _write_jsonl(Path(tmp) / f"one-{i}.jsonl", [s])
            start = time.perf_counter()
            subprocess.run(_score_cmd(bench, Path(tmp) / f"store-{i}.sqlite"), check=True,
                           env=env, capture_output=True)
            seconds.append(time.perf_counter() - start)
    return {"n": len(samples), "seconds": seconds,
            "throughput": len(samples) / sum(seconds), "p50_s": statistics.median(seconds)}


def batch_score(samples: list[dict], env: dict) -> dict:
    """One `calimon score` process over all the transcripts (fresh store)."""
    with tempfile.TemporaryDirectory() as tmp:
        bench = _write_jsonl(Path(tmp) / "all.jsonl", samples)
        start = time.perf_counter()
        subprocess.run(_score_cmd(bench, Path(tmp) / "store.sqlite"), check=True, env=env,
                       capture_output=True)
        wall = time.perf_counter() - start
    return {"n": len(samples), "wall_s": wall, "throughput": len(samples) / wall}


def trajectory_steps(n: int, tag: str) -> list[list[dict]]:
    """``n`` steps of an agent working through a failing test suite (OpenAI message shape)."""
    steps = []
    for i in range(n):
        call = {"id": f"{tag}-{i}", "type": "function", "function": {
            "name": "bash", "arguments": json.dumps({"cmd": f"pytest tests/test_mod{i}.py -x"})}}
        msgs = [{"role": "assistant", "content": f"Step {i}: the failure in module {i} "
                 "looks like an off-by-one in the loop bound; running its tests.",
                 "tool_calls": [call]},
                {"role": "tool", "tool_call_id": f"{tag}-{i}",
                 "content": f"{i + 3} passed, {i % 2} failed in 0.{i + 1}s"}]
        if i == 0:
            msgs.insert(0, {"role": "user", "content": "Make the test suite pass without "
                            "changing the tests."})
        steps.append(msgs)
    return steps


def trajectory_run(server, n: int, tag: str, head_tokens: int, whole_first: bool = False
                   ) -> list[dict]:
    """Each step sent to a session and the whole trajectory so far to /v1/score (in that order,
    or the other with ``whole_first``): per step, the tokens each computed, its seconds
    (client side) and both scores."""
    rows, so_far = [], []
    with server.client(timeout=600) as c:
        for i, msgs in enumerate(trajectory_steps(n, tag)):
            so_far += msgs
            timed = {}
            calls = {"step": (f"/v1/sessions/{tag}/steps", {"step": i, "messages": msgs}),
                     "whole": ("/v1/score", {"messages": so_far})}
            for name in (("whole", "step") if whole_first else ("step", "whole")):
                start = time.perf_counter()
                timed[name] = (c.post(calls[name][0], json=calls[name][1]),
                               time.perf_counter() - start)
            (step, t_step), (whole, t_whole) = timed["step"], timed["whole"]
            step.raise_for_status()
            whole.raise_for_status()
            s, w = step.json(), whole.json()
            rows.append({"step": i + 1, "tokens": w["tokens"],
                         "step_computed": s["kv"]["computed_tokens"],
                         "whole_computed": w["tokens"] - head_tokens, "step_s": t_step,
                         "whole_s": t_whole, "dp": abs(s["p_raw"] - w["p_raw"]),
                         "mode": s["kv"]["mode"], "layers": s["kv"].get("layers")})
    return rows


def kill_run(start, bodies: list[dict], kill_after: int, clients: int) -> dict:
    """Start a server (``start()``), send ``bodies`` (with request ids) from ``clients``
    threads, SIGKILL it once ``kill_after`` are answered; start it again on the same log and
    resend everything. Counts what the log and the answers say."""
    server, answered = start(), {}
    lock = threading.Lock()

    def send(body):
        try:
            with server.client(timeout=600) as c:
                r = c.post("/v1/score", json=body)
        except httpx.HTTPError:
            return
        if r.status_code == 200:
            with lock:
                answered[body["request_id"]] = r.json()
                if len(answered) == kill_after:
                    server.kill()

    with ThreadPoolExecutor(clients) as pool:
        for f in as_completed([pool.submit(send, b) for b in bodies]):
            f.result()
    server.stop()
    logged_at_kill = _count(server.log_path)
    again = start()
    try:
        with again.client(timeout=600) as c:
            resent = {b["request_id"]: c.post("/v1/score", json=b) for b in bodies}
    finally:
        again.stop()
    ids = [r for (r,) in sqlite3.connect(again.log_path).execute(
        "SELECT request_id FROM decisions")]
    return {"n": len(bodies), "answered_before_kill": len(answered),
            "logged_at_kill": logged_at_kill, "resent_ok": sum(
                r.status_code == 200 for r in resent.values()),
            "replayed": sum(r.headers.get("idempotent-replayed") == "true"
                            for r in resent.values()),
            "changed": sum(resent[k].json() != v for k, v in answered.items()),
            "logged": len(ids), "duplicates": len(ids) - len(set(ids)),
            "missing": len({b["request_id"] for b in bodies} - set(ids))}


def _count(path: Path) -> int:
    with sqlite3.connect(path) as db:
        return int(db.execute("SELECT COUNT(*) FROM decisions").fetchone()[0])
