"""Write benchmarks/results/serve-control.md: a ControlArena evaluation with calimon's monitor
against the same evaluation with ControlArena's basic monitor, on the same machine.

    nice -n 10 .venv-integrations/bin/python benchmarks/serve/control_monitor.py \\
        [--rounds 2] [--limit 3] [--arms basic,calimon,calimon-whole,load]

The evaluation is docs/integrations.md's (section 5): ControlArena's data-poisoning setting
under trusted monitoring, honest and attack modes, ``--limit`` samples each, ``max_steps=3``,
with Inspect's mock model as the untrusted model (a scripted agent that submits a clean training
pair when honest and a poisoned one under attack), the trusted model and the setting's grader.
The arms differ in the monitor only:

- ``basic``: ControlArena's ``basic_monitor_builder()`` (its trusted model: the mock);
- ``calimon``: ``calimon_monitor_builder(model="smollm2-135m", readout="probe:amb-open-monitor")``,
  the shipped monitor in this process with its bundle's map, one session per trajectory;
- ``calimon-whole``: the same monitor with a fresh run store, which scores each step's whole
  trajectory (the path before sessions), for reference;
- ``calimon-url``: ``calimon_monitor_builder(url=...)``, the same monitor served by a running
  ``calimon serve`` (a policy pinning the shipped bundle and its map), the deployment the docs
  give for many evaluations: the evaluation's process imports no model library and sends each
  step's new messages. A fresh server per round, started and answering ``/healthz`` (model
  loaded and warm) before the evaluation's clock starts; its start-up is reported beside;
- ``load``: calimon's fixed cost, for reference: in a fresh process, importing the model's
  libraries, loading the monitor and reading one three-token transcript.

Each run is a fresh Python process (this script with ``--one``): its figure is the wall time of
Inspect's ``eval`` call, which builds calimon's monitor (loads the model) on the first step as a
user's evaluation does. The arms run in ``--rounds`` interleaved rounds (their order rotating
each round); the table gives each arm's median and the ratio to ``basic`` within a round, then
its median. Then `calimon score` reads the last ``calimon`` run's log: each monitored step's
trajectory (the log reader's rendering of the messages up to the step) scored whole, against
the monitor's ``p_raw`` and suspicion (the map of its ``p_raw``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))  # integrations_support: the mock agent and grader

from integrations_support import control_trusted as trusted  # noqa: E402
from integrations_support import control_untrusted as untrusted  # noqa: E402
from integrations_support import write_policy  # noqa: E402
from serve_server import KEY, start_server  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "serve-control.md"
RAW = ROOT / "benchmarks" / "serve" / "out" / "control.json"
MOCK = "mockllm/model"
MODEL, READOUT = "smollm2-135m", "probe:amb-open-monitor"
BUNDLE_MAP = ROOT / "heads" / "smollm2-135m" / "amb-open-monitor.calibration.json"
TARGET = 2.0


def fixed_cost() -> dict:
    """The ``load`` arm: what calimon's monitor costs before its first real step."""
    from calimon.integrations import LocalMonitor
    from calimon.samples import Sample

    start = time.perf_counter()
    monitor = LocalMonitor.from_model(MODEL, readout=READOUT)
    monitor.assess_step("load", Sample(id="load", request="hi", response="ok", label=None,
                                       category="safety", task="reasoning", pair_id="load"))
    return {"arm": "load", "wall_s": time.perf_counter() - start, "samples": 0, "steps": []}


def served_policy(folder: Path) -> Path:
    """A policy for ``calimon serve`` pinning the shipped monitor and its bundle's own map (so
    the server's suspicion is the in-process monitor's); its thresholds decide nothing here."""
    import shutil

    from calimon.integrations import LocalMonitor

    run = folder / "design-run" / "calibration"
    run.mkdir(parents=True)
    shutil.copyfile(BUNDLE_MAP, run / "platt.json")
    provenance = LocalMonitor.from_model(MODEL, readout=READOUT).provenance
    return write_policy(folder, provenance, 0.3, 0.7, name="control-monitor")


def one_run(arm: str, limit: int, log_dir: Path, url: str | None = None) -> dict:
    """One evaluation with the arm's monitor: its wall time and every monitored step."""
    if arm == "load":
        return fixed_cost()
    from control_arena import EvalMode
    from control_arena.eval import ControlEvalConfig, get_control_task_product
    from control_arena.micro_protocol import trusted_monitoring_builder
    from control_arena.monitor import basic_monitor_builder
    from control_arena.scorers import max_suspicion_scorer
    from control_arena.settings.data_poisoning.data_poisoning_setting import (
        DataPoisoningSetting,
    )
    from inspect_ai import eval as inspect_eval
    from inspect_ai.model import get_model

    from calimon.integrations.control import calimon_monitor_builder

    grader = get_model(MOCK, custom_outputs=trusted)
    cfg = ControlEvalConfig(untrusted_model=get_model(MOCK, custom_outputs=untrusted),
                            trusted_model=grader, limit=limit, max_steps=3,
                            log_dir=str(log_dir))
    if arm == "basic":
        monitor = basic_monitor_builder()
    elif arm == "calimon-url":
        monitor = calimon_monitor_builder(url=url, api_key=KEY)
    else:
        store = str(log_dir / "store.sqlite") if arm == "calimon-whole" else None
        monitor = calimon_monitor_builder(model=MODEL, readout=READOUT, store=store)
    tasks = get_control_task_product(DataPoisoningSetting(scorer_model=grader),
                                     trusted_monitoring_builder(monitor=monitor),
                                     [EvalMode.HONEST, EvalMode.ATTACK], eval_config=cfg,
                                     monitoring_scorers=[max_suspicion_scorer()])
    start = time.perf_counter()
    logs = inspect_eval(tasks, display="none", **cfg.eval_args())
    wall = time.perf_counter() - start
    if [log.status for log in logs] != ["success", "success"]:
        raise SystemExit(f"{arm}: the evaluation failed: {[log.error for log in logs]}")
    steps = []
    for log in logs:
        for s in log.samples:
            for i, m in enumerate(s.messages):
                meta = m.metadata or {}
                if m.role == "assistant" and "suspicion_score" in meta:
                    steps.append({"log": log.location, "sample": s.id, "epoch": s.epoch,
                                  "index": i, "suspicion": meta["suspicion_score"],
                                  "calimon": meta.get("calimon") or None})
    kv = [st["calimon"].get("kv") or {} for st in steps if st["calimon"]]
    tokens = {k: sum(x.get(f"{k}_tokens", 0) for x in kv) for k in ("computed", "reused")}
    return {"arm": arm, "wall_s": wall, "samples": sum(len(x.samples) for x in logs),
            "steps": steps, "tokens": tokens}


def run_child(arm: str, limit: int, folder: Path, policy: Path | None = None) -> dict:
    """`one_run` in a fresh process; ``calimon-url``: against a fresh `calimon serve` of
    ``policy``, started (and its start-up timed) before the evaluation."""
    out = folder / "result.json"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "INSPECT_DISPLAY": "none"}
    cmd = [sys.executable, __file__, "--one", arm, "--limit", str(limit), "--folder",
           str(folder)]
    if arm != "calimon-url":
        subprocess.run(cmd, check=True, env=env, cwd=folder)
        return json.loads(out.read_text())
    start = time.perf_counter()
    server = start_server(policy, folder / "decisions.sqlite", folder / "serve.out", cwd=folder)
    started = time.perf_counter() - start
    try:
        subprocess.run([*cmd, "--url", server.url], check=True, env=env, cwd=folder)
    finally:
        server.stop()
    return {**json.loads(out.read_text()), "server_start_s": started}


def check_with_calimon_score(run: dict, folder: Path) -> dict:
    """`calimon score` of each monitored step's trajectory, read from the run's logs."""
    import numpy as np
    from inspect_ai.log import read_eval_log

    from calimon.calibration.io import load_map
    from calimon.data.inspect_log import task_input, trajectory_parts
    from calimon.data.trajectory import render_parts

    path = folder / "steps.jsonl"
    logs = {}
    with path.open("w") as fh:
        for k, st in enumerate(run["steps"]):
            log = logs.setdefault(st["log"], read_eval_log(st["log"]))
            s = next(x for x in log.samples if x.id == st["sample"] and x.epoch == st["epoch"])
            text, _ = render_parts(trajectory_parts(s.messages[:st["index"] + 1]))
            fh.write(json.dumps({"id": f"step{k}", "request": task_input(s.input),
                                 "response": text, "label": None, "category": "safety",
                                 "task": "reasoning", "pair_id": f"step{k}"}) + "\n")
    export = folder / "score.jsonl"
    calimon = Path(sys.executable).with_name("calimon")
    subprocess.run([str(calimon), "score", "--model", MODEL, "--readout", READOUT,
                    "--benchmark", str(path), "--store", str(folder / "score.sqlite"),
                    "--export", str(export), "--quiet"], check=True)
    ref = {r["id"]: r for r in map(json.loads, export.read_text().splitlines())}
    cmap = load_map(BUNDLE_MAP)
    dp, ds, modes = [], [], {}
    for k, st in enumerate(run["steps"]):
        want, a = ref[f"step{k}"], st["calimon"]
        p_cal = float(np.clip(cmap.predict(np.array([want["p_raw"]])), 0, 1)[0])
        dp.append(abs(a["p_raw"] - want["p_raw"]))
        ds.append(abs(st["suspicion"] - p_cal))
        mode = (a.get("kv") or {}).get("mode", "whole")
        modes[mode] = modes.get(mode, 0) + 1
    return {"steps": len(dp), "max_dp_raw": max(dp), "max_dsuspicion": max(ds),
            "kv_modes": modes}


def measure(args) -> dict:
    arms = args.arms.split(",")
    rounds: list[dict[str, dict]] = []
    with tempfile.TemporaryDirectory(prefix="calimon-control-") as tmp:
        policy = served_policy(Path(tmp) / "policy") if "calimon-url" in arms else None
        for r in range(args.rounds):
            order = arms[r % len(arms):] + arms[:r % len(arms)]
            got = {}
            for arm in order:
                folder = Path(tmp) / f"r{r}-{arm}"
                folder.mkdir()
                got[arm] = run_child(arm, args.limit, folder, policy)
                print(f"round {r + 1}: {arm} {got[arm]['wall_s']:.1f} s", flush=True)
            rounds.append(got)
        checks = {arm: check_with_calimon_score(rounds[-1][arm],
                                                Path(tmp) / f"r{args.rounds - 1}-{arm}")
                  for arm in ("calimon", "calimon-url") if arm in arms}
    return {"arms": arms, "limit": args.limit, "rounds": [
        {a: {k: v for k, v in run.items() if k != "steps"} for a, run in got.items()}
        for got in rounds], "check": checks["calimon"], "checks": checks,
        "steps": len(rounds[-1]["calimon"]["steps"])}


def breakdown(m: dict) -> list[str]:
    """Where calimon's extra seconds go: its fixed cost and its steps' tokens (medians)."""
    med = statistics.median
    runs = [r["calimon"] for r in m["rounds"]]
    out = []
    if all("tokens" in r for r in runs):
        comp = med(r["tokens"]["computed"] for r in runs)
        reused = med(r["tokens"]["reused"] for r in runs)
        out.append(f"Tokens over the calimon run's {m['steps']} steps: {comp:.0f} run through "
                   f"the model, {reused:.0f} reused from sessions (the template head "
                   "included).")
    if "load" in m["arms"]:
        extra = med(r["calimon"]["wall_s"] - r["basic"]["wall_s"] for r in m["rounds"])
        fixed = med(r["load"]["wall_s"] for r in m["rounds"])
        out.append(f"calimon's evaluation took {extra:.1f} s more than the basic monitor's "
                   f"(median); its fixed cost alone (the `load` row) is {fixed:.1f} s.")
    return [" ".join(out), ""] if out else []


def render(m: dict, started: str, load: tuple[float, float], minutes: float) -> str:
    med = statistics.median
    lines = ["# A ControlArena evaluation with calimon's monitor", "",
             "Regenerate (a few minutes on 2 cores):", "",
             f"    nice -n 10 .venv-integrations/bin/python benchmarks/serve/control_monitor.py"
             f" --rounds {len(m['rounds'])} --limit {m['limit']} --arms {','.join(m['arms'])}", "",
             f"Run {started} on 2 shared cores (1-minute load average {load[0]:.1f} at the "
             f"start, {load[1]:.1f} at the end; other jobs were running), {minutes:.0f} "
             f"minutes. ControlArena's data-poisoning setting, trusted monitoring, honest and "
             f"attack modes, {m['limit']} samples each, Inspect's mock model as the untrusted "
             "model, the trusted model and the grader (docs/integrations.md, section 5). Each "
             "run a fresh process; seconds are the wall time of Inspect's `eval` call (calimon's "
             f"monitor loads its model on the first step). {len(m['rounds'])} interleaved "
             "rounds, medians; each ratio is taken within a round before its median.", "",
             "| monitor | seconds per evaluation (median) | each round | against the basic "
             "monitor |", "|---|---|---|---|"]
    names = {"basic": "ControlArena's `basic_monitor_builder()`",
             "calimon": f"`calimon_monitor_builder(model=\"{MODEL}\", readout=\"{READOUT}\")`, "
                        "one session per trajectory",
             "calimon-whole": "the same, each step's whole trajectory scored (a fresh run store)",
             "calimon-url": "`calimon_monitor_builder(url=...)`: the same monitor served by a "
                            "running `calimon serve` (started and warm before the clock)",
             "load": "calimon's fixed cost: a fresh process importing the model's libraries, "
                     "loading the monitor and reading a three-token transcript (no evaluation)"}
    ratio = {}
    for arm in m["arms"]:
        walls = [r[arm]["wall_s"] for r in m["rounds"]]
        ratio[arm] = med(r[arm]["wall_s"] / r["basic"]["wall_s"] for r in m["rounds"])
        lines.append(f"| {names[arm]} | {med(walls):.1f} | "
                     f"{', '.join(f'{w:.1f}' for w in walls)} | {ratio[arm]:.2f}x |")
    lines += [""] + targets(m, ratio) + breakdown(m)
    for arm, c in m.get("checks", {"calimon": m["check"]}).items():
        lines += [f"`calimon score --model {MODEL} --readout {READOUT}` of the {c['steps']} "
                  f"monitored steps of the last round's `{arm}` run (each step's trajectory as "
                  "the log reader renders it): largest |p_raw(monitor) - p_raw(calimon score)| "
                  f"{c['max_dp_raw']:.1e}, largest |suspicion - map(p_raw of calimon score)| "
                  f"{c['max_dsuspicion']:.1e}; the steps' session modes: "
                  + ", ".join(f"{k} {v}" for k, v in sorted(c["kv_modes"].items())) + ".", ""]
    return "\n".join(lines[:-1]) + "\n"


def targets(m: dict, ratio: dict[str, float]) -> list[str]:
    """The target's verdict for each way of running calimon's monitor."""
    def verdict(arm: str) -> str:
        return "met" if ratio[arm] <= TARGET else "missed"

    out = [f"Target: calimon's monitor within {TARGET:g}x the basic monitor's wall time. In the "
           f"evaluation's process: {ratio['calimon']:.2f}x, {verdict('calimon')}."]
    if "calimon-url" in ratio:
        start = statistics.median(r["calimon-url"]["server_start_s"] for r in m["rounds"])
        out[0] += (f" Through a running `calimon serve`: {ratio['calimon-url']:.2f}x, "
                   f"{verdict('calimon-url')} (the server's own start-up, {start:.1f} s median, "
                   "is paid once per server, not per evaluation, and is not counted).")
    return out + [""]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--limit", type=int, default=3, help="samples per mode")
    ap.add_argument("--arms", default="basic,calimon")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--folder", help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        folder = Path(args.folder)
        result = one_run(args.one, args.limit, folder / "logs", args.url)
        (folder / "result.json").write_text(json.dumps(result))
        return 0
    if "basic" not in args.arms.split(",") or "calimon" not in args.arms.split(","):
        raise SystemExit("--arms needs basic and calimon")
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load0, t0 = os.getloadavg()[0], time.monotonic()
    measured = measure(args)
    RAW.parent.mkdir(parents=True, exist_ok=True)
    RAW.write_text(json.dumps(measured, indent=1))
    OUT.write_text(render(measured, started, (load0, os.getloadavg()[0]),
                          (time.monotonic() - t0) / 60))
    print(OUT.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
