"""Write benchmarks/results/serve.md: `calimon serve` measured on the embedded model.

    .venv/bin/python benchmarks/serve/run_serve.py [--rounds 3] [--n 16] [--steps 20]
    .venv/bin/python benchmarks/serve/run_serve.py --parts probe [--rounds 3]
    .venv/bin/python benchmarks/serve/run_serve.py --parts replicas [--steps 20]
    .venv/bin/python benchmarks/serve/run_serve.py --parts external [--external-rounds 3]

1. Throughput and p50/p99 latency at 1, 8 and 32 concurrent clients (loopback), against one
   `calimon score` process per transcript and one batch `calimon score` of the same transcripts;
   the server with its defaults (a gathered batch shares one forward pass), and at 8 clients a
   second one that runs one forward pass per transcript (--pass-rows 1).
2. A trajectory of --steps steps scored step by step (a session) against rescoring the whole
   trajectory at each step: tokens computed, seconds, and the scores' largest difference.
3. SIGKILL during a load of requests with ids, restart, resend everything.
4. Part 2 with the shipped probe monitor (`probe:amb-open-monitor`, its calibration map), whose
   steps run their new tokens up to the probe's layer.
5. Two servers on one PostgreSQL decision log (a server this script starts, tests/pg_server.py)
   as two replicas: a session's steps alternated between them against all on one, /metrics of
   each, and one SIGKILLed at step 10 (tests/shared_sessions.py).
6. Externally scored decisions per second on one server with no model, its SQLite and its
   PostgreSQL decision log, 16 clients (benchmarks/serve/external_load.py).

Parts 1, 2 and 4 run in --rounds interleaved rounds (the order of the client counts rotates each
round; in a trajectory, the step goes before the whole trajectory in odd rounds and after it in
even ones); the tables give medians over rounds, and each ratio is taken within a round before
its median. The policy is `calimon escalate` on runs/demo (`make demo`) when that run is here.
``--parts probe`` runs part 4 alone, ``--parts replicas`` part 5 alone and ``--parts external``
part 6 alone, keeping the other parts' measurements from the last run
(benchmarks/serve/out/serve.json); a run of all parts keeps parts 5 and 6 from it.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))  # serve_server: start, stop and kill a server
sys.path.insert(0, str(Path(__file__).resolve().parent))

from load import (  # noqa: E402
    CALIMON,
    batch_score,
    kill_run,
    process_per_transcript,
    serve_load,
    trajectory_run,
)
from report import render  # noqa: E402
from serve_server import KEY, start_server, write_policy  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "serve.md"
RAW = ROOT / "benchmarks" / "serve" / "out" / "serve.json"
CLIENTS = (1, 8, 32)
SHARED = 8  # clients of the second server, which runs one forward pass per transcript
PROBE = "amb-open-monitor"  # the shipped monitor (heads/smollm2-135m/)


def make_policy(folder: Path) -> tuple[Path, Path | None, str]:
    """(policy, map or None, how it was made): escalate on runs/demo, else a test policy."""
    demo = ROOT / "runs" / "demo"
    if (demo / "curve.csv").is_file() and (demo / "calibration").is_dir():
        out = folder / "policy.yaml"
        cmd = [CALIMON, "escalate", str(demo), "--budget", "0.2", "--audit-fraction", "0.1",
               "--out", str(out)]
        subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)
        return out, None, "calimon escalate runs/demo --budget 0.2 --audit-fraction 0.1"
    policy, map_path = write_policy(folder)
    return policy, map_path, "tests/serve_server.py write_policy (runs/demo absent)"


def probe_policy(folder: Path) -> tuple[Path, Path]:
    """(policy, map) of the shipped probe monitor: its Platt map from heads/, thresholds that
    give all three decisions."""
    from calimon.deploy.policy_file import Audit, Policy, save_policy

    policy = Policy(version=1, name="probe-monitor", readout=f"probe:{PROBE}",
                    model="smollm2-135m", calibration="platt", score="p_cal", t_low=0.4,
                    t_high=0.6, audit=Audit(fraction=0.1, seed=7))
    return (save_policy(policy, folder / "probe-policy.yaml"),
            ROOT / "heads" / "smollm2-135m" / f"{PROBE}.calibration.json")


def probe_rounds(folder: Path, args, log) -> tuple[list[list[dict]], dict]:
    """Part 4 alone (its own server): one trajectory per round; ``(rounds, /v1/info)``."""
    policy, map_path = probe_policy(folder)
    server = start_server(policy, folder / "probe.sqlite", folder / "probe.out", key=KEY,
                          map_path=map_path)
    try:
        with server.client() as c:
            info = c.get("/v1/info").json()
        out = []
        for r in range(args.rounds):
            out.append(trajectory_run(server, args.steps, f"probe-{r}", info["head_tokens"],
                                      whole_first=r % 2 == 1))
            log(f"round {r + 1}: probe trajectory done")
    finally:
        server.stop()
    return out, info


def transcripts(n: int) -> list[dict]:
    """The first ``n`` humaneval-pairs test transcripts (by id), as sample records."""
    from calimon.data.registry import load_benchmark

    samples = sorted((s for s in load_benchmark("humaneval-pairs") if s.split == "test"),
                     key=lambda s: s.id)[:n]
    return [s.to_dict() for s in samples]


def rounds(server, shared, samples, bodies, args, env, head: int, log) -> dict:
    """Parts 1 and 2, interleaved (module docstring); ``shared``: the --pass-rows 1 server."""
    out: dict = {"serve": {c: [] for c in CLIENTS}, "shared": [], "proc": [], "batch": [],
                 "traj": []}
    per_round = max(1, args.processes)
    for r in range(args.rounds):
        order = CLIENTS[r % 3:] + CLIENTS[:r % 3]
        for c in order:
            out["serve"][c].append(serve_load(server, bodies, c))
            log(f"round {r + 1}: serve, {c} clients: {out['serve'][c][-1]['throughput']:.2f}/s")
        out["shared"].append(serve_load(shared, bodies, SHARED))
        log(f"round {r + 1}: one pass per transcript: {out['shared'][-1]['throughput']:.2f}/s")
        chosen = samples[r * per_round:(r + 1) * per_round]
        out["proc"].append(process_per_transcript(chosen, env))
        log(f"round {r + 1}: process per transcript: {out['proc'][-1]['seconds']}")
        out["batch"].append(batch_score(samples, env))
        log(f"round {r + 1}: batch score: {out['batch'][-1]['wall_s']:.1f} s")
        out["traj"].append(trajectory_run(server, args.steps, f"traj-{r}", head,
                                          whole_first=r % 2 == 1))
        log(f"round {r + 1}: trajectory done")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", type=int, default=16, help="transcripts per load")
    ap.add_argument("--processes", type=int, default=2,
                    help="`calimon score` processes (one transcript each) per round")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--kill-n", type=int, default=32)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--parts", choices=("all", "probe", "replicas", "external"),
                    default="all", help="probe: part 4 alone, replicas: part 5 alone, "
                                        "external: part 6 alone, the others kept from the "
                                        "last run")
    ap.add_argument("--external-rounds", type=int, default=3)
    ap.add_argument("--external-access-log", action="store_true",
                    help="part 6: the servers write their access log (default: "
                         "--no-access-log on calimon's, none on the framework's; its cost: "
                         "benchmarks/serve/access_log.py)")
    ap.add_argument("--external-n", type=int, default=6000,
                    help="requests per run of part 6 (at most)")
    ap.add_argument("--external-s", type=float, default=30.0,
                    help="seconds per run of part 6 (at most)")
    args = ap.parse_args()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    t0 = time.time()

    def log(msg: str) -> None:
        print(f"[{time.time() - t0:7.1f}s] {msg}", file=sys.stderr, flush=True)

    load_start = os.getloadavg()[0]
    if args.parts != "all":
        return part_only(args, load_start, t0, log)
    samples = transcripts(args.n)
    bodies = [{"request": s["request"], "response": s["response"]} for s in samples]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        policy, map_path, made = make_policy(folder)
        server = start_server(policy, folder / "decisions.sqlite", folder / "server.out",
                              key=KEY, map_path=map_path)
        shared = None
        try:
            shared = start_server(policy, folder / "shared.sqlite", folder / "shared.out",
                                  "--pass-rows", "1",
                                  key=KEY, map_path=map_path)
            with server.client() as c:
                info = c.get("/v1/info").json()
            with shared.client() as c:
                info["shared_batching"] = c.get("/v1/info").json()["batching"]
            measured = rounds(server, shared, samples, bodies, args, env, info["head_tokens"],
                              log)
        finally:
            server.stop()
            if shared is not None:
                shared.stop()
        kill_bodies = [{**b, "request_id": f"kill-{i}"} for i, b in
                       enumerate((bodies * 4)[:args.kill_n])]
        for i, b in enumerate(kill_bodies):  # distinct transcripts: nothing reused
            b["response"] += f"\n# variant {i}"
        kill = kill_run(lambda: start_server(policy, folder / "kill.sqlite",
                                             folder / "kill.out", "--max-batch", "8",
                                             key=KEY, map_path=map_path),
                        kill_bodies, kill_after=args.kill_n // 4, clients=8)
        log(f"kill run: {kill}")
        measured["probe_traj"], probe_info = probe_rounds(folder, args, log)
    meta = {"command": shlex.join(["benchmarks/serve/run_serve.py", *sys.argv[1:]]),
            "policy": made, "info": info, "cores": os.cpu_count(),
            "load": [load_start, os.getloadavg()[0]], "minutes": (time.time() - t0) / 60,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "args": vars(args)}
    meta["probe"] = {**{k: meta[k] for k in ("command", "load", "date", "minutes")},
                     "info": probe_info}
    if RAW.is_file():  # parts 5 and 6 run alone (--parts replicas, external): kept
        last = json.loads(RAW.read_text(encoding="utf-8"))
        for part in ("replicas", "external"):
            if part in last["measured"]:
                measured[part], meta[part] = last["measured"][part], last["meta"][part]
    write(args, meta, measured, kill)


def write(args, meta: dict, measured: dict, kill: dict) -> None:
    """The raw measurements (benchmarks/serve/out/serve.json) and the report."""
    RAW.parent.mkdir(parents=True, exist_ok=True)
    RAW.write_text(json.dumps({"meta": meta, "measured": measured, "kill": kill},
                              indent=1, default=str), encoding="utf-8")
    args.out.write_text(render(meta, measured, kill), encoding="utf-8")
    print(f"wrote {args.out}", file=sys.stderr)


def replicas_part(folder: Path, args, log) -> dict:
    """Part 5 (module docstring): the figures of `shared_sessions.pair_run`."""
    from pg_server import postgres_server
    from shared_sessions import pair_run, summary

    policy, map_path, made = make_policy(folder)
    with postgres_server() as pg:
        run = pair_run(policy, map_path, pg.create_schema("bench"), folder, steps=args.steps)
    log("replicas: done")
    return {**summary(run), "policy": made}


def part_only(args, load_start: float, t0: float, log) -> None:
    """``--parts probe`` or ``replicas``: that part measured now, the others read from the last
    run."""
    raw = json.loads(RAW.read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory() as tmp:
        if args.parts == "probe":
            raw["measured"]["probe_traj"], info = probe_rounds(Path(tmp), args, log)
        elif args.parts == "external":
            from external_load import external_part

            raw["measured"]["external"], info = external_part(Path(tmp), args, log), None
        else:
            raw["measured"]["replicas"], info = replicas_part(Path(tmp), args, log), None
    raw["meta"][args.parts] = {
        "command": shlex.join(["benchmarks/serve/run_serve.py", *sys.argv[1:]]),
        "load": [load_start, os.getloadavg()[0]], "minutes": (time.time() - t0) / 60,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "info": info,
        "cores": os.cpu_count(), "args": vars(args)}
    write(args, raw["meta"], raw["measured"], raw["kill"])


if __name__ == "__main__":
    main()
