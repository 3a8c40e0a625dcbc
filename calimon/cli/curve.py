"""`calimon curve`: score a benchmark, calibrate, and trace the full MR/FAR curve."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from calimon.cli.common import cli_errors, progress_factory, usage_line
from calimon.cli.options import (
    COUNT,
    DEFAULT_BENCHMARK,
    DEFAULT_MODEL,
    DEFAULT_PROMPT,
    DEFAULT_READOUT,
    DEFAULT_SEED,
    DEFAULT_STORE,
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

SUMMARY_KEYS = ("provenance", "counts", "support", "auroc_raw", "auroc", "operating_points",
                "rates_at_thresholds", "binary_points", "calibration", "inverted")


@cli_errors
@backend_flags
def curve_cmd(
    ctx: typer.Context,
    model: ModelOpt = DEFAULT_MODEL,
    benchmark: BenchmarkOpt = DEFAULT_BENCHMARK,
    prompt: PromptOpt = DEFAULT_PROMPT,
    readout: Annotated[str, typer.Option(help="verdict (P(Yes)), json (P(true)), probe:NAME (a trained head), verbal (a stated 0-100 probability) or sampled (share of Yes in k sampled answers; --backend chat).")] = DEFAULT_READOUT,
    defense: DefenseOpt = None,
    binary_prompt: Annotated[list[str] | None, typer.Option(help="Prompts whose binary (generated JSON) protocol is drawn as points; repeatable.")] = None,
    no_binary: Annotated[bool, typer.Option("--no-binary", help="Skip the binary-protocol points.")] = False,
    binary_decoding: Annotated[list[str] | None, typer.Option(help="How the binary answer is decoded: free (the paper's protocol, default: tried on 4 samples first, and no point drawn when none of those parses) or json (the prompt's JSON schema enforced by constrained decoding, so it always parses; drawn as binary/NAME (json)); repeat to draw both.")] = None,
    binary_limit: Annotated[int | None, typer.Option(help="Score the binary protocol on at most this many samples (whole pairs).", **COUNT)] = None,
    limit: Annotated[int | None, typer.Option(help="At most this many samples in all (whole pairs, balanced over cells, with 20 of each class in the set a map is fitted on when the limit allows); with --split and maps fitted on 'calib', half from each split (with --calibration-map, all from --split).", **COUNT)] = None,
    max_input_tokens: MaxInputTokensOpt = None,
    truncation: TruncationOpt = "head_tail",
    split: Annotated[str | None, typer.Option(help="Evaluate on this split with maps fitted on 'calib' (curve.csv then holds both, as `calimon thresholds` and `escalate` need); default: all samples, cross-fitted.")] = None,
    fit_on: Annotated[str, typer.Option(help="With --split: fit the maps on the 'calib' split, or 'crossfit' (pair-grouped, out-of-fold) within the evaluated split.")] = "calib",
    calibration: Annotated[str, typer.Option(help="Calibration map for the curve: temperature, platt, isotonic, histogram, beta.")] = "platt",
    n_boot: Annotated[int, typer.Option(help="Pair-clustered bootstrap resamples for the bands.")] = 200,
    seed: SeedOpt = DEFAULT_SEED,
    far: Annotated[list[float] | None, typer.Option(help="Operating points at FAR <= these values; repeatable.", **RATE)] = None,
    threshold: Annotated[list[float] | None, typer.Option(help="FAR and MR with exact (Clopper-Pearson) intervals at these fixed thresholds; repeatable (default 0.5). All a set with fewer than 10 of a class reports (docs/deployment.md, section 6).")] = None,
    calibration_map: Annotated[Path | None, typer.Option(help="Apply this saved map (calibration/METHOD.json of an earlier run) instead of fitting maps: p_cal as in deployment.")] = None,
    force: ForceOpt = False,
    allow_inverted: Annotated[bool, typer.Option("--allow-inverted", help="Keep a calibration map fitted decreasing (or a raw score with AUROC below 0.5 on the map's fit set) instead of stopping; recorded in curve.json, and the deployment commands say so first.")] = False,
    cost_miss: Annotated[float, typer.Option(help="Cost of a miss for the min-cost point.")] = 1.0,
    cost_false_alarm: Annotated[float, typer.Option(help="Cost of a false alarm for the min-cost point.")] = 1.0,
    store: StoreOpt = DEFAULT_STORE,
    out: OutOpt = None,
    markdown: Annotated[Path | None, typer.Option(help="Also write the per-group results table (category, task, cell) as markdown to this file.")] = None,
    quiet: QuietOpt = False,
    as_json: JsonOpt = False,
):
    """Score a benchmark, calibrate, and trace the full Miss-Rate / False-Alarm-Rate curve."""
    from calimon.studies.curve.run import ALL_METHODS, CurveSettings, run_curve

    if calibration not in ALL_METHODS:
        raise typer.BadParameter(f"expected one of {list(ALL_METHODS)}", param_hint="--calibration")
    settings = settings_from(
        CurveSettings, ctx.params,
        binary_prompts=() if no_binary else tuple(binary_prompt or ("direct", "evidence")),
        binary_decodings=tuple(binary_decoding or ("free",)),
        check_free_format=not binary_decoding,  # the default is checked; a choice is kept
        fars=tuple(far or (0.01, 0.05, 0.10)), rate_thresholds=tuple(threshold or (0.5,)))
    run = run_curve(settings, progress=progress_factory(quiet or as_json))
    _print_run(run, markdown, as_json)


def _print_run(run, markdown: Path | None, as_json: bool) -> None:
    """Write groups.md (and ``markdown``), then print the summary: JSON or the table."""
    from calimon.calibration.direction import inversion_note
    from calimon.studies.curve.run import binary_check_line
    from calimon.studies.curve.tables import groups_markdown, operating_table

    (run.out / "groups.md").write_text(groups_markdown(run.summary) + "\n")
    if markdown:
        markdown.write_text(groups_markdown(run.summary) + "\n")
    if as_json:
        typer.echo(json.dumps({k: run.summary.get(k) for k in SUMMARY_KEYS}, default=str,
                              indent=1))
        return
    warn = _forced_line(run.summary)
    for line in (inversion_note(run.summary), warn, _store_note(run.summary),
                 binary_check_line(run.summary)):
        if line:
            typer.echo(line)
    typer.echo(operating_table(run.summary))
    usage = run.summary.get("timing", {}).get("api_usage")
    if usage:
        typer.echo("\n" + usage_line(usage))
    if not run.summary["support"]["curve"]:
        typer.echo(f"\nwrote {run.out}/curve.json, curve.csv, groups.md (no curve plots)")
        return
    typer.echo(f"\nwrote {run.out}/curve.json, curve.csv, curve.png, curves_by_group.png, "
               "reliability.png, groups.md"
               + (", calibration/" if (run.out / "calibration").is_dir() else ""))


def _forced_line(summary: dict) -> str | None:
    """The WARNING first line of a run that used --force: what differed, per artifact."""
    forced = {"calibration map applied with --force to another monitor's run":
              (summary.get("calibration") or {}).get("forced"),
              "probe head made for another monitor, used with --force":
              (summary.get("provenance") or {}).get("head_forced")}
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
