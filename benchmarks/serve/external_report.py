"""The section of benchmarks/results/serve.md on externally scored decisions
(``run_serve.py --parts external``, benchmarks/serve/external_load.py): every number is computed
from the run's measurements (medians over rounds)."""

from __future__ import annotations

import statistics

TARGET_RATE = 500.0  # decisions per second, 16 clients, one server

NAMES = {"sqlite": "`calimon serve`, SQLite log", "postgres": "`calimon serve`, PostgreSQL log",
         "review": "`calimon serve --review`, SQLite log and review store",
         "floor": "the framework alone (a FastAPI route on uvicorn, no decision, no log)"}


def _loaded(m: dict) -> bool:
    """Whether other work held the cores when the run began (1-minute load above 1.5 on a
    2-core machine, scaled by the cores). The load at the end counts the run's own server,
    clients and PostgreSQL, so it says nothing of other work."""
    return m["load"][0] > 0.75 * m["cores"]


def _med(runs: list[dict], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def median_table(runs: dict) -> str:
    """One row per server: medians of rate, latency, decisions per commit, CPU per answer."""
    lines = ["| server | decisions/s | p50 latency (ms) | p99 latency (ms) | decisions per "
             "commit | server CPU ms per answer | answered, and logged with the same answer |",
             "|---|---|---|---|---|---|---|"]
    for kind in NAMES:
        rs = runs.get(kind) or []
        if not rs:
            continue
        logged = ("-" if kind == "floor" else
                  f"{sum(r['ok'] for r in rs)}, {sum(r['logged_same'] for r in rs)}")
        lines.append(f"| {NAMES[kind]} | {_fmt(_med(rs, 'throughput'), '.0f')} | "
                     f"{_fmt(_med(rs, 'p50_ms'), '.1f')} | {_fmt(_med(rs, 'p99_ms'), '.1f')} | "
                     f"{_fmt(_med(rs, 'per_commit'), '.1f')} | "
                     f"{_fmt(_med(rs, 'server_cpu_ms'), '.2f')} | {logged} |")
    return "\n".join(lines)


def _busy(rs: list[dict]) -> float:
    """The cores kept busy at each run's rate (server, clients and database server), median."""
    return statistics.median((r["server_cpu_ms"] + r.get("client_cpu_ms", 0)
                              + (r.get("db_cpu_ms") or 0)) * r["throughput"] / 1000 for r in rs)


def _bound(rs: list[dict], rate: float, cores: int) -> str:
    """What held a missed rate: the server process's share of a core at the measured rate,
    and the cores busy altogether (`cpu_table`)."""
    server = _med(rs, "server_cpu_ms")
    busy = _busy(rs)
    return (f"the server is one Python process, busy {server * rate / 1000:.2f} of a core at "
            f"{server:.2f} ms of CPU per answer, and each decision also waits for its commit; "
            f"{busy:.2f} of the {cores} cores were busy, so it is the decision's own "
            "work and the log, not the framework or the machine, that bound it here.")


def cpu_table(runs: dict) -> str:
    """Where the 2 cores went, per answer (medians): the server, the database server, the
    clients, and the cores those kept busy at the measured rate."""
    lines = ["| server | server CPU ms | PostgreSQL CPU ms | clients' CPU ms | cores busy at "
             "the measured rate |", "|---|---|---|---|---|"]
    for kind in NAMES:
        rs = [r for r in runs.get(kind) or [] if "client_cpu_ms" in r]
        if not rs:
            continue
        busy = _busy(rs)
        db = [r for r in rs if r.get("db_cpu_ms") is not None]
        lines.append(f"| {NAMES[kind]} | {_med(rs, 'server_cpu_ms'):.2f} | "
                     f"{_fmt(_med(db, 'db_cpu_ms'), '.2f')} | {_med(rs, 'client_cpu_ms'):.2f} | "
                     f"{busy:.2f} |")
    return "\n".join(lines)


def rounds_table(runs: dict) -> str:
    """Every run, in the order of the rounds, with the load average around it."""
    lines = ["| round | server | answers | errors | decisions/s | p50 ms | p99 ms | per "
             "commit | server CPU ms | load before, after |", "|---|---|---|---|---|---|---|---|"
             "---|---|"]
    n = max(len(runs.get(k) or []) for k in NAMES)
    for i in range(n):
        for kind in NAMES:
            rs = runs.get(kind) or []
            if i >= len(rs):
                continue
            r = rs[i]
            lines.append(f"| {i + 1} | {kind} | {r['n']} | {r['n'] - r['ok']} | "
                         f"{r['throughput']:.0f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | "
                         f"{_fmt(r.get('per_commit'), '.1f')} | {r['server_cpu_ms']:.2f} | "
                         f"{r['load'][0]:.1f}, {r['load'][1]:.1f} |")
    return "\n".join(lines)


def external_section(meta: dict, measured: dict) -> tuple[list[str], list[str]]:
    """(the section, its lines under the targets); empty without the external part."""
    runs = measured.get("external")
    if not runs:
        return [], []
    m = meta["external"]
    durable = {k: (runs[k][0].get("durability") if runs.get(k) else "-")
               for k in ("sqlite", "postgres")}
    section = [
        "## Externally scored decisions: bound by the log", "",
        f"Measured {m['date']} by `{m['command']}` ({m['minutes']:.1f} minutes; 1-minute load "
        f"average {m['load'][0]:.1f} at the start and {m['load'][1]:.1f} at the end, on "
        f"{m['cores']} cores; the load at the end is the run's own" + (": other jobs were running, the rates below are depressed "
                                 "by them, and the figure to hold against the target is a run "
                                 "on a quiet machine" if _loaded(m) else ", a quiet machine")
        + "). The policy: "
        f"{runs['policy']}. {runs['clients']} clients, one keep-alive connection each, send "
        "`/v1/score` requests with distinct request ids and the guard's score, each as soon "
        f"as the last is answered; {runs['warmup']} warm-up requests, then up to "
        f"{m['args']['external_n']} or {m['args']['external_s']} s. Every answer is committed "
        "to the decision log before it is sent (group commits: the decisions that arrive while "
        "a commit is on disk go in the next one); after each run every answered request id "
        "was looked up in the log and compared with the answer the client got. Latency is "
        "what a client saw; CPU is the server process's (user and system, from /proc) per "
        "answer. Both servers (calimon's and the framework alone) are uvicorn running "
        f"{runs.get('http_stack', 'its defaults')}, "
        + ("each writing its access log (a line per request), as `calimon serve` does by "
           "default" if m["args"].get("external_access_log") else
           "with no access log (`calimon serve --no-access-log`; a server writing it, as by "
           "default, spends more CPU per answer: benchmarks/results/perf-access-log.md)")
        + ".", "",
        f"- SQLite: {durable['sqlite']}.",
        f"- PostgreSQL 15 (a local server started for the run): {durable['postgres']}.", "",
        "Medians over the rounds:", "", median_table(runs), "",
        "Where the CPU went, per answer (the 16 clients run on the same 2 cores; PostgreSQL's "
        "is every process of its server):", "", cpu_table(runs), "", "Each run:", "",
        rounds_table(runs), ""]
    verdict = []
    for kind in ("sqlite", "postgres"):
        rate = _med(runs.get(kind) or [], "throughput")
        if rate is None:
            continue
        floor = _med(runs.get("floor") or [], "throughput")
        verdict.append(
            f"- Target: >= {TARGET_RATE:.0f} externally scored decisions per second on one "
            f"server with {runs['clients']} clients, each durable before it is answered "
            f"({kind}{'' if m['args'].get('external_access_log') else '; --no-access-log'}). "
            f"Measured {rate:.0f}/s at load {m['load'][0]:.1f} (median; rounds "
            + ", ".join(f"{r['throughput']:.0f}" for r in runs[kind]) + "/s): "
            + ("met." if rate >= TARGET_RATE else
               ("missed on this loaded machine" if _loaded(m) else "missed")
               + (f" (the framework alone answered {floor:.0f}/s in the same rounds)"
                  if floor is not None else "")
               + ("; to be measured again on a quiet one." if _loaded(m) else
                  f": {_bound(runs.get(kind) or [], rate, m['cores'])}")))
    return section, verdict
