"""Start-up of the command line: how long a help or a usage error takes to answer, and how long
`calimon curve` takes from the process's start to its first forward pass.

    PYTHONPATH=. HF_HUB_OFFLINE=1 python benchmarks/perf/startup.py --runs 3
    PYTHONPATH=. HF_HUB_OFFLINE=1 python benchmarks/perf/startup.py --importtime  # + the top imports
    PYTHONPATH=. HF_HUB_OFFLINE=1 python benchmarks/perf/startup.py --runs 3 --importtime \
        --cli-runs 7 --against BASE --out benchmarks/results/perf-startup.md   # the committed table

Help and usage errors (``--cli-runs`` fresh processes each, 0: skipped): ``python -m calimon
ARGS`` for `CLI_CASES` (``calimon --help``, a command's help, a usage error of a command and an
unknown command), the wall seconds of each process and its CPU seconds (user + system, from
``getrusage`` of the children: less disturbed by other jobs on a shared machine), the median
of each against `CLI_TARGET_S`. ``--against BASE``: the same cases with another checkout of
calimon first on PYTHONPATH, interleaved run by run with this one (an export of the commit
before a change: the before and after of one run).

The first forward pass: each run is a fresh Python process that runs ``calimon curve`` (the
embedded SmolLM2, cached; --limit 8 on humaneval-pairs, a fresh store, CPU) and stops at the
moment the backend's first forward pass begins (`TransformersBackend._forward_last`, which
computes the shared prefix's KV cache and then the batch): the model's weights are loaded by
then. It prints the wall seconds since just before the process was started (interpreter start-up
included), the process's CPU seconds, and which heavy packages were imported by then.
``--importtime``: one more run under ``python -X importtime``, summed per top-level package
(cumulative microseconds of the outermost imports). ``--out``: the same lines as a markdown page
(the medians against the targets).
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
CLI_TARGET_S = 1.0  # issue 61: a help or a usage error answers within a second (median wall)
# (label, arguments after `calimon`, whether the 1-second target applies)
CLI_CASES = (("calimon --help", ["--help"], True),
             ("calimon curve --help", ["curve", "--help"], False),
             ("calimon curve --no-such-flag (usage error)", ["curve", "--no-such-flag"], True),
             ("calimon thresholds (usage error: no RUN_DIR)", ["thresholds"], True),
             ("calimon nope (unknown command)", ["nope"], True))


def cli_run(args: list[str], checkout: Path) -> tuple[float, float, int]:
    """One fresh ``python -m calimon ARGS`` with ``checkout`` first on PYTHONPATH: (wall
    seconds, CPU seconds, exit code)."""
    env = {**os.environ, "PYTHONPATH": str(checkout), "COLUMNS": "80"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "calimon", *args], env=env, cwd=tempfile.gettempdir(),
                          capture_output=True, text=True, timeout=120)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.returncode


def cli_table(runs: int, against: Path | None) -> dict:
    """Every `CLI_CASES` case ``runs`` times in this checkout (and in ``against``, run by run
    in turn): {label: {"now": [(wall, cpu, code)], "before": [...]}}."""
    out = {label: {"now": [], "before": []} for label, _, _ in CLI_CASES}
    for _ in range(runs):
        for label, args, _ in CLI_CASES:
            out[label]["now"].append(cli_run(args, ROOT))
            if against is not None:
                out[label]["before"].append(cli_run(args, against))
    return out


def _med(rows: list[tuple], i: int) -> float:
    return statistics.median(r[i] for r in rows)


def cli_report(table: dict, against: Path | None) -> list[str]:
    """The help and usage-error lines (markdown)."""
    head = "| command | exit | median wall s | median CPU s | runs (wall) |"
    rule = "|---|---|---|---|---|"
    if against is not None:
        head += " before: median wall s | before: median CPU s | CPU before / now |"
        rule += "---|---|---|"
    lines = ["## Help and usage errors", "",
             f"Fresh `python -m calimon ARGS` processes, {len(next(iter(table.values()))['now'])}"
             " of each" + (f", interleaved with the same from `{against.name}` (before)"
                           if against is not None else "") + ":", "", head, rule]
    met = []
    for label, _, targeted in CLI_CASES:
        now, before = table[label]["now"], table[label]["before"]
        codes = sorted({r[2] for r in now})
        row = (f"| `{label}` | {', '.join(map(str, codes))} | {_med(now, 0):.2f} | "
               f"{_med(now, 1):.2f} | {', '.join(f'{r[0]:.2f}' for r in now)} |")
        if before:
            row += (f" {_med(before, 0):.2f} | {_med(before, 1):.2f} | "
                    f"{_med(before, 1) / _med(now, 1):.1f}x |")
        lines.append(row)
        if targeted:
            met.append((label, _med(now, 0), _med(now, 1)))
    worst = max(met, key=lambda m: m[1])
    ok = all(w <= CLI_TARGET_S for _, w, _ in met)
    lines += ["", f"Target: a help or a usage error answers within {CLI_TARGET_S:g} s (median "
              f"wall, the rows `calimon --help` and the usage errors): **{'met' if ok else 'not met'}**"
              f"; the slowest, `{worst[0]}`, {worst[1]:.2f} s wall, {worst[2]:.2f} s CPU."]
    return lines


def report(runs: list[dict], loads: tuple[float, float], imports: dict | None,
           argv: list[str]) -> list[str]:
    """The result lines (markdown): command, conditions, the table, heavy packages, imports."""
    walls, cpus = [r["wall"] for r in runs], [r["cpu"] for r in runs]
    wall = statistics.median(walls)
    lines = ["# Start-up: `calimon curve` to its first forward pass, and help and usage errors", "",
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
    ap.add_argument("--cli-runs", type=int, default=7,
                    help="fresh processes per help / usage-error case (0: skip them)")
    ap.add_argument("--against", type=Path, help="another checkout: its help and usage errors too")
    ap.add_argument("--out", type=Path, help="write the lines as a markdown page")
    args = ap.parse_args(argv)
    load = os.getloadavg()[0]
    cli = cli_table(args.cli_runs, args.against) if args.cli_runs else None
    runs = [one_run() for _ in range(args.runs)]
    imports = None
    if args.importtime:
        rec = one_run(["-X", "importtime"])
        imports = {"wall": rec["wall"], "table": import_table(rec["stderr"])}
    lines = report(runs, (load, os.getloadavg()[0]), imports, argv)
    if cli is not None:
        lines += ["", *cli_report(cli, args.against)]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
