"""The `calimon` command line. Thin: each command calls one library function."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from calimon.cli_backends import (
    BackendOpt,
    BaseUrlOpt,
    BatchTokensOpt,
    ConcurrencyOpt,
    DeviceOpt,
    KvCacheGibOpt,
    ServedModelOpt,
    TopLogprobsOpt,
)
from calimon.cli_common import cli_errors, progress_factory

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Calibrated, span-level LLM misbehavior monitors.")
models_app = typer.Typer(no_args_is_help=True, help="Model configs and their availability.")
app.add_typer(models_app, name="models")


@app.command()
@cli_errors
def curve(
    model: Annotated[str, typer.Option(help="Model config name (configs/models) or a local folder.")] = "smollm2-135m",
    benchmark: Annotated[str, typer.Option(help="Benchmark name (calimon data list) or a samples .jsonl path.")] = "humaneval-pairs",
    prompt: Annotated[str, typer.Option(help="Prompt template for the confidence readout.")] = "direct",
    readout: Annotated[str, typer.Option(help="verdict (P(Yes)), json (P(true)) or probe:NAME (a trained head).")] = "verdict",
    binary_prompt: Annotated[list[str] | None, typer.Option(help="Prompts whose binary (generated JSON) protocol is drawn as points; repeatable.")] = None,
    no_binary: Annotated[bool, typer.Option("--no-binary", help="Skip the binary-protocol points.")] = False,
    binary_limit: Annotated[int | None, typer.Option(help="Score the binary protocol on at most this many samples (whole pairs).")] = None,
    limit: Annotated[int | None, typer.Option(help="At most this many samples in all (whole pairs, balanced over cells); with --split and maps fitted on 'calib', half from each split.")] = None,
    split: Annotated[str | None, typer.Option(help="Evaluate on this split with maps fitted on 'calib' (curve.csv then holds both, as `calimon thresholds` and `escalate` need); default: all samples, cross-fitted.")] = None,
    fit_on: Annotated[str, typer.Option(help="With --split: fit the maps on the 'calib' split, or 'crossfit' (pair-grouped, out-of-fold) within the evaluated split.")] = "calib",
    calibration: Annotated[str, typer.Option(help="Calibration map for the curve: temperature, platt, isotonic, histogram, beta.")] = "platt",
    n_boot: Annotated[int, typer.Option(help="Pair-clustered bootstrap resamples for the bands.")] = 200,
    seed: Annotated[int, typer.Option(help="Seed for selection, folds and bootstrap.")] = 0,
    far: Annotated[list[float] | None, typer.Option(help="Operating points at FAR <= these values; repeatable.")] = None,
    threshold: Annotated[list[float] | None, typer.Option(help="FAR and MR with exact (Clopper-Pearson) intervals at these fixed thresholds; repeatable (default 0.5). All a set with fewer than 10 of a class reports (docs/deployment.md, section 6).")] = None,
    calibration_map: Annotated[Path | None, typer.Option(help="Apply this saved map (calibration/METHOD.json of an earlier run) instead of fitting maps: p_cal as in deployment.")] = None,
    cost_miss: Annotated[float, typer.Option(help="Cost of a miss for the min-cost point.")] = 1.0,
    cost_false_alarm: Annotated[float, typer.Option(help="Cost of a false alarm for the min-cost point.")] = 1.0,
    backend: BackendOpt = "transformers",
    base_url: BaseUrlOpt = None,
    served_model: ServedModelOpt = None,
    top_logprobs: TopLogprobsOpt = None,
    concurrency: ConcurrencyOpt = 8,
    kv_cache_gib: KvCacheGibOpt = None,
    device: DeviceOpt = "auto",
    batch_tokens: BatchTokensOpt = 8192,
    store: Annotated[Path, typer.Option(help="SQLite run store (readings are reused across runs).")] = Path("runs/store.sqlite"),
    out: Annotated[Path | None, typer.Option(help="Output folder (default: a new folder under runs/).")] = None,
    markdown: Annotated[Path | None, typer.Option(help="Also write the per-group results table (category, task, cell) as markdown to this file.")] = None,
    quiet: Annotated[bool, typer.Option(help="No progress bars.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
):
    """Score a benchmark, calibrate, and trace the full Miss-Rate / False-Alarm-Rate curve."""
    from calimon.pipeline import ALL_METHODS, CurveSettings, run_curve
    from calimon.tables import groups_markdown, operating_table

    if calibration not in ALL_METHODS:
        raise typer.BadParameter(f"expected one of {list(ALL_METHODS)}", param_hint="--calibration")
    settings = CurveSettings(
        model=model, benchmark=benchmark, prompt=prompt, readout=readout,
        binary_prompts=() if no_binary else tuple(binary_prompt or ("direct", "evidence")),
        binary_limit=binary_limit, limit=limit, split=split, fit_on=fit_on,
        calibration=calibration,
        n_boot=n_boot, seed=seed, fars=tuple(far or (0.01, 0.05, 0.10)),
        rate_thresholds=tuple(threshold or (0.5,)), calibration_map=calibration_map,
        cost_miss=cost_miss,
        cost_false_alarm=cost_false_alarm, backend=backend, device=device,
        batch_tokens=batch_tokens, base_url=base_url, served_model=served_model,
        top_logprobs=top_logprobs, concurrency=concurrency, kv_cache_gib=kv_cache_gib,
        store=store, out=out)
    run = run_curve(settings, progress=progress_factory(quiet or as_json))
    (run.out / "groups.md").write_text(groups_markdown(run.summary) + "\n")
    if markdown:
        markdown.write_text(groups_markdown(run.summary) + "\n")
    if as_json:
        typer.echo(json.dumps({k: run.summary[k] for k in (
            "provenance", "counts", "support", "auroc_raw", "auroc", "operating_points",
            "rates_at_thresholds", "binary_points", "calibration")}, default=str, indent=1))
        return
    typer.echo(operating_table(run.summary))
    if not run.summary["support"]["curve"]:
        typer.echo(f"\nwrote {run.out}/curve.json, curve.csv, groups.md (no curve plots)")
        return
    typer.echo(f"\nwrote {run.out}/curve.json, curve.csv, curve.png, curves_by_group.png, "
               "reliability.png, groups.md"
               + (", calibration/" if (run.out / "calibration").is_dir() else ""))


@models_app.command("list")
@cli_errors
def models_list(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False):
    """Configured models and whether their weights are on this machine."""
    from calimon.model_listing import list_models

    rows = list_models()
    if as_json:
        typer.echo(json.dumps(rows, indent=1))
        return
    for r in rows:
        typer.echo(f"{r['name']:<24} {r['status']:<12} {r['detail']}")


@cli_errors
def import_amb_cmd(
    path: Annotated[Path, typer.Argument(help="The official AutoMonitor-Bench file (JSON or JSONL).")],
    out: Annotated[Path, typer.Option(help="Where to write calimon samples JSONL.")],
    config: Annotated[Path | None, typer.Option(help="Field-mapping YAML (default configs/adapters/automonitor-bench.yaml).")] = None,
):
    """Convert the official AutoMonitor-Bench release into calimon samples through a field map."""
    from calimon.data.automonitor import import_amb

    written = import_amb(path, config, out)
    typer.echo(f"wrote {written}")


def _mount_areas() -> None:
    """Commands that live in their area's module."""
    from calimon import (
        cli_backends,
        cli_data,
        cli_deploy,
        cli_heads,
        cli_report,
        cli_robustness,
        cli_shift,
        cli_spans,
    )

    cli_data.app.command("import-amb")(import_amb_cmd)
    app.add_typer(cli_data.app, name="data")
    for area in (cli_backends, cli_spans, cli_report, cli_heads, cli_robustness, cli_shift):
        area.register(app)
    app.command("thresholds")(cli_deploy.thresholds_cmd)
    app.command("escalate")(cli_deploy.escalate_cmd)
    app.command("apply-policy")(cli_deploy.apply_policy_cmd)


_mount_areas()


def main() -> None:  # pragma: no cover - console entry point
    app()
