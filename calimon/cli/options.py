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
def _number(text: str, kind: type, ok, expected: str):
    try:
        x = kind(text)
    except ValueError:
        x = None
    if x is None or not ok(x):  # NaN fails every comparison
        raise typer.BadParameter(f"expected {expected}, got {text!r}")
    return x


def _rate(text: str) -> float:
    return _number(text, float, lambda x: 0.0 < x < 1.0, "a number strictly between 0 and 1")


def _share(text: str) -> float:
    return _number(text, float, lambda x: 0.0 <= x <= 1.0, "a share between 0 and 1")


def _count(text: str) -> int:
    return _number(text, int, lambda x: x >= 1, "a whole number >= 1")


RATE: dict[str, Any] = {"parser": _rate, "metavar": "RATE"}
SHARE: dict[str, Any] = {"parser": _share, "metavar": "SHARE"}
COUNT: dict[str, Any] = {"parser": _count, "metavar": "N"}

# the help panels every command shares (typer's rich_help_panel), in the order shown
MONITOR, DATA, OUTPUT, BACKEND = "Monitor", "Samples", "Output", "Backend and engine"

# the monitor and the run
ModelOpt = Annotated[str, typer.Option(help="Model config (configs/models) or a local folder.", rich_help_panel=MONITOR)]
BenchmarkOpt = Annotated[str, typer.Option(help="Name (calimon data list), samples .jsonl or Inspect log (docs/inspect.md).", rich_help_panel=DATA)]
PromptOpt = Annotated[str, typer.Option(help="Prompt template (configs/prompts).", rich_help_panel=MONITOR)]
ReadoutOpt = Annotated[str, typer.Option(help="verdict, json, verbal or sampled (README, Readouts).", rich_help_panel=MONITOR)]
LimitOpt = Annotated[int | None, typer.Option(help="At most this many samples (whole pairs, balanced over cells).", rich_help_panel=DATA, **COUNT)]
SeedOpt = Annotated[int, typer.Option(help="Seed of every random choice.", rich_help_panel=DATA)]
SplitOpt = Annotated[str, typer.Option(help="Split to evaluate: train, calib, test, or all.", rich_help_panel=DATA)]
StoreOpt = Annotated[Path, typer.Option(help="SQLite run store (readings reused across runs).", rich_help_panel=OUTPUT)]
OutOpt = Annotated[Path | None, typer.Option(help="Output folder (default: new under runs/).", rich_help_panel=OUTPUT)]
QuietOpt = Annotated[bool, typer.Option("--quiet", help="No progress bars.", rich_help_panel=OUTPUT)]
DefenseOpt = Annotated[list[str] | None, typer.Option(help="spotlight, reminder or strip; repeatable (docs/reliability.md).", rich_help_panel=MONITOR)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of the table.", rich_help_panel=OUTPUT)]
MaxInputTokensOpt = Annotated[int | None, typer.Option(help="Prompt tokens read per transcript (default: the model's limit).", rich_help_panel=MONITOR, **COUNT)]
TruncationOpt = Annotated[str, typer.Option(help="head_tail or window[:max|mean[:OVERLAP]] (docs/backends.md).", rich_help_panel=MONITOR)]

# the backend and the engine: one flag per field of calimon.scoring.engines.BackendSettings, generated
# by `backend_flags` (its default and help text are declared there, once)
ForceOpt = Annotated[bool, typer.Option("--force", help="Use another monitor's head or map anyway (recorded).", rich_help_panel=MONITOR)]


def _flag_parameter(f: Any, annotation: Any) -> inspect.Parameter:
    """The typer parameter of one `BackendSettings` field: ``--name`` with the field's default
    and help (a bool is a plain ``--name`` switch)."""
    names = (f"--{f.name.replace('_', '-')}",) if annotation is bool else ()
    option = typer.Option(*names, help=f.metadata["help"], rich_help_panel=BACKEND)
    return inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default,
                             annotation=Annotated[annotation, option])


def backend_flags(command: Callable | None = None, *,
                  exclude: tuple[str, ...] = ()) -> Callable:
    """Give a scoring command every backend flag, generated from `BackendSettings` (one
    declaration per flag), less those named in ``exclude`` (flags that mean nothing to the
    command: `calimon serve` takes no ``--offline``): the command reads them from
    ``ctx.params`` through `settings_from`, so it declares none of them itself (declaring one
    is refused: every command that scores takes the same set). Used bare (``@backend_flags``)
    or called (``@backend_flags(exclude=...)``)."""
    if command is None:
        return functools.partial(backend_flags, exclude=exclude)
    sig = inspect.signature(command, eval_str=True)
    hints = get_type_hints(BackendSettings)
    unknown = set(exclude) - {f.name for f in fields(BackendSettings)}
    if unknown:
        raise TypeError(f"no backend flag {sorted(unknown)}")
    flags = [_flag_parameter(f, hints[f.name]) for f in fields(BackendSettings)
             if f.name not in exclude]
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
