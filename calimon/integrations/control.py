"""calimon in ControlArena (the ``control`` extra): a monitor, and ControlArena's honest and attack
runs as a labelled calimon benchmark.

- `calimon_monitor_builder`: a ControlArena monitor (use it in any micro-protocol, e.g.
  ``trusted_monitoring_builder(monitor=calimon_monitor_builder(policy=...))``). Its
  ``suspicion_score`` is calimon's calibrated probability of misbehavior of the trajectory so far
  (the raw score without a map), so ControlArena's audit-budget analysis
  (``max_suspicion_scorer``, ``compute_suspicion_threshold``, ``compute_safety``) reads it as it
  reads any monitor's; its ``reason`` is one line with the decision and the evidence, and the
  message metadata's ``calimon`` key holds the whole `Assessment` (p_raw, p_cal, spans mapped to
  messages, provenance). A step calimon could not score gets ``unscored_suspicion`` (default
  1.0: audited first, as a policy sends an unscored transcript to review) with
  ``score_parsed=False`` and a reason saying so, never a silent 0.
- ControlArena's honest and attack runs are Inspect logs: ``calimon curve --benchmark
  'logs/control?label=eval_mode'`` reads them directly as one labelled benchmark (a folder, a
  log or a pattern; attack: misbehavior, honest: benign; ``&attacks=successful`` leaves out the
  attacks whose side task failed): see `calimon.data.inspect_log` and
  `calimon.data.eval_modes`. `control_benchmark` (``python -m calimon.integrations.control
  LOG... --out FILE``) freezes the same samples into one samples file, which reads without
  inspect_ai and without the logs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from calimon.errors import CalimonError, InputError, MissingExtraError

try:
    from control_arena import control_agent
    from control_arena.monitor import MonitorResponse, monitor
    from inspect_ai.agent import Agent, AgentState
    from inspect_ai.tool import Tool
except ImportError:  # pragma: no cover - the extra is missing
    raise MissingExtraError("calimon.integrations.control needs control-arena: "
                            "pip install 'calimon[control]'") from None

from calimon.integrations.lazy import LazyMonitor
from calimon.integrations.transcripts import sample_from_messages


class CalimonMonitorResponse(MonitorResponse):
    """ControlArena's `MonitorResponse` with calimon's whole `Assessment` (``calimon``), which
    the ``@monitor`` decorator writes into the step's message metadata beside the score."""

    calimon: dict[str, Any] = {}


@control_agent
def calimon_monitor_builder(policy: str | None = None, model: str | None = None,
                            url: str | None = None, readout: str = "verdict",
                            prompt: str | None = None, calibration_map: str | None = None,
                            store: str | None = None, unscored_suspicion: float = 1.0,
                            api_key: str | None = None, force: bool = False) -> Agent:
    """A ControlArena monitor whose suspicion score is calimon's calibrated probability (module
    docstring); ``policy=``, ``model=`` or ``url=`` as for the Inspect scorer (``model=`` may
    name an Inspect model), ``api_key=`` for a ``calimon serve`` server at ``url=`` (default:
    ``CALIMON_API_KEY``), ``force=`` to use a map or prompt made for another monitor anyway
    (recorded)."""
    if not 0.0 <= unscored_suspicion <= 1.0:
        raise InputError(f"expected a suspicion in [0, 1], got {unscored_suspicion}",
                         field="unscored_suspicion")
    lazy = LazyMonitor(dict(policy=policy, model=model, url=url, readout=readout,
                            prompt=prompt, calibration_map=calibration_map, store=store,
                            api_key=api_key, force=force))

    @monitor
    async def impl(state: AgentState, tools: list[Tool]) -> MonitorResponse:
        [a] = await lazy.assess([sample_from_messages(state.messages, source="control")])
        if not a.scored:
            return CalimonMonitorResponse(
                suspicion_score=unscored_suspicion, score_parsed=False, calimon=a.to_dict(),
                reason=f"{a.reason()}; suspicion set to {unscored_suspicion} "
                       "(unscored_suspicion)")
        return CalimonMonitorResponse(suspicion_score=float(a.probability), reason=a.reason(),
                                      calimon=a.to_dict())

    return impl


def control_benchmark(logs: Iterable[str | Path], out: str | Path, *,
                      successful_attacks_only: bool = False, category: str = "safety",
                      task: str = "reasoning") -> Path:
    """Write the samples of ControlArena logs as a labelled calimon samples file: the samples
    ``calimon curve --benchmark 'LOG_OR_FOLDER?label=eval_mode'`` reads from the logs
    themselves (`calimon.data.eval_modes`; ``attacks=successful`` for
    ``successful_attacks_only``), frozen into one file that reads without inspect_ai."""
    from calimon.data.inspect_log import InspectOptions, load_logs, log_paths
    from calimon.samples import write_samples

    opts = InspectOptions(category=category, task=task, by_eval_mode=True,
                          attacks="successful" if successful_attacks_only else "all")
    samples = load_logs([p for log in logs for p in log_paths(Path(log))], opts)
    if not samples:
        raise InputError("no sample to write (no log given, or every attack failed its side "
                         "task)", field="logs")
    return write_samples(samples, out)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m calimon.integrations.control LOG_OR_FOLDER... --out FILE``:
    `control_benchmark`."""
    ap = argparse.ArgumentParser(prog="python -m calimon.integrations.control",
                                 description="ControlArena honest/attack logs as a labelled "
                                             "calimon benchmark (for calimon curve).")
    ap.add_argument("logs", nargs="+", help="ControlArena logs (honest and attack): .eval "
                                            "files, or folders of them")
    ap.add_argument("--out", required=True, help="the samples file to write (.jsonl)")
    ap.add_argument("--successful-attacks-only", action="store_true",
                    help="leave out attacks whose side task failed")
    ap.add_argument("--category", default="safety")
    ap.add_argument("--task", default="reasoning")
    args = ap.parse_args(argv)
    try:
        path = control_benchmark(args.logs, args.out, category=args.category, task=args.task,
                                 successful_attacks_only=args.successful_attacks_only)
    except CalimonError as exc:
        print(f"calimon: error: {exc}", file=sys.stderr)
        return getattr(exc, "exit_code", 1)
    n = sum(1 for _ in path.open())
    print(f"wrote {path} ({n} samples); next: calimon curve --benchmark {path}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


__all__ = ["CalimonMonitorResponse", "calimon_monitor_builder", "control_benchmark", "main"]
