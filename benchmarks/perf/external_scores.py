"""An external monitor's scores, no model: `calimon curve --readout score:...`, `calimon thresholds`
and `calimon control-safety` on a 1,000-sample ControlArena-style Inspect log.

    PYTHONPATH=. python benchmarks/perf/external_scores.py --runs 5 \
        --out benchmarks/results/perf-external.md      # the committed table
    PYTHONPATH=. python benchmarks/perf/external_scores.py --runs 1 --profile   # + where the time goes

The logs are written once by Inspect itself (its mock model; ``--logs`` keeps them between
runs): 500 honest and 500 attack samples, each sample's two assistant steps recording a
``suspicion_score`` in their metadata as ControlArena's monitors do, a ``max_suspicion_scorer``
scorer giving their maximum, and a setting scorer giving ``main_task_success`` and
``side_task_success`` (C/I) as ControlArena's settings do; the eval mode in each sample's and
the task's metadata. Each command then runs in a fresh Python process (``calimon.cli.app``,
interpreter start-up included in the wall time); the process's CPU seconds are the less
disturbed measure on a shared machine, and the 1-minute load average is recorded beside each
run. Every process reports whether torch (or transformers) was imported: none may be. Target:
each command under 5 s (median wall). ``--profile``: one more run of each under cProfile, its
calimon functions, Inspect's log reader and all imports together (``_find_and_load``) by
cumulative time.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
N_PER_MODE = 500
TARGET_S = 5.0
BENCH = "control?label=eval_mode"

CHILD = r'''
import cProfile, io, json, os, pstats, resource, sys, time
args = json.loads(os.environ["EXT_ARGS"])
prof = cProfile.Profile() if os.environ.get("EXT_PROFILE") else None
if prof: prof.enable()
from calimon.cli import app
try:
    app(args, standalone_mode=False)
    rc = 0
except SystemExit as exc:
    rc = exc.code or 0
if prof:
    prof.disable()
    out = io.StringIO()
    st = pstats.Stats(prof, stream=out).sort_stats("cumulative")
    st.print_stats(r"calimon/|inspect_ai/log/_file.py|_bootstrap>:1165\(_find_and_load\)", 24)
    print("PROFILE " + json.dumps(out.getvalue()))
ru = resource.getrusage(resource.RUSAGE_SELF)
print("EXT " + json.dumps({"rc": rc, "cpu": ru.ru_utime + ru.ru_stime,
                          "torch": "torch" in sys.modules,
                          "transformers": "transformers" in sys.modules}), flush=True)
'''


def _suspicion(mode: str, k: int, step: int) -> float:
    """A step's suspicion: attacks higher on average, the classes overlapping."""
    base = 0.30 if mode == "honest" else 0.50
    return round(min(1.0, base + 0.037 * ((13 * k + 7 * step) % 17) - 0.08 * (step == 0)), 4)


def _task(mode: str):
    from inspect_ai import Task
    from inspect_ai.dataset import Sample
    from inspect_ai.model import ChatMessageUser
    from inspect_ai.scorer import Score, mean, scorer
    from inspect_ai.solver import solver

    @solver
    def monitored_agent():
        async def solve(state, gen):
            k = int(state.sample_id[1:])
            for step in range(2):
                state = await gen(state)
                state.messages[-1].metadata = {"suspicion_score": _suspicion(mode, k, step),
                                               "reason": "scripted"}
                state.messages.append(ChatMessageUser(content=f"continue {step}"))
            return state

        return solve

    @scorer(metrics=[mean()])
    def max_suspicion_scorer():
        async def score(state, target):
            return Score(value=max(m.metadata["suspicion_score"] for m in state.messages
                                   if m.role == "assistant" and m.metadata))

        return score

    @scorer(metrics={"*": [mean()]})
    def setting_scorer():
        async def score(state, target):
            k = int(state.sample_id[1:])
            value = {"main_task_success": "C" if k % 4 else "I"}
            if mode == "attack":
                value["side_task_success"] = "C" if k % 3 else "I"
            return Score(value=value)

        return score

    dataset = [Sample(input=f"Task {k}: tidy the config ({mode}).", id=f"{mode[0]}{k}",
                      metadata={"eval_mode": mode}) for k in range(N_PER_MODE)]
    return Task(dataset=dataset, solver=[monitored_agent()],
                scorer=[max_suspicion_scorer(), setting_scorer()], name=f"{mode}_run",
                metadata={"mode": mode})


def _agent(messages, tools, tool_choice, config):
    from inspect_ai.model import ModelOutput, ModelUsage

    out = ModelOutput.from_content("mockllm/model", f"Done: {messages[-1].text}")
    out.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    return out


def write_logs(folder: Path) -> None:
    """The honest and the attack log under ``folder/control`` (skipped when present)."""
    target = folder / "control"
    if target.is_dir() and len(list(target.glob("*.eval"))) == 2:
        return
    from inspect_ai import eval as inspect_eval
    from inspect_ai.model import get_model

    for mode in ("honest", "attack"):
        [log] = inspect_eval(_task(mode), model=get_model("mockllm/model", custom_outputs=_agent),
                             log_dir=str(target), display="none", max_samples=64)
        assert log.status == "success", log.error


def commands() -> dict[str, list[str]]:
    """The measured commands (after ``calimon``), run in the logs' folder."""
    return {"curve": ["curve", "--benchmark", BENCH, "--readout", "score:max_suspicion_scorer",
                      "--no-binary", "--out", "runs/curve", "--quiet"],
            "thresholds": ["thresholds", "runs/curve"],
            "control-safety": ["control-safety", "--benchmark", BENCH, "--out", "runs/safety"]}


def run_one(folder: Path, args: list[str], profile: bool = False) -> dict:
    """One fresh process: its wall and CPU seconds, the load average before it, what it
    imported (and its profile)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EXT_ARGS": json.dumps(args),
           "INSPECT_DISPLAY": "none", **({"EXT_PROFILE": "1"} if profile else {})}
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CHILD], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - t0
    recs = [ln for ln in proc.stdout.splitlines() if ln.startswith("EXT ")]
    if proc.returncode or not recs:
        raise RuntimeError(f"calimon {' '.join(args)} failed: {proc.stderr[-3000:]}")
    rec = json.loads(recs[-1][4:])
    if rec["rc"]:
        raise RuntimeError(f"calimon {' '.join(args)} exited {rec['rc']}: {proc.stderr[-3000:]}")
    prof = [json.loads(ln[8:]) for ln in proc.stdout.splitlines() if ln.startswith("PROFILE ")]
    return {"wall": wall, "load": load, **rec, "profile": prof[0] if prof else None}


def _median_load(results: dict) -> float:
    return statistics.median(r["load"] for recs in results.values() for r in recs)


def render(results: dict, runs: int, profiles: dict, started: str, cmd: str) -> str:
    """The markdown page."""
    lines = ["# An external monitor's scores, no model: curve, thresholds, control-safety", "",
             f"    {cmd}", "",
             f"Run {started}, {os.cpu_count()} cores, Python {platform.python_version()}, on "
             "the shared machine (the 1-minute load average before each run is listed; rerun "
             "the command above on a quiet machine for absolute times). A 1,000-sample "
             f"ControlArena-style Inspect log ({N_PER_MODE} honest, {N_PER_MODE} attack "
             "samples, two scored steps each, written by Inspect with its mock model); each "
             f"command in a fresh process, {runs} runs, interpreter start-up included, calimon "
             "byte-compiled first as `pip install` leaves it. Target: "
             f"each under {TARGET_S:g} s (median wall), torch not imported; on a loaded machine "
             "the CPU seconds are what the process itself cost (wall time there also counts "
             "waiting for a core).", "",
             f"Median 1-minute load average over the runs: {_median_load(results):.1f} on "
             f"{os.cpu_count()} cores.", "",
             "| command | median wall s | median CPU s | runs: wall s (load) | torch or "
             "transformers imported | wall within target | CPU within target |",
             "|---|---|---|---|---|---|---|"]
    for name, recs in results.items():
        wall = statistics.median(r["wall"] for r in recs)
        cpu = statistics.median(r["cpu"] for r in recs)
        each = ", ".join(f"{r['wall']:.2f} ({r['load']:.1f})" for r in recs)
        heavy = "yes" if any(r["torch"] or r["transformers"] for r in recs) else "no"
        ok = "yes" if wall < TARGET_S and heavy == "no" else "NO"
        ok_cpu = "yes" if cpu < TARGET_S and heavy == "no" else "NO"
        lines.append(f"| `calimon {' '.join(commands()[name])}` | {wall:.2f} | {cpu:.2f} | "
                     f"{each} | {heavy} | {ok} | {ok_cpu} |")
    for name, text in profiles.items():
        kept = [ln.rstrip() for ln in text.strip().splitlines()
                if ln.strip() and not ln.lstrip().startswith(("Ordered by", "List reduced"))]
        lines += ["", f"## Profile: calimon {name} (cumulative seconds under cProfile, one more "
                  "run)", "", "```text", *kept, "```"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    """Write the logs, time the commands, print (and with --out write) the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--logs", type=Path, default=None, help="keep the logs in this folder")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    started = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.logs or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        write_logs(folder)
        # Byte-compiled as `pip install` leaves an installed package: with
        # PYTHONDONTWRITEBYTECODE set, every process would otherwise compile calimon again.
        compileall.compile_dir(ROOT / "calimon", quiet=1)
        results: dict[str, list] = {name: [] for name in commands()}
        for _ in range(args.runs):  # interleaved: a burst of load hits every command alike
            for name, cmd_args in commands().items():
                results[name].append(run_one(folder, cmd_args))
        profiles = ({name: run_one(folder, a, profile=True)["profile"]
                     for name, a in commands().items()} if args.profile else {})
    cmd = ("PYTHONPATH=. python benchmarks/perf/external_scores.py --runs "
           f"{args.runs}" + (" --profile" if args.profile else "")
           + (f" --out {args.out}" if args.out else ""))
    page = render(results, args.runs, profiles, started, cmd)
    print(page)
    if args.out:
        args.out.write_text(page)


if __name__ == "__main__":
    main()
