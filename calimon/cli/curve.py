"""`calimon curve`: score a benchmark, calibrate, and trace the full MR/FAR curve."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from calimon.cli.common import cli_errors, progress_factory, usage_line
from calimon.cli.options import (
    COUNT,
    DATA,
    DEFAULT_BENCHMARK,
    DEFAULT_MODEL,
    DEFAULT_PROMPT,
    DEFAULT_READOUT,
    DEFAULT_SEED,
    DEFAULT_STORE,
    MONITOR,
    OUTPUT,
    RATE,
    BenchmarkOpt,
    DefenseOpt,
    ForceOpt,
    JsonOpt,
    MaxInputTokensOpt,
    ModelOpt,
    OutOpt,
    PromptOpt,
    QuietOpt,
    SeedOpt,
    StoreOpt,
    TruncationOpt,
    backend_flags,
    settings_from,
)

CURVE, BINARY = "Calibration and curve", "Binary protocol"
SUMMARY_KEYS = ("provenance", "counts", "support", "auroc_raw", "auroc", "operating_points",
                "rates_at_thresholds", "binary_points", "calibration", "inverted")


@cli_errors
@backend_flags
def curve_cmd(
    ctx: typer.Context,
    model: ModelOpt = DEFAULT_MODEL,
    benchmark: BenchmarkOpt = DEFAULT_BENCHMARK,
    prompt: PromptOpt = DEFAULT_PROMPT,
    readout: Annotated[str, typer.Option(help="verdict, json, probe:NAME, verbal, sampled, or score:NAME for scores the data holds (README, Readouts).", rich_help_panel=MONITOR)] = DEFAULT_READOUT,
    defense: DefenseOpt = None,
    binary_prompt: Annotated[list[str] | None, typer.Option(help="Prompts drawn as binary points (repeatable; default direct, evidence).", rich_help_panel=BINARY)] = None,
    no_binary: Annotated[bool, typer.Option("--no-binary", help="Skip the binary-protocol points.", rich_help_panel=BINARY)] = False,
    binary_decoding: Annotated[list[str] | None, typer.Option(help="free (the paper's protocol; default) or json (schema-constrained); repeatable.", rich_help_panel=BINARY)] = None,
    binary_limit: Annotated[int | None, typer.Option(help="Binary protocol on at most N samples.", rich_help_panel=BINARY, **COUNT)] = None,
    binary_score: Annotated[list[str] | None, typer.Option(help="With score:NAME: a boolean the data holds, drawn as a binary point (repeatable).", rich_help_panel=BINARY)] = None,
    limit: Annotated[int | None, typer.Option(help="At most N samples in all (whole pairs, balanced over cells).", rich_help_panel=DATA, **COUNT)] = None,
    max_input_tokens: MaxInputTokensOpt = None,
    truncation: TruncationOpt = "head_tail",
    split: Annotated[str | None, typer.Option(help="Judge on this split, maps fitted on 'calib' (default: all, cross-fitted).", rich_help_panel=DATA)] = None,
    fit_on: Annotated[str, typer.Option(help="With --split: maps fitted on 'calib' or 'crossfit' (within it).", rich_help_panel=CURVE)] = "calib",
    calibration: Annotated[str, typer.Option(help="temperature, platt, isotonic, histogram or beta.", rich_help_panel=CURVE)] = "platt",
    n_boot: Annotated[int, typer.Option(help="Bootstrap resamples for the bands.", rich_help_panel=CURVE)] = 200,
    seed: SeedOpt = DEFAULT_SEED,
    far: Annotated[list[float] | None, typer.Option(help="Operating points at FAR <= these (default 0.01, 0.05, 0.1).", rich_help_panel=CURVE, **RATE)] = None,
    threshold: Annotated[list[float] | None, typer.Option(help="Exact FAR and MR at these thresholds (default 0.5).", rich_help_panel=CURVE)] = None,
    calibration_map: Annotated[Path | None, typer.Option(help="Apply this saved map (fit none).", rich_help_panel=CURVE)] = None,
    force: ForceOpt = False,
    allow_inverted: Annotated[bool, typer.Option("--allow-inverted", help="Keep a map fitted decreasing (recorded).", rich_help_panel=CURVE)] = False,
    cost_miss: Annotated[float, typer.Option(help="Cost of a miss (the min-cost point).", rich_help_panel=CURVE)] = 1.0,
    cost_false_alarm: Annotated[float, typer.Option(help="Cost of a false alarm.", rich_help_panel=CURVE)] = 1.0,
    store: StoreOpt = DEFAULT_STORE,
    out: OutOpt = None,
    markdown: Annotated[Path | None, typer.Option(help="Also write the per-group table as markdown here.", rich_help_panel=OUTPUT)] = None,
    quiet: QuietOpt = False,
    as_json: JsonOpt = False,
):
    """Score a benchmark, calibrate, and trace the full Miss-Rate / False-Alarm-Rate curve.

    --split writes both splits to curve.csv, as `calimon thresholds` and `escalate` need;
    --limit details and small sets: README, Usage.
    """
    from calimon.studies.curve.run import ALL_METHODS, CurveSettings, run_curve

    if calibration not in ALL_METHODS:
        raise typer.BadParameter(f"expected one of {list(ALL_METHODS)}", param_hint="--calibration")
    from calimon.score_readout import is_score_readout

    default_prompts = () if is_score_readout(readout) else ("direct", "evidence")
    settings = settings_from(
        CurveSettings, ctx.params,
        binary_prompts=() if no_binary else tuple(binary_prompt or default_prompts),
        binary_scores=() if no_binary else tuple(binary_score or ()),
        binary_decodings=tuple(binary_decoding or ("free",)),
        check_free_format=not binary_decoding,  # the default is checked; a choice is kept
        fars=tuple(far or (0.01, 0.05, 0.10)), rate_thresholds=tuple(threshold or (0.5,)))
    run = run_curve(settings, progress=progress_factory(quiet or as_json))
    _print_run(run, markdown, as_json)


def _print_run(run, markdown: Path | None, as_json: bool) -> None:
    """Write groups.md (and ``markdown``), then print the summary: JSON or the table, read
    from the run's typed result."""
    from calimon.calibration.direction import inversion_note
    from calimon.studies.curve.run import binary_check_line
    from calimon.studies.curve.tables import groups_markdown, operating_table

    result = run.result
    (run.out / "groups.md").write_text(groups_markdown(result) + "\n")
    if markdown:
        markdown.write_text(groups_markdown(result) + "\n")
    if as_json:
        typer.echo(json.dumps({k: run.summary.get(k) for k in SUMMARY_KEYS}, default=str,
                              indent=1))
        return
    for line in (inversion_note(run.summary), _forced_line(result), _store_note(run.summary),
                 binary_check_line(run.summary)):
        if line:
            typer.echo(line)
    typer.echo(operating_table(result))
    usage = result.timing.api_usage if result.timing else None
    if usage:
        typer.echo("\n" + usage_line(usage))
    if not result.has_curve:
        typer.echo(f"\nwrote {run.out}/curve.json, curve.csv, groups.md (no curve plots)")
        return
    typer.echo(f"\nwrote {run.out}/curve.json, curve.csv, curve.png, curves_by_group.png, "
               "reliability.png, groups.md"
               + (", calibration/" if (run.out / "calibration").is_dir() else ""))


def _forced_line(result) -> str | None:
    """The WARNING first line of a run that used --force: what differed, per artifact."""
    forced = {"calibration map applied with --force to another monitor's run":
              result.calibration.forced if result.calibration else None,
              "probe head made for another monitor, used with --force":
              result.provenance.head_forced}
    parts = [f"{what}: " + "; ".join(found) for what, found in forced.items() if found]
    return ("WARNING: " + " | ".join(parts)) if parts else None


def _store_note(summary: dict) -> str | None:
    """What the store answered: with --offline, that it answered everything (the model and
    any server left alone), else `store_line`'s count of the readings reused."""
    from calimon.studies.curve.run import store_line

    settings, timing = summary.get("settings") or {}, summary.get("timing") or {}
    if settings.get("offline"):
        from calimon.scoring.backends.offline import offline_line

        return offline_line(settings["backend"], settings.get("base_url"), timing.get("readings"))
    return store_line(timing)


def register(app: typer.Typer) -> None:
    """Mount ``curve`` on the main CLI."""
    app.command("curve")(curve_cmd)
