#!/usr/bin/env python3
"""Default torch threads against fixed counts, on a quiet machine and with cores kept busy.

Each case is one fresh process that loads the embedded SmolLM2 on the transformers backend with
``--threads`` (``default``: calimon picks the free cores) and scores the same humaneval-pairs
samples with the verdict readout; the wall time of the scoring (the load excluded) is what is
compared. "busy" runs ``--busy`` spinning processes beside it (bounded: they stop with the
case). Rounds interleave the cases; the table gives medians over rounds and each case's ratio
to the default in the same round and condition.

    .venv/bin/python benchmarks/perf/threads_busy.py --rounds 3 --samples 12 \\
        --out benchmarks/results/perf-threads.md
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

CASE = r"""
import json, sys, time
from calimon.scoring.backends.transformers_backend import TransformersBackend
from calimon.data.registry import load_benchmark
from calimon.models import resolve_model
from calimon.scoring.monitor import Monitor
from calimon.prompts import load_prompt
from calimon.selection import select_pairs

threads = None if sys.argv[1] == "default" else int(sys.argv[1])
samples = select_pairs([s for s in load_benchmark("humaneval-pairs") if s.split == "test"],
                       int(sys.argv[2]), 0)
be = TransformersBackend(resolve_model("smollm2-135m"), device="cpu", threads=threads)
mon = Monitor(be, load_prompt("direct"), "verdict")
mon.score(samples[:1])  # loads weights and tokenizer, warms the prefix cache
start = time.perf_counter()
mon.score(samples[1:])
print(json.dumps({"seconds": time.perf_counter() - start, "n": len(samples) - 1,
                  "threads_used": be.threads_used}))
"""

SPIN = "import time\nend = time.time() + {limit}\nwhile time.time() < end:\n    pass\n"


def run_case(threads: str, samples: int, busy: int, limit: float) -> dict:
    """One case in a fresh process, with ``busy`` spinning processes beside it."""
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN.format(limit=limit)])
                for _ in range(busy)]
    try:
        if busy:
            time.sleep(1.0)  # the spinners are on the cores before the backend looks
        out = subprocess.run([sys.executable, "-c", CASE, threads, str(samples)],
                             capture_output=True, text=True, timeout=limit, check=True,
                             env={**os.environ, "HF_HUB_OFFLINE": "1"})
        return json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        for p in spinners:
            p.kill()
            p.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--samples", type=int, default=12)
    ap.add_argument("--threads", nargs="+", default=["default", "1", "2"])
    ap.add_argument("--busy", type=int, default=1, help="spinning processes in 'busy'")
    ap.add_argument("--limit", type=float, default=600.0, help="seconds per case at most")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    conditions = {"quiet": 0, f"busy ({a.busy} core{'s' * (a.busy > 1)} spinning)": a.busy}
    rows: dict[tuple[str, str], list[dict]] = {}
    for r in range(a.rounds):
        for cond, busy in conditions.items():
            for t in a.threads:
                got = run_case(t, a.samples, busy, a.limit)
                rows.setdefault((cond, t), []).append(got)
                print(f"round {r + 1} {cond} threads={t}: {got}", flush=True)
    lines = [
        "# Default torch threads, quiet and busy",
        "",
        "Regenerate: `.venv/bin/python benchmarks/perf/threads_busy.py --rounds "
        f"{a.rounds} --samples {a.samples} --busy {a.busy} --out {a.out}`",
        "",
        f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {os.cpu_count()} "
        "logical cores; SmolLM2-135M fp32, verdict readout, "
        f"{a.samples - 1} humaneval-pairs test samples scored after one warm-up sample, one "
        "fresh process per case. `default`: no `--threads` (calimon.scoring.backends.threads picks the "
        "free cores when the weights load). Median of "
        f"{a.rounds} interleaved rounds; the ratio is the case's time over the default's in "
        "the same round and condition (above 1: slower than the default).",
        "",
        "| condition | threads | threads used | scoring s (median) | samples/s | "
        "time / default |",
        "|---|---|---|---|---|---|",
    ]
    for cond in conditions:
        base = rows[(cond, "default")]
        for t in a.threads:
            got = rows[(cond, t)]
            secs = statistics.median(g["seconds"] for g in got)
            ratio = statistics.median(g["seconds"] / b["seconds"]
                                      for g, b in zip(got, base, strict=True))
            used = sorted({g["threads_used"] for g in got})
            lines.append(f"| {cond} | {t} | {', '.join(map(str, used))} | {secs:.2f} | "
                         f"{got[0]['n'] / secs:.2f} | {ratio:.2f} |")
    a.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
