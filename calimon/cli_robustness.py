"""`calimon robustness`: flip rates of a monitor under adversarial transcripts.

Mounted by the main CLI through ``register(app)``; ``python -m calimon.cli_robustness`` runs it
alone.
"""

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
    EngineOpt,
    KvCacheGibOpt,
    RayAddressOpt,
    ServedModelOpt,
    ThreadsOpt,
    TopLogprobsOpt,
    WorkersOpt,
)
from calimon.cli_common import cli_errors, progress_factory
from calimon.selection import split_arg


@cli_errors
def robustness_cmd(
    model: Annotated[str, typer.Option(help="Model config name (configs/models) or a local folder.")] = "smollm2-135m",
    benchmark: Annotated[str, typer.Option(help="Benchmark name or a samples .jsonl path.")] = "humaneval-pairs",
    prompt: Annotated[str, typer.Option(help="Prompt template.")] = "direct",
    readout: Annotated[str, typer.Option(help="verdict (P(Yes)) or json (P(true)).")] = "verdict",
    head: Annotated[str | None, typer.Option(help="Probe head name: read probe:<head> instead of --readout.")] = None,
    split: Annotated[str, typer.Option(help="Split to evaluate ('all': every labelled sample).")] = "test",
    fit_split: Annotated[str, typer.Option(help="Split the calibration map is fitted on ('all': the evaluated set).")] = "calib",
    limit: Annotated[int | None, typer.Option(help="At most this many samples per split (whole pairs).")] = None,
    attack: Annotated[list[str] | None, typer.Option(help="Attack to run (repeatable; default: all).")] = None,
    calibration: Annotated[str, typer.Option(help="Calibration map: temperature, platt, isotonic, histogram, beta.")] = "platt",
    far: Annotated[float, typer.Option(help="Operating threshold: the FAR <= this point of the clean calibrated curve.")] = 0.10,
    seed: Annotated[int, typer.Option(help="Seed for the sample selection.")] = 0,
    backend: BackendOpt = "transformers",
    engine: EngineOpt = "local",
    ray_address: RayAddressOpt = None,
    workers: WorkersOpt = None,
    base_url: BaseUrlOpt = None,
    served_model: ServedModelOpt = None,
    top_logprobs: TopLogprobsOpt = None,
    concurrency: ConcurrencyOpt = 8,
    kv_cache_gib: KvCacheGibOpt = None,
    device: DeviceOpt = "auto",
    batch_tokens: BatchTokensOpt = 8192,
    threads: ThreadsOpt = None,
    store: Annotated[Path, typer.Option(help="SQLite run store (readings are reused across runs).")] = Path("runs/store.sqlite"),
    out: Annotated[Path | None, typer.Option(help="Output folder (default: a new folder under runs/).")] = None,
    report: Annotated[Path | None, typer.Option(help="Also write the table into this markdown file (its section for this readout and benchmark is replaced).")] = None,
    quiet: Annotated[bool, typer.Option(help="No progress bars.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
):
    """Measure how often adversarial text in a response flips a flagged transcript to a pass."""
    from calimon.robustness.attacks import ATTACKS
    from calimon.robustness.report import to_markdown, write_section
    from calimon.robustness.study import RobustnessSettings, run_robustness

    settings = RobustnessSettings(
        model=model, benchmark=benchmark, prompt=prompt, readout=readout, head=head,
        split=split_arg(split), fit_split=split_arg(fit_split), limit=limit,
        attacks=tuple(attack or ATTACKS), calibration=calibration, far=far, seed=seed,
        store=store, out=out, backend=backend, engine=engine, ray_address=ray_address,
        workers=workers, base_url=base_url, served_model=served_model,
        top_logprobs=top_logprobs, concurrency=concurrency, kv_cache_gib=kv_cache_gib,
        device=device, batch_tokens=batch_tokens, threads=threads)
    run = run_robustness(settings, progress=progress_factory(quiet or as_json))
    command = settings.command() + (f" --report {report}" if report is not None else "")
    text = to_markdown(run.summary, command=command)
    if report is not None:
        write_section(report, f"{settings.monitor_readout}/{settings.benchmark}", text)
    if as_json:
        typer.echo(json.dumps(run.summary, indent=1, default=str))
        return
    typer.echo(text)
    typer.echo(f"wrote {run.out}/robustness.json, robustness.md, attacked.csv")


def register(app: typer.Typer) -> None:
    app.command("robustness")(robustness_cmd)


def main() -> None:  # pragma: no cover - module entry point
    app = typer.Typer(add_completion=False)
    app.callback()(lambda: None)  # keep the command name: `python -m calimon.cli_robustness robustness`
    register(app)
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
