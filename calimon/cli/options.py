"""The options several commands share, declared once: their flags, help texts and defaults
(`calimon.defaults`). A command declares ``model: ModelOpt = DEFAULT_MODEL``; its settings are
then built from the parsed values by `settings_from` (field names = parameter names), so a
flag added to `RunSettings` is one line here and one parameter per command."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Annotated, Any, get_type_hints

import typer

from calimon.defaults import (
    DEFAULT_BENCHMARK,
    DEFAULT_MODEL,
    DEFAULT_PROMPT,
    DEFAULT_READOUT,
    DEFAULT_SEED,
    DEFAULT_STORE,
)
from calimon.scoring.engines.settings import BackendSettings

__all__ = ["DEFAULT_BENCHMARK", "DEFAULT_MODEL", "DEFAULT_PROMPT", "DEFAULT_READOUT",
           "DEFAULT_SEED", "DEFAULT_STORE", "backend_flags", "settings_from"]

# value ranges, so that a bad value is refused naming its flag before any work: a rate or
# probability strictly inside (0, 1), a share of traffic in [0, 1], a count of samples >= 1
def _rate(text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        x = float("nan")
    if not 0.0 < x < 1.0:  # NaN too
        raise typer.BadParameter(f"expected a number strictly between 0 and 1, got {text!r}")
    return x


RATE: dict[str, Any] = {"parser": _rate, "metavar": "RATE"}
SHARE: dict[str, Any] = {"min": 0.0, "max": 1.0}
COUNT: dict[str, Any] = {"min": 1}

# the monitor and the run
ModelOpt = Annotated[str, typer.Option(help="Model config name (configs/models) or a local folder.")]
BenchmarkOpt = Annotated[str, typer.Option(help="Benchmark name (calimon data list), a samples .jsonl path, or Inspect logs: path.eval or .json, a folder or a pattern of them, options as ?scorer=NAME&positive=VALUE or ?label=eval_mode (ControlArena) (docs/inspect.md).")]
PromptOpt = Annotated[str, typer.Option(help="Prompt template of the monitor (configs/prompts).")]
ReadoutOpt = Annotated[str, typer.Option(help="Confidence readout: verdict (P(Yes)), json (P(true)), verbal (a stated 0-100 probability) or sampled (share of Yes in k sampled answers; --backend chat).")]
LimitOpt = Annotated[int | None, typer.Option(help="At most this many samples (whole pairs, balanced over cells).", **COUNT)]
SeedOpt = Annotated[int, typer.Option(help="Seed of every random choice (selection, folds, bootstrap).")]
SplitOpt = Annotated[str, typer.Option(help="Split to evaluate: train, calib, test, or all (every labelled sample).")]
StoreOpt = Annotated[Path, typer.Option(help="SQLite run store (readings are reused across runs).")]
OutOpt = Annotated[Path | None, typer.Option(help="Output folder (default: a new folder under runs/).")]
QuietOpt = Annotated[bool, typer.Option("--quiet", help="No progress bars.")]
DefenseOpt = Annotated[list[str] | None, typer.Option(help="Prompt defense of a prompted judge, repeatable or comma-separated: spotlight (datamark the transcript), reminder (restate the task after it), strip (neutralise imitated markers and verdicts, recorded); docs/reliability.md.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of the table.")]
MaxInputTokensOpt = Annotated[int | None, typer.Option(help="Read at most this many prompt tokens per transcript (longer ones are cut and flagged truncated); default: the model's own limit. Recorded in curve.json.")]
TruncationOpt = Annotated[str, typer.Option(help="How a transcript over the input limit is read: head_tail (its middle cut out) or window (overlapping windows of the response, each scored, their maximum kept; window:mean averages, window:max:0.5 sets the overlap). Recorded in curve.json.")]

# the backend and the engine: one flag per field of calimon.scoring.engines.BackendSettings, generated
# by `backend_flags` (its default and help text are declared there, once)
ForceOpt = Annotated[bool, typer.Option("--force", help="Use an artifact made for another monitor anyway: a probe head or bundle (--readout probe:NAME) of another model revision, prompt or defense, and in curve a --calibration-map; what differed is recorded (the readings, curve.json).")]


def _flag_parameter(f: Any, annotation: Any) -> inspect.Parameter:
    """The typer parameter of one `BackendSettings` field: ``--name`` with the field's default
    and help (a bool is a plain ``--name`` switch)."""
    names = (f"--{f.name.replace('_', '-')}",) if annotation is bool else ()
    option = typer.Option(*names, help=f.metadata["help"])
    return inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default,
                             annotation=Annotated[annotation, option])


def backend_flags(command: Callable) -> Callable:
    """Give a scoring command every backend flag, generated from `BackendSettings` (one
    declaration per flag): the command reads them from ``ctx.params`` through `settings_from`,
    so it declares none of them itself (declaring one is refused: every command that scores
    takes the same set)."""
    sig = inspect.signature(command, eval_str=True)
    hints = get_type_hints(BackendSettings)
    flags = [_flag_parameter(f, hints[f.name]) for f in fields(BackendSettings)]
    clash = sorted(set(sig.parameters) & {p.name for p in flags})
    if clash:
        raise TypeError(f"{command.__name__} declares backend flags itself: {clash}")

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        for p in flags:
            kwargs.pop(p.name, None)
        return command(*args, **kwargs)

    params = list(sig.parameters.values())
    run.__signature__ = sig.replace(parameters=params + flags)  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in params + flags}
    return run


def settings_from(cls: type, params: dict[str, Any], **values: Any) -> Any:
    """An instance of the settings dataclass ``cls`` from a command's parsed parameters
    (``ctx.params``: every parameter whose name is a field), ``values`` overriding them (for
    flags whose name or type differs from the field's)."""
    names = {f.name for f in fields(cls)}
    unknown = set(values) - names
    if unknown:
        raise TypeError(f"{cls.__name__} has no field {sorted(unknown)}")
    return cls(**{**{k: v for k, v in params.items() if k in names}, **values})
