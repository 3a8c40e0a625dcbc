"""What the free binary protocol's format check costs a quick curve on SmolLM2-135M.

    PYTHONPATH=. HF_HUB_OFFLINE=1 python benchmarks/perf/format_check.py --against BASE \
        --out benchmarks/results/perf-format-check.md

Runs ``calimon curve --model smollm2-135m --limit 8 --device cpu`` (humaneval-pairs, the default
binary prompts direct and evidence under the free protocol, which SmolLM2 does not follow) as a
fresh process on a fresh run store (cold), once more on the same store with a new output folder
(warm: the main readings reused), and once with ``--seed 1`` on that store (other samples: their
main readings are scored, the binary format's verdict is the store's, when it keeps one). ``--against BASE``: the same two runs with another checkout of
calimon first on PYTHONPATH (an export of the commit before a change), run before this one.
For each run: the wall seconds, the CPU seconds of the process (user + system, less disturbed
by other jobs on a shared machine), the scoring seconds and model calls of the run's timing
block (model load, the main readout and the binary points) and the line the run printed about
the binary points.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARGS = ["curve", "--model", "smollm2-135m", "--limit", "8", "--device", "cpu", "--n-boot", "20"]


def one_run(checkout: Path, store: Path, out: Path, extra: tuple[str, ...] = ()) -> dict:
    """One fresh ``python -m calimon curve`` process; its wall and CPU seconds, scoring
    seconds, model calls and the lines it printed about binary points."""
    env = {**os.environ, "PYTHONPATH": str(checkout), "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "calimon", *ARGS, *extra, "--store", str(store),
                           "--out", str(out), "--quiet"], env=env, cwd=tempfile.gettempdir(),
                          capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"exit {proc.returncode}: {proc.stderr[-2000:]}")
    timing = json.loads((out / "curve.json").read_text())["timing"]
    said = [ln for ln in proc.stdout.splitlines() if ln.startswith("binary/")]
    return {"wall": wall, "cpu": (after.ru_utime - before.ru_utime)
            + (after.ru_stime - before.ru_stime),
            "scoring": timing.get("scoring_seconds"), "calls": timing.get("model_calls"),
            "said": said[0] if said else "(no line)"}


RUNS = ("cold", "warm", "other samples (--seed 1)")


def runs(checkout: Path) -> list[dict]:
    """The cold run, the warm one and the one on other samples, on one store."""
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "store.sqlite"
        return [one_run(checkout, store, Path(tmp) / "run1"),
                one_run(checkout, store, Path(tmp) / "run2"),
                one_run(checkout, store, Path(tmp) / "run3", ("--seed", "1"))]


def report(rows: dict[str, list[dict]], argv: list[str], load: tuple[float, float]) -> list[str]:
    """The result lines (markdown)."""
    lines = ["# The free binary format check on a quick SmolLM2 curve", "",
             "    " + shlex.join(["PYTHONPATH=.", "HF_HUB_OFFLINE=1", "python",
                                  "benchmarks/perf/format_check.py", *argv]), "",
             f"Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, Python "
             f"{platform.python_version()}; 1-minute load average {load[0]:.1f} at the start, "
             f"{load[1]:.1f} at the end. `calimon {' '.join(ARGS)}` as a fresh process on a "
             "fresh store (cold), again on the same store (warm), and with `--seed 1` on it "
             "(other samples):", "",
             "| checkout | run | wall s | CPU s | scoring s | model calls | binary line |",
             "|---|---|---|---|---|---|---|"]
    for name, done in rows.items():
        for label, r in zip(RUNS, done, strict=True):
            lines.append(f"| {name} | {label} | {r['wall']:.1f} | {r['cpu']:.1f} | "
                         f"{r['scoring']:.1f} | {r['calls']} | {r['said'][:120]} |")
    if len(rows) == 2:
        (b, before), (n, now) = rows.items()
        lines.append("")
        for label, x, y in zip(RUNS, before, now, strict=True):
            lines.append(f"- {label}: CPU seconds {x['cpu']:.1f} ({b}) against {y['cpu']:.1f} "
                         f"({n}), {x['cpu'] / y['cpu']:.1f}x; scoring seconds "
                         f"{x['scoring']:.1f} against {y['scoring']:.1f}.")
    return lines


def main(argv=None) -> None:
    """Run, print the table, and write it to --out if given."""
    argv = sys.argv[1:] if argv is None else list(argv)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", type=Path, help="another checkout, run first")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    load = os.getloadavg()[0]
    rows = {}
    if args.against is not None:
        rows[f"before ({args.against.name})"] = runs(args.against)
    rows["this checkout"] = runs(ROOT)
    text = "\n".join(report(rows, argv, (load, os.getloadavg()[0]))) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
