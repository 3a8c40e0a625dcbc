"""Start-up of `calimon curve`: seconds from the process's start to its first forward pass.

    PYTHONPATH=. HF_HUB_OFFLINE=1 python benchmarks/perf/startup.py --runs 3
    PYTHONPATH=. HF_HUB_OFFLINE=1 python benchmarks/perf/startup.py --importtime  # + the top imports
    PYTHONPATH=. HF_HUB_OFFLINE=1 python benchmarks/perf/startup.py --runs 3 --importtime \
        --out benchmarks/results/perf-startup.md   # the committed table

Each run is a fresh Python process that runs ``calimon curve`` (the embedded SmolLM2, cached;
--limit 8 on humaneval-pairs, a fresh store, CPU) and stops at the moment the backend's first
forward pass begins (`TransformersBackend._forward_last`, which computes the shared prefix's
KV cache and then the batch): the model's weights are loaded by then. It prints the wall seconds
since just before the process was started (interpreter start-up included), the process's CPU
seconds (less disturbed by other jobs on a shared machine), and which heavy packages were
imported by then. ``--importtime``: one more run under ``python -X importtime``, summed per
top-level package (cumulative microseconds of the outermost imports). ``--out``: the same lines
as a markdown page (the median of --runs against the 3-second target).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "sklearn", "scipy", "matplotlib", "pandas", "safetensors")

BOOT = r'''
import json, os, resource, sys, time
HEAVY = json.loads(os.environ["CALIMON_STARTUP_HEAVY"])
t0 = float(os.environ["CALIMON_STARTUP_T0"])
import calimon.scoring.backends.transformers_backend as tb

def first_forward(self, *args, **kwargs):
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print("STARTUP " + json.dumps({
        "wall": time.time() - t0, "cpu": ru.ru_utime + ru.ru_stime,
        "loaded": [m for m in HEAVY if m in sys.modules]}), flush=True)
    os._exit(0)

tb.TransformersBackend._forward_last = first_forward
from calimon.cli import app
sys.argv = ["calimon"] + json.loads(os.environ["CALIMON_STARTUP_ARGS"])
app()
'''


def curve_args(tmp: Path) -> list[str]:
    """The measured command's arguments (after ``calimon``)."""
    return ["curve", "--model", "smollm2-135m", "--limit", "8", "--no-binary", "--device", "cpu",
            "--store", str(tmp / "store.sqlite"), "--out", str(tmp / "run"), "--quiet"]


def one_run(extra: list[str] | None = None) -> dict:
    """One fresh process up to its first forward pass; its record (or the error)."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1",
               "CALIMON_STARTUP_ARGS": json.dumps(curve_args(Path(tmp))),
               "CALIMON_STARTUP_HEAVY": json.dumps(HEAVY)}
        env["CALIMON_STARTUP_T0"] = repr(time.time())
        proc = subprocess.run([sys.executable, *(extra or []), "-c", BOOT], env=env, cwd=tmp,
                              capture_output=True, text=True, timeout=600)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("STARTUP ")]
    if not lines:
        raise RuntimeError(f"no forward pass reached (exit {proc.returncode}): "
                           f"{proc.stderr[-2000:]}")
    rec = json.loads(lines[0][len("STARTUP "):])
    rec["stderr"] = proc.stderr
    return rec


def import_table(stderr: str, top: int = 12) -> list[tuple[str, float]]:
    """(top-level package, seconds) of the outermost imports in ``-X importtime`` output."""
    totals: dict[str, float] = {}
    for line in stderr.splitlines():
        parts = line.split("|")
        if not line.startswith("import time:") or len(parts) != 3:
            continue
        cumulative, name = parts[1].strip(), parts[2]
        if not cumulative.isdigit() or len(name) - len(name.lstrip()) != 1:
            continue  # the header, or an import nested in another
        root = name.strip().split(".")[0]
        totals[root] = totals.get(root, 0.0) + int(cumulative) / 1e6
    return sorted(totals.items(), key=lambda kv: -kv[1])[:top]


TARGET_S = 3.0  # issue 51: the first forward pass within 3 s of the process's start


def report(runs: list[dict], loads: tuple[float, float], imports: dict | None,
           argv: list[str]) -> list[str]:
    """The result lines (markdown): command, conditions, the table, heavy packages, imports."""
    walls, cpus = [r["wall"] for r in runs], [r["cpu"] for r in runs]
    wall = statistics.median(walls)
    lines = ["# Start-up: `calimon curve` to its first forward pass", "",
             "    " + shlex.join(["PYTHONPATH=.", "HF_HUB_OFFLINE=1", "python",
                                  "benchmarks/perf/startup.py", *argv]), "",
             f"Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, Python "
             f"{platform.python_version()}; 1-minute load average {loads[0]:.1f} at the start, "
             f"{loads[1]:.1f} at the end (CPU seconds are the less disturbed measure on a busy "
             f"machine). `calimon {' '.join(curve_args(Path('TMP')))}` from just before the "
             f"process starts to its first forward pass, {len(runs)} fresh processes:", "",
             "| measure | median | runs |", "|---|---|---|",
             f"| wall seconds | {wall:.2f} | {', '.join(f'{w:.2f}' for w in walls)} |",
             f"| CPU seconds of the process | {statistics.median(cpus):.2f} | "
             f"{', '.join(f'{c:.2f}' for c in cpus)} |", "",
             f"Target: first forward pass within {TARGET_S:g} s (median wall): "
             f"**{'met' if wall <= TARGET_S else 'not met'}**, {wall:.2f} s.", "",
             "Heavy packages imported by then: " + (", ".join(runs[0]["loaded"]) or "none") + "."]
    if imports:
        lines += ["", f"Under `-X importtime` (one more run, wall {imports['wall']:.2f} s), the "
                  "outermost imports by package:", "", "| package | seconds |", "|---|---|"]
        lines += [f"| {name} | {seconds:.2f} |" for name, seconds in imports["table"]]
    return lines


def main(argv=None) -> None:
    """Run, print the result lines, and write them to --out if given."""
    argv = sys.argv[1:] if argv is None else list(argv)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--importtime", action="store_true")
    ap.add_argument("--out", type=Path, help="write the lines as a markdown page")
    args = ap.parse_args(argv)
    load = os.getloadavg()[0]
    runs = [one_run() for _ in range(args.runs)]
    imports = None
    if args.importtime:
        rec = one_run(["-X", "importtime"])
        imports = {"wall": rec["wall"], "table": import_table(rec["stderr"])}
    text = "\n".join(report(runs, (load, os.getloadavg()[0]), imports, argv)) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
