"""The CPU a `calimon serve` process spends logging one group of plain decisions in PostgreSQL.

    PYTHONPATH=.:tests python benchmarks/serve/pg_group_cpu.py --groups 400 --size 7 \
        --out benchmarks/results/perf-pg-log.md

A local PostgreSQL server is started for the run (Debian's package, as the tests start it:
tests/pg_server.py). Two ways of writing the same groups, interleaved in rounds, each on its own
fresh schema, every write committed with ``synchronous_commit = on``:

- ``before``: one ``INSERT ... VALUES (...), (...) ... RETURNING`` with a placeholder per value,
  inside ``BEGIN`` and ``COMMIT`` (the log before this change);
- ``after``: `calimon.serve.pg_log.PostgresDecisionLog.record_many` as it is: one
  ``INSERT ... SELECT * FROM unnest(...)`` of one binary array per column, autocommitted.

For each: the writing thread's CPU seconds (``time.thread_time``) and wall seconds per group,
medians over the rounds. Both must return the same rows (checked).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

from pg_server import postgres_server

from calimon.serve.decision_log import COLUMNS, LoggedDecision, open_log

RESPONSE = {"status": "ok", "decision": "pass", "action": "auto_pass", "audit": False,
            "p_raw": 0.3, "p_cal": 0.21, "policy_hash": "0123456789ab",
            "model_revision": "external", "readout": "score:guard",
            "reasons": ["score 31 of 100 through the policy's map"]}


def before_many(log, entries):
    """The plain group as the log wrote it before this change."""
    rows = [e.row() for e in entries]
    one = "(" + ", ".join(["%s"] * len(COLUMNS)) + ")"
    insert = (f"INSERT INTO decisions ({', '.join(COLUMNS)}) VALUES "
              f"{', '.join([one] * len(rows))} ON CONFLICT (request_id) DO NOTHING "
              f"RETURNING {', '.join(COLUMNS)}")

    def work(conn):
        with conn.transaction():
            return list(conn.execute(insert, [v for row in rows for v in row]))

    return [LoggedDecision.from_row(r) for r in log._call(work)]


def group(size: int) -> list[LoggedDecision]:
    return [LoggedDecision(uuid.uuid4().hex, "score", "f" * 64, dict(RESPONSE),
                           received_at=time.time()) for _ in range(size)]


def timed(write, groups) -> tuple[float, float]:
    """CPU and wall seconds per group of writing ``groups``."""
    c0, w0 = time.thread_time(), time.perf_counter()
    for g in groups:
        got = write(g)
        assert [e.request_id for e in got] == [e.request_id for e in g]
        assert [e.response for e in got] == [e.response for e in g]
    return ((time.thread_time() - c0) / len(groups), (time.perf_counter() - w0) / len(groups))


def measure(pg, n_groups: int, size: int, rounds: int) -> dict[str, list[tuple[float, float]]]:
    logs = {way: open_log(pg.create_schema(f"bench_{way}")) for way in ("before", "after")}
    writers = {"before": lambda g: before_many(logs["before"], g),
               "after": logs["after"].record_many}
    for write in writers.values():  # warm: connections, prepared statements
        for _ in range(20):
            write(group(size))
    found: dict[str, list[tuple[float, float]]] = {"before": [], "after": []}
    for _ in range(rounds):
        for way, write in writers.items():
            found[way].append(timed(write, [group(size) for _ in range(n_groups)]))
    for log in logs.values():
        log.close()
    return found


def page(args, found, load0, load1) -> str:
    med = {w: (statistics.median(c for c, _ in v), statistics.median(w_ for _, w_ in v))
           for w, v in found.items()}
    lines = [
        "# Logging a group of plain decisions in PostgreSQL: the writing thread's CPU", "",
        f"    PYTHONPATH=.:tests python benchmarks/serve/pg_group_cpu.py --groups {args.groups} "
        f"--size {args.size} --rounds {args.rounds} --out {args.out}", "",
        f"Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; 1-minute load average {load0:.1f} at the start, "
        f"{load1:.1f} at the end. A local PostgreSQL server (synchronous_commit=on); "
        f"{args.rounds} rounds of {args.groups} groups of {args.size} decisions a way, the ways "
        "interleaved; both returned the logged rows of every group.", "",
        "| way | CPU ms per group (median of rounds) | wall ms per group | rounds, CPU ms |",
        "|---|---|---|---|"]
    what = {"before": "multi-row `VALUES`, a placeholder per value, in `BEGIN`/`COMMIT`",
            "after": "`unnest` of one binary array per column, autocommitted (record_many)"}
    for way, (cpu, wall) in med.items():
        rounds = ", ".join(f"{c * 1e3:.2f}" for c, _ in found[way])
        lines.append(f"| {what[way]} | {cpu * 1e3:.2f} | {wall * 1e3:.2f} | {rounds} |")
    lines += ["", f"after / before: {med['after'][0] / med['before'][0]:.2f} (CPU), "
              f"{med['after'][1] / med['before'][1]:.2f} (wall).", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", type=int, default=400)
    ap.add_argument("--size", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    load0 = os.getloadavg()[0]
    with postgres_server() as pg:
        found = measure(pg, args.groups, args.size, args.rounds)
    text = page(args, found, load0, os.getloadavg()[0])
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
