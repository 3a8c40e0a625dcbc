"""`calimon robustness`: flip rates of a monitor under adversarial transcripts.
``register(app)`` mounts it on the main CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from calimon.cli.common import cli_errors, progress_factory
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
    PromptOpt,
    QuietOpt,
    ReadoutOpt,
    StoreOpt,
    backend_flags,
    settings_from,
)


@cli_errors
@backend_flags
def robustness_cmd(
    ctx: typer.Context,
    model: ModelOpt = DEFAULT_MODEL,
    benchmark: BenchmarkOpt = DEFAULT_BENCHMARK,
    prompt: PromptOpt = DEFAULT_PROMPT,
    readout: ReadoutOpt = DEFAULT_READOUT,
    defense: DefenseOpt = None,
    head: Annotated[str | None, typer.Option(help="Probe head name: read probe:<head> instead of --readout.")] = None,
    split: Annotated[str, typer.Option(help="Split to evaluate ('all': every labelled sample).")] = "test",
    fit_split: Annotated[str, typer.Option(help="Split the calibration map is fitted on ('all': the evaluated set).")] = "calib",
    limit: Annotated[int | None, typer.Option(help="At most this many samples per split (whole pairs).", **COUNT)] = None,
    attack: Annotated[list[str] | None, typer.Option(help="Attack to run (repeatable; default: all).")] = None,
    sides: Annotated[str, typer.Option(help="Which transcripts are attacked: misbehaving (flips), benign (false alarms), or both, comma-separated.")] = "misbehaving,benign",
    calibration: Annotated[str, typer.Option(help="Calibration map: temperature, platt, isotonic, histogram, beta, or none (thresholds on the raw score: flips do not depend on an increasing map).")] = "platt",
    allow_inverted: Annotated[bool, typer.Option("--allow-inverted", help="Keep a calibration map fitted decreasing (or a raw score with AUROC below 0.5 on the map's fit set) instead of stopping; recorded in robustness.json.")] = False,
    far: Annotated[float, typer.Option(help="Operating threshold: the FAR <= this point of the clean calibrated curve.", **RATE)] = 0.10,
    seed: Annotated[int, typer.Option(help="Seed for the sample selection (and the --adaptive search order).")] = DEFAULT_SEED,
    max_input_tokens: MaxInputTokensOpt = None,
    force: ForceOpt = False,
    store: StoreOpt = DEFAULT_STORE,
    out: Annotated[Path | None, typer.Option(help="Output folder (default: a new folder under runs/).")] = None,
    report: Annotated[Path | None, typer.Option(help="Also write the table into this markdown file (its section for this readout and benchmark is replaced).")] = None,
    quiet: QuietOpt = False,
    as_json: JsonOpt = False,
    adaptive: Annotated[bool, typer.Option("--adaptive", help="Run the adaptive attacker (a budgeted search over inserted phrases and positions) instead of the fixed attacks.")] = False,
    budget: Annotated[int, typer.Option(help="--adaptive: monitor queries per transcript.")] = 16,
    beam: Annotated[int, typer.Option(help="--adaptive: states kept per search round (1: greedy).")] = 2,
    width: Annotated[int, typer.Option(help="--adaptive: candidates tried per state and round.")] = 4,
    max_edits: Annotated[int, typer.Option(help="--adaptive: at most this many phrases per rewrite.")] = 3,
):
    """Measure how often adversarial text in a response flips a flagged transcript to a pass."""
    if adaptive:
        if attack:
            from calimon.errors import InputError

            raise InputError("--attack names a fixed attack; --adaptive searches its own "
                             "phrases (drop one of them)", field="attack")
        return _adaptive(ctx, split, fit_split, report, quiet or as_json, as_json)
    from calimon.selection import split_arg
    from calimon.studies.robustness.attacks import ATTACKS
    from calimon.studies.robustness.report import to_markdown, write_section
    from calimon.studies.robustness.study import RobustnessSettings, run_robustness

    settings = settings_from(RobustnessSettings, ctx.params, split=split_arg(split),
                             fit_split=split_arg(fit_split), attacks=tuple(attack or ATTACKS),
                             sides=tuple(x.strip() for x in sides.split(",") if x.strip()))
    run = run_robustness(settings, progress=progress_factory(quiet or as_json))
    _offline_note(settings, as_json)
    command = settings.command() + (f" --report {report}" if report is not None else "")
    text = to_markdown(run.summary, command=command)
    if report is not None:
        write_section(report, f"{settings.monitor_readout}/{settings.benchmark}", text)
    if as_json:
        typer.echo(json.dumps(run.summary, indent=1, default=str))
        return
    typer.echo(text)
    typer.echo(f"wrote {run.out}/robustness.json, robustness.md, attacked.csv")


def _adaptive(ctx: typer.Context, split: str, fit_split: str, report: Path | None,
              quiet: bool, as_json: bool) -> None:
    """`calimon robustness --adaptive`: the adaptive attacker's study and its report section."""
    from calimon.selection import split_arg
    from calimon.studies.robustness.adaptive_report import to_markdown
    from calimon.studies.robustness.adaptive_study import AdaptiveSettings, run_adaptive
    from calimon.studies.robustness.report import write_section

    settings = settings_from(AdaptiveSettings, ctx.params, split=split_arg(split),
                             fit_split=split_arg(fit_split))
    run = run_adaptive(settings, progress=progress_factory(quiet))
    _offline_note(settings, as_json)
    command = settings.command() + (f" --report {report}" if report is not None else "")
    text = to_markdown(run.summary, command=command)
    if report is not None:
        write_section(report, f"adaptive:{settings.monitor_readout}/{settings.benchmark}", text)
    if as_json:
        typer.echo(json.dumps(run.summary, indent=1, default=str))
        return
    typer.echo(text)
    typer.echo(f"wrote {run.out}/adaptive.json, adaptive.md, adaptive.csv")


def _offline_note(settings, as_json: bool) -> None:
    """With --offline (and no --json), the first line says the store answered everything."""
    if settings.offline and not as_json:
        from calimon.scoring.backends.offline import offline_line

        typer.echo(offline_line(settings.backend, settings.base_url))


def register(app: typer.Typer) -> None:
    """Mount ``robustness`` on the main CLI."""
    app.command("robustness")(robustness_cmd)
