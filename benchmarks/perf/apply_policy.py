"""How long `calimon apply-policy` takes with its shift check, on docs/deployment.md's synthetic
shift (1,200 calibration transcripts, 800 new ones, an audited policy).

    PYTHONPATH=. python benchmarks/perf/apply_policy.py --runs 3 --against BASE \
        --out benchmarks/results/perf-apply-policy.md

Builds the doc's runs in a temporary folder (`calimon.studies.shift.synthetic`, then
``calimon escalate runs/shift/calib --budget 0.10 --audit-fraction 0.2``), then runs
``calimon apply-policy POLICY runs/shift/new/curve.csv --out ... --json`` as a fresh process
``--runs`` times: the wall seconds, the CPU seconds of the process (user + system, less disturbed
by other jobs on a shared machine) and the shift check's line, which must be the same in every
run and checkout (the test's figures do not change, only its cost). ``--against BASE``: the
same runs with another checkout of calimon first on PYTHONPATH (an export of the commit before
a change), interleaved run by run with this one.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _calimon(checkout: Path, cwd: Path, *args: str) -> tuple[float, float, str]:
    """``python -m calimon ARGS`` with ``checkout`` first on PYTHONPATH: (wall seconds, CPU
    seconds, stdout)."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "calimon", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"calimon {shlex.join(args)}: exit {proc.returncode}: "
                           f"{proc.stderr[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), \
        proc.stdout


def setup(work: Path) -> None:
    """The doc's synthetic shift and its audited policy, under ``work/runs``."""
    from calimon.studies.shift.synthetic import write_synthetic_shift

    write_synthetic_shift(work / "runs" / "shift", seed=0)
    _calimon(ROOT, work, "escalate", "runs/shift/calib", "--budget", "0.10",
             "--audit-fraction", "0.2", "--out", "runs/audited.yaml")


def one_run(checkout: Path, work: Path) -> dict:
    """One apply-policy process: its times and its shift line."""
    wall, cpu, out = _calimon(checkout, work, "apply-policy", "runs/audited.yaml",
                              "runs/shift/new/curve.csv", "--out", "runs/decisions.csv",
                              "--json")
    return {"wall": wall, "cpu": cpu, "line": json.loads(out)["shift_check"]}


def report(rows: dict[str, list[dict]], argv: list[str], load: tuple[float, float]) -> list[str]:
    """The result lines (markdown)."""
    lines = ["# `calimon apply-policy` with its shift check, 800 new transcripts", "",
             "    " + shlex.join(["PYTHONPATH=.", "python", "benchmarks/perf/apply_policy.py",
                                  *argv]), "",
             f"Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, Python "
             f"{platform.python_version()}; 1-minute load average {load[0]:.1f} at the start, "
             f"{load[1]:.1f} at the end. Fresh processes of `calimon apply-policy "
             "runs/audited.yaml runs/shift/new/curve.csv --json` (docs/deployment.md, section "
             "7):", "", "| checkout | median wall s | median CPU s | runs (wall) | runs (CPU) |",
             "|---|---|---|---|---|"]
    for name, runs in rows.items():
        walls, cpus = [r["wall"] for r in runs], [r["cpu"] for r in runs]
        lines.append(f"| {name} | {statistics.median(walls):.1f} | "
                     f"{statistics.median(cpus):.1f} | {', '.join(f'{w:.1f}' for w in walls)} "
                     f"| {', '.join(f'{c:.1f}' for c in cpus)} |")
    said = {r["line"] for runs in rows.values() for r in runs}
    lines += ["", "The shift check said, in every run: " if len(said) == 1 else
              "The shift check's lines DIFFER between runs: "]
    lines += [f"`{line}`" for line in sorted(said)]
    if len(rows) == 2:
        (b, br), (n, nr) = rows.items()
        bc, nc = (statistics.median(r["cpu"] for r in x) for x in (br, nr))
        bw, nw = (statistics.median(r["wall"] for r in x) for x in (br, nr))
        lines += ["", f"Median CPU seconds {bc:.1f} ({b}) against {nc:.1f} ({n}): "
                  f"{bc / nc:.1f}x; median wall {bw:.1f} against {nw:.1f} s."]
    return lines


def main(argv=None) -> None:
    """Run, print the table, and write it to --out if given."""
    argv = sys.argv[1:] if argv is None else list(argv)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--against", type=Path, help="another checkout, interleaved with this one")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    load = os.getloadavg()[0]
    rows: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        setup(work)
        for _ in range(args.runs):
            if args.against is not None:
                rows.setdefault(f"before ({args.against.name})", []).append(
                    one_run(args.against, work))
            rows.setdefault("this checkout", []).append(one_run(ROOT, work))
    text = "\n".join(report(rows, argv, (load, os.getloadavg()[0]))) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
