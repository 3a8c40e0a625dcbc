"""The cost of one sandboxed code check, as a benchmark build pays it thousands of times.

    PYTHONPATH=. python benchmarks/perf/sandbox_start.py --problems 12 --rounds 5 \
        --out benchmarks/results/perf-sandbox.md

The scripts are the honest evaluation's (`calimon.data.codegen.runner.evaluate`) of the first
``--problems`` HumanEval problems (the reference and a wrong copy of it, every test and call),
captured as the build writes them, plus an empty script. Each runs in the sandbox two ways,
interleaved script by script and round by round on the same machine:

- ``before``: the interpreter as calimon ran it up to this change: ``python -I -B`` (so `site`
  and every .pth hook of the environment, an editable install's finder included), the script
  re-executing itself with ``PYTHONHASHSEED=0`` (two interpreter starts per check);
- ``after``: `calimon.sandbox.PYTHON_FLAGS` (no `site`) with ``PYTHONHASHSEED=0`` passed in the
  environment (one start).

Both must print the same lines (checked: the results are the same). The page gives the median
wall seconds per script of each way, the ratio, and the CPU seconds of the children.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from calimon import sandbox
from calimon.data import humaneval
from calimon.data.codegen import runner

# the re-execution every honest-evaluation script began with before this change
BEFORE_REEXEC = r'''import os as _os, sys as _sys
if _os.environ.get("PYTHONHASHSEED") != "0":
    _exe = "/proc/self/exe" if _os.path.exists("/proc/self/exe") else _sys.executable
    _os.execve(_exe, [_sys.executable, "-s", "-P", "-B", __file__],
               dict(_os.environ, PYTHONHASHSEED="0"))
del _os, _sys
'''
BEFORE_FLAGS = ("-I", "-B")


def captured_scripts(n_problems: int) -> list[tuple[str, float]]:
    """(script, time limit) of the honest evaluation of the first ``n_problems`` problems."""
    problems, _ = humaneval.load_problems(humaneval.wheel_data_path())
    scripts: list[tuple[str, float]] = []

    def record(code, *, timeout_s, hash_seed=None):
        scripts.append((code, timeout_s))
        return sandbox.run_python(code, timeout_s=timeout_s, hash_seed=hash_seed)

    real = runner.run_checked
    runner.run_checked = record
    try:
        for problem in list(problems)[:n_problems]:
            wrong = problem.reference.replace("return", "return None and", 1)
            runner.evaluate(problem, [problem.reference, wrong])
    finally:
        runner.run_checked = real
    return [("pass\n", 10.0), *scripts]


def run_way(way: str, code: str, timeout_s: float) -> tuple[float, str]:
    """Wall seconds and stdout of ``code`` run the ``way`` way."""
    if way == "before":
        saved = sandbox.PYTHON_FLAGS
        sandbox.PYTHON_FLAGS = BEFORE_FLAGS
        try:
            res = sandbox.run_python(BEFORE_REEXEC + code, timeout_s=timeout_s)
        finally:
            sandbox.PYTHON_FLAGS = saved
    else:
        res = sandbox.run_python(code, timeout_s=timeout_s, hash_seed=0)
    assert not res.timed_out and res.returncode == 0, (way, res.stderr[-2000:])
    return res.seconds, res.stdout


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def measure(scripts, rounds: int) -> dict:
    """Per way: every script's wall seconds per round, and the children's CPU seconds."""
    wall = {"before": [], "after": []}
    cpu = {"before": 0.0, "after": 0.0}
    for _ in range(rounds):
        for code, limit in scripts:
            outs = {}
            for way in ("before", "after"):
                c0 = children_cpu()
                seconds, outs[way] = run_way(way, code, limit)
                cpu[way] += children_cpu() - c0
                wall[way].append(seconds)
            assert outs["before"] == outs["after"], "the two ways printed different results"
    return {"wall": wall, "cpu": cpu}


def page(args, scripts, found, load0, load1) -> str:
    med = {w: statistics.median(v) for w, v in found["wall"].items()}
    n = len(found["wall"]["after"])
    lines = [
        "# The cost of one sandboxed code check", "",
        "    PYTHONPATH=. python benchmarks/perf/sandbox_start.py "
        f"--problems {args.problems} --rounds {args.rounds} --out {args.out}", "",
        f"Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; 1-minute load average {load0:.1f} at the start, "
        f"{load1:.1f} at the end. {len(scripts)} scripts (an empty one and the honest "
        f"evaluation of {args.problems} HumanEval problems, reference and a wrong copy), "
        f"{args.rounds} rounds, each script run both ways in turn: {n} runs a way. Both ways "
        "printed the same lines on every run.", "",
        "| way | median wall s per script | CPU s of the sandboxed processes, all runs |",
        "|---|---|---|",
        f"| before: `-I -B`, re-executed with PYTHONHASHSEED=0 | {med['before']:.4f} | "
        f"{found['cpu']['before']:.1f} |",
        f"| after: `{' '.join(sandbox.PYTHON_FLAGS)}`, PYTHONHASHSEED=0 in the environment | "
        f"{med['after']:.4f} | {found['cpu']['after']:.1f} |", "",
        f"after / before: {med['after'] / med['before']:.2f} (median wall), "
        f"{found['cpu']['after'] / found['cpu']['before']:.2f} (CPU seconds).", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    load0 = os.getloadavg()[0]
    scripts = captured_scripts(args.problems)
    started = time.perf_counter()
    found = measure(scripts, args.rounds)
    text = page(args, scripts, found, load0, os.getloadavg()[0])
    print(text)
    print(f"({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
