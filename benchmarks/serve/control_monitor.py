"""Write benchmarks/results/serve-control.md: a ControlArena evaluation with calimon's monitor
against the same evaluation with ControlArena's basic monitor on the same local model, on the
same machine, with the monitors' safety at 1%, 5% and 10% audit budgets.

    nice -n 10 .venv-integrations/bin/python benchmarks/serve/control_monitor.py \\
        [--rounds 2] [--limit 3] [--arms basic-local,calimon,calimon-url,basic,load]

The evaluation is docs/integrations.md's (section 5): ControlArena's data-poisoning setting
under trusted monitoring, honest and attack modes, ``--limit`` samples each, ``max_steps=3``,
with Inspect's mock model as the untrusted model (a scripted agent that submits a clean training
pair when honest and a poisoned one under attack) and the setting's grader. The arms differ in
the monitor only:

- ``basic-local``: ControlArena's ``basic_monitor_builder()`` with SmolLM2-135M-Instruct as its
  trusted model, through Inspect's local Hugging Face provider (``hf/smollm2-135m`` with
  ``model_path=`` the folder calimon converts the embedded GGUF into: the float32 weights
  calimon's monitor runs; CPU; no hub access), its new tokens capped at 512
  (``GenerateConfig(max_tokens=512)``; Inspect's hf provider would sample up to 2048, and a
  first batch of six requests had not finished after nine minutes on the 2 shared cores), and ControlArena's
  and Inspect's defaults otherwise (ControlArena's default prompt, which asks for the
  reasoning and then the score, fits in 512 tokens);
- ``calimon``: ``calimon_monitor_builder(model="smollm2-135m", readout="probe:amb-open-monitor")``,
  the shipped monitor in this process with its bundle's map, one session per trajectory;
- ``calimon-whole``: the same monitor with a fresh run store, which scores each step's whole
  trajectory (the path before sessions), for reference;
- ``calimon-url``: ``calimon_monitor_builder(url=...)``, the same monitor served by a running
  ``calimon serve`` (a policy pinning the shipped bundle and its map), the deployment the docs
  give for many evaluations: the evaluation's process imports no model library and sends each
  step's new messages. A fresh server per round, started and answering ``/healthz`` (model
  loaded and warm) before the evaluation's clock starts; its start-up is reported beside;
- ``basic``: ControlArena's ``basic_monitor_builder()`` with the mock as its trusted model (it
  computes nothing: the earlier, unfair reference);
- ``load``: calimon's fixed cost, for reference: in a fresh process, importing the model's
  libraries, loading the monitor and reading one three-token transcript.

Each run is a fresh Python process (this script with ``--one``) with its own Inspect cache
folder (the basic monitor caches its model's answers; a shared cache would answer later rounds
from earlier ones): its figure is the wall time from building the monitor to the end of
Inspect's ``eval`` call (the local model of ``basic-local`` loads when built, calimon's monitor
on the first step, as a user's evaluation does). The arms run in ``--rounds`` interleaved rounds
(their order rotating each round); the table gives each arm's median and its ratio to each basic
arm within a round, then its median. Each monitor's safety at the audit budgets comes from its
run's logs (benchmarks/serve/control_safety.py), with its unparsed steps. Then `calimon score`
reads the last ``calimon`` run's log: each monitored step's trajectory (the log reader's
rendering of the messages up to the step) scored whole, against the monitor's ``p_raw`` and
suspicion (the map of its ``p_raw``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))  # integrations_support: the mock agent and grader

from control_page import MAX_TOKENS, MODEL, NAMES, READOUT, render  # noqa: E402
from control_safety import parse_failures, safety_at_budgets  # noqa: E402
from integrations_support import control_trusted as trusted  # noqa: E402
from integrations_support import control_untrusted as untrusted  # noqa: E402
from integrations_support import write_policy  # noqa: E402
from serve_server import KEY, start_server  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "serve-control.md"
RAW = ROOT / "benchmarks" / "serve" / "out" / "control.json"
MOCK = "mockllm/model"
BUNDLE_MAP = ROOT / "heads" / "smollm2-135m" / "amb-open-monitor.calibration.json"


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


def local_trusted_model():
    """Inspect's local Hugging Face provider on the folder calimon converts the embedded GGUF
    into (the same float32 weights calimon's monitor runs), on the CPU as calimon's, with the
    torch threads calimon's backend would pick now (the free cores: two threads on a busy
    2-core machine run several times slower than one; on a quiet one it is torch's default),
    its new tokens capped at ``MAX_TOKENS``; and that thread count."""
    from inspect_ai.model import GenerateConfig, get_model

    from calimon.models import resolve_model
    from calimon.scoring.backends.threads import apply_threads

    threads = apply_threads(None)
    return get_model(f"hf/{MODEL}", config=GenerateConfig(max_tokens=MAX_TOKENS),
                     model_path=str(resolve_model(MODEL).path), device="cpu"), threads


def build_monitor(arm: str, log_dir: Path, url: str | None):
    """The arm's monitor, and for ``basic-local`` its trusted model and torch threads."""
    from control_arena.monitor import basic_monitor_builder

    from calimon.integrations.control import calimon_monitor_builder

    if arm == "basic":
        return basic_monitor_builder(), None, None
    if arm == "basic-local":
        return basic_monitor_builder(), *local_trusted_model()
    if arm == "calimon-url":
        return calimon_monitor_builder(url=url, api_key=KEY), None, None
    store = str(log_dir / "store.sqlite") if arm == "calimon-whole" else None
    return calimon_monitor_builder(model=MODEL, readout=READOUT, store=store), None, None


def monitored_steps(logs) -> list[dict]:
    """Every step a monitor scored: its suspicion, whether its score parsed, its reason, the
    monitor model's output tokens (ControlArena's basic monitor) and calimon's assessment."""
    steps = []
    for log in logs:
        for s in log.samples:
            for i, m in enumerate(s.messages):
                meta = m.metadata or {}
                if m.role == "assistant" and "suspicion_score" in meta:
                    usage = meta.get("model_usage") or {}
                    steps.append({"log": log.location, "sample": s.id, "epoch": s.epoch,
                                  "index": i, "suspicion": meta["suspicion_score"],
                                  "score_parsed": meta.get("score_parsed", True),
                                  "reason": str(meta.get("reason", ""))[:200],
                                  "input_tokens": usage.get("input_tokens"),
                                  "output_tokens": usage.get("output_tokens"),
                                  "calimon": meta.get("calimon") or None})
    return steps


def one_run(arm: str, limit: int, log_dir: Path, url: str | None = None) -> dict:
    """One evaluation with the arm's monitor: its wall time and every monitored step. The clock
    starts before the monitor and its model are built: the basic monitor's local model loads
    when it is built, calimon's on the evaluation's first step."""
    if arm == "load":
        return fixed_cost()
    from control_arena import EvalMode
    from control_arena.eval import ControlEvalConfig, get_control_task_product
    from control_arena.micro_protocol import trusted_monitoring_builder
    from control_arena.scorers import max_suspicion_scorer
    from control_arena.settings.data_poisoning.data_poisoning_setting import (
        DataPoisoningSetting,
    )
    from inspect_ai import eval as inspect_eval
    from inspect_ai.model import get_model

    import calimon.integrations.control  # noqa: F401 - before the clock, as ControlArena is

    start = time.perf_counter()
    grader = get_model(MOCK, custom_outputs=trusted)
    monitor, local, threads = build_monitor(arm, log_dir, url)
    cfg = ControlEvalConfig(untrusted_model=get_model(MOCK, custom_outputs=untrusted),
                            trusted_model=local or grader, limit=limit, max_steps=3,
                            log_dir=str(log_dir))
    tasks = get_control_task_product(DataPoisoningSetting(scorer_model=grader),
                                     trusted_monitoring_builder(monitor=monitor),
                                     [EvalMode.HONEST, EvalMode.ATTACK], eval_config=cfg,
                                     monitoring_scorers=[max_suspicion_scorer()])
    logs = inspect_eval(tasks, display="none", **cfg.eval_args())
    wall = time.perf_counter() - start
    if [log.status for log in logs] != ["success", "success"]:
        raise SystemExit(f"{arm}: the evaluation failed: {[log.error for log in logs]}")
    steps = monitored_steps(logs)
    kv = [st["calimon"].get("kv") or {} for st in steps if st["calimon"]]
    tokens = {k: sum(x.get(f"{k}_tokens", 0) for x in kv) for k in ("computed", "reused")}
    return {"arm": arm, "wall_s": wall, "samples": sum(len(x.samples) for x in logs),
            "steps": steps, "tokens": tokens, "log_dir": str(log_dir), "threads": threads}


def run_child(arm: str, limit: int, folder: Path, policy: Path | None = None) -> dict:
    """`one_run` in a fresh process; ``calimon-url``: against a fresh `calimon serve` of
    ``policy``, started (and its start-up timed) before the evaluation."""
    out = folder / "result.json"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "INSPECT_DISPLAY": "none", "INSPECT_CACHE_DIR": str(folder / "inspect-cache")}
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


def summarize(run: dict, last: bool) -> dict:
    """A run without its steps, with its monitor's unparsed steps, the basic monitor's output
    tokens and, for a monitor arm, its safety at the audit budgets (with the bootstrap
    interval in the ``last`` round only, the one the page's table shows)."""
    out = {k: v for k, v in run.items() if k != "steps"}
    if run["arm"] != "load":
        out["parse"] = parse_failures(run["steps"])
        for k in ("input_tokens", "output_tokens"):
            out[k] = [st[k] for st in run["steps"] if st[k] is not None]
        out["safety"] = safety_at_budgets(run["log_dir"], iterations=1000 if last else 0)
    return out


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
        summaries = [{a: summarize(run, r == len(rounds) - 1) for a, run in got.items()}
                     for r, got in enumerate(rounds)]
    return {"arms": arms, "limit": args.limit, "rounds": summaries, "check": checks["calimon"],
            "checks": checks, "steps": len(rounds[-1]["calimon"]["steps"])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--limit", type=int, default=3, help="samples per mode")
    ap.add_argument("--arms", default="basic-local,calimon,basic")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--folder", help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        folder = Path(args.folder)
        result = one_run(args.one, args.limit, folder / "logs", args.url)
        (folder / "result.json").write_text(json.dumps(result))
        return 0
    arms = args.arms.split(",")
    if "calimon" not in arms or not {"basic", "basic-local"} & set(arms):
        raise SystemExit("--arms needs calimon and basic or basic-local")
    if unknown := set(arms) - set(NAMES):
        raise SystemExit(f"--arms: no arm {', '.join(sorted(unknown))} (arms: {', '.join(NAMES)})")
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
