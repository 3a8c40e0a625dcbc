"""What uvicorn's access log costs an externally scored `calimon serve` on PostgreSQL: the load
of ``run_serve.py --parts external`` (benchmarks/serve/external_load.py: 16 clients, distinct
request ids, every answer committed before it is sent and checked in the log afterwards) on a
server started as it is by default and on one started with ``--no-access-log``, the two taking
turns (the order alternating) over ``--rounds`` rounds on one PostgreSQL server.

    PYTHONPATH=benchmarks/serve:tests python benchmarks/serve/access_log.py --rounds 4 \\
        --out benchmarks/results/perf-access-log.md

Reported: each run's decisions per second and the server's CPU per answer (from /proc, which a
loaded machine inflates less than it does the rate), the medians, and the median of the paired
differences in CPU per answer (each round's quiet server against the same round's default).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

VARIANTS = {"default (access log)": (), "--no-access-log": ("--no-access-log",)}


def main() -> None:
    from external_load import make_policy, measure
    from pg_server import postgres_server

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--external-n", type=int, default=6000)
    parser.add_argument("--external-s", type=float, default=30.0)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/perf-access-log.md"))
    args = parser.parse_args()
    runs: dict[str, list[dict]] = {name: [] for name in VARIANTS}
    started, load0 = time.time(), os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp, postgres_server() as pg:
        folder = Path(tmp)
        policy, _ = make_policy(folder)
        for r in range(args.rounds):
            names = list(VARIANTS) if r % 2 == 0 else list(reversed(VARIANTS))
            for i, name in enumerate(names):
                got = measure(policy, pg.create_schema(f"access{r}{i}"), folder, f"{i}-{r}",
                              args, seed=10 * r, flags=VARIANTS[name])
                assert got["errors"] == 0 and got["logged_same"] == got["ok"], got
                runs[name].append(got)
                print(f"round {r + 1}, {name}: {got['throughput']:.0f}/s, "
                      f"{got['server_cpu_ms']:.2f} ms CPU per answer", flush=True)
    args.out.write_text(page(runs, args, started, load0), encoding="utf-8")


def page(runs: dict[str, list[dict]], args, started: float, load0: float) -> str:
    """The results page."""
    default, quiet = (runs[name] for name in VARIANTS)
    saved = statistics.median(d["server_cpu_ms"] - q["server_cpu_ms"]
                              for d, q in zip(default, quiet, strict=True))
    lines = [
        "# uvicorn's access log on an externally scored server (PostgreSQL log)", "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(started))} by "
        f"`benchmarks/serve/access_log.py --rounds {args.rounds}` (load average "
        f"{load0:.1f} at the start, on {os.cpu_count()} cores): the external load of "
        "`run_serve.py --parts external` on PostgreSQL, a default server and one with "
        "`--no-access-log` taking turns. Every answer was checked in the log.", "",
        "| server | decisions/s (median) | server CPU ms per answer (median) | rounds (/s) |",
        "|---|---|---|---|"]
    for name, got in runs.items():
        lines.append(f"| {name} | {statistics.median(g['throughput'] for g in got):.0f} | "
                     f"{statistics.median(g['server_cpu_ms'] for g in got):.2f} | "
                     + ", ".join(f"{g['throughput']:.0f}" for g in got) + " |")
    lines += ["", f"Median of the paired differences, default minus `--no-access-log`: "
              f"{saved:.2f} ms of server CPU per answer.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
