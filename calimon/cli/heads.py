"""`calimon heads ...`: train probe heads on hidden states and list them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from calimon.cli.common import cli_errors, progress_factory
from calimon.cli.options import (
    COUNT,
    DATA,
    DEFAULT_BENCHMARK,
    DEFAULT_MODEL,
    DEFAULT_PROMPT,
    DEFAULT_SEED,
    MONITOR,
    OUTPUT,
    JsonOpt,
    ModelOpt,
    QuietOpt,
    backend_flags,
    settings_from,
)

HEAD, REVIEW = "Head", "Reviewed labels"

heads_app = typer.Typer(no_args_is_help=True,
                        help="Probe heads on hidden states (train, list, bundle).")


@heads_app.command("train")
@cli_errors
@backend_flags
def heads_train(
    ctx: typer.Context,
    name: Annotated[str, typer.Option(help="Head name (heads/<model>/<name>.safetensors).", rich_help_panel=HEAD)],
    model: ModelOpt = DEFAULT_MODEL,
    benchmark: Annotated[str, typer.Option(help="Name or samples .jsonl (needs a 'train' split).", rich_help_panel=DATA)] = DEFAULT_BENCHMARK,
    kind: Annotated[str, typer.Option(help="sequence (one score per transcript) or token (per-token scores, spans).", rich_help_panel=HEAD)] = "sequence",
    layer: Annotated[int | None, typer.Option(help="Layer to read (0 = embeddings; default: chosen by CV).", rich_help_panel=HEAD)] = None,
    sweep: Annotated[bool, typer.Option("--sweep", help="Choose the recipe by pair-grouped CV on train (default without --layer).", rich_help_panel=HEAD)] = False,
    pooling: Annotated[str | None, typer.Option(help="Sequence heads: last, mean or max (default: chosen by CV).", rich_help_panel=HEAD)] = None,
    estimator: Annotated[str | None, typer.Option(help="Sequence heads: logistic, mlp or attention (default: chosen by CV; docs/heads.md).", rich_help_panel=HEAD)] = None,
    attention_layer: Annotated[list[int] | None, typer.Option(help="Recipe search: also try attention at this layer; repeatable.", rich_help_panel=HEAD)] = None,
    prompt: Annotated[str, typer.Option(help="Prompt template whose verdict pass the head reads.", rich_help_panel=MONITOR)] = DEFAULT_PROMPT,
    max_input_tokens: Annotated[int, typer.Option(help="Longer transcripts are truncated (head_tail).", rich_help_panel=MONITOR)] = 1024,
    limit: Annotated[int | None, typer.Option(help="At most N train samples (whole pairs).", rich_help_panel=DATA, **COUNT)] = None,
    eval_limit: Annotated[int | None, typer.Option(help="At most N calib and test samples each.", rich_help_panel=DATA, **COUNT)] = None,
    category: Annotated[list[str] | None, typer.Option(help="Train on these categories only; repeatable.", rich_help_panel=DATA)] = None,
    seed: Annotated[int, typer.Option(help="Seed for folds, subsampling and the MLP.", rich_help_panel=DATA)] = DEFAULT_SEED,
    no_eval: Annotated[bool, typer.Option("--no-eval", help="Skip the calib/test figures on the card.", rich_help_panel=OUTPUT)] = False,
    augment: Annotated[list[str] | None, typer.Option(help="Add train copies with text of this kind: neutral, note, verdict, instruction, role or all; repeatable (docs/heads.md).", rich_help_panel=DATA)] = None,
    augment_copies: Annotated[int, typer.Option(help="Rewritten copies per transcript with --augment.", rich_help_panel=DATA)] = 1,
    out: Annotated[Path | None, typer.Option(help="Heads folder (default: $CALIMON_HEADS_DIR, else heads/ of a checkout, else the user folder's; docs/install.md).", rich_help_panel=OUTPUT)] = None,
    from_review: Annotated[str | None, typer.Option(help="Also train on reviewed labels: a review export file or a server's URL (key in $CALIMON_API_KEY; docs/heads.md).", rich_help_panel=REVIEW)] = None,
    review_weight: Annotated[float, typer.Option(help="Weight of each class's reviewed labels against its train rows.", rich_help_panel=REVIEW)] = 1.0,
    review_eval_share: Annotated[float, typer.Option(help="Share of reviewed pairs (the latest) held out.", rich_help_panel=REVIEW)] = 0.3,
    review_sample: Annotated[str, typer.Option(help="A URL's export: all (every label) or uniform.", rich_help_panel=REVIEW)] = "all",
    quiet: QuietOpt = False,
    as_json: JsonOpt = False,
):
    """Train a probe head on a benchmark's train split (and reviewed labels, --from-review) and save it with its card."""
    from calimon.errors import InputError
    from calimon.studies.heads.workflow import HeadTrainSettings, train_head

    if sweep and layer is not None:
        raise InputError("give --layer or --sweep, not both", field="layer")
    review_file, review_url = _reviews(from_review, model, name, out, review_sample)
    settings = settings_from(HeadTrainSettings, ctx.params,
                             categories=tuple(category) if category else None,
                             augment=tuple(augment or ()), evaluate=not no_eval,
                             attention_layers=tuple(attention_layer or ()),
                             from_review=review_file, review_source=review_url)
    done = train_head(settings, progress=progress_factory(quiet or as_json))
    if as_json:
        typer.echo(done.card.model_dump_json(indent=1))
        return
    c = done.card
    at = "+".join(str(k) for k in c.layers) if c.layers else c.layer
    typer.echo(f"wrote {done.card_path} ({c.kind}, {c.estimator}, layer {at}, "
               f"{c.pooling or c.aggregate})")
    if c.training.recipe is not None:
        typer.echo(f"  recipe {c.training.recipe.chosen}: {c.training.recipe.reason}")
    for k, v in c.metrics.items():
        typer.echo(f"  {k:<22} {'n/a' if v is None else f'{v:.4g}'}")


def _reviews(source: str | None, model: str, name: str, root: Path | None, sample: str
             ) -> tuple[Path | None, str | None]:
    """(export file, server URL or None) of ``--from-review``: a URL's export is fetched into
    heads/<model>/<name>.reviews.jsonl first."""
    if source is None:
        return None, None
    if not source.startswith(("http://", "https://")):
        return Path(source), None
    from calimon.scoring.probes.artifacts import head_paths
    from calimon.serve.remote import export_to

    path = head_paths(Path(model).name, name, root)[1].with_name(f"{name}.reviews.jsonl")
    export_to(source, path, sample=sample)
    return path, source


@heads_app.command("list")
@cli_errors
def heads_list(
    model: Annotated[str | None, typer.Option(help="Only heads of this model.")] = None,
    root: Annotated[Path | None, typer.Option(help="Heads folder to list (default: every folder of the lookup order, docs/install.md).")] = None,
    as_json: JsonOpt = False,
):
    """Trained heads with their layer, pooling and metrics."""
    from calimon.scoring.probes.artifacts import list_heads
    from calimon.scoring.probes.bundle import list_bundles

    rows, bundles = list_heads(model, root), list_bundles(model, root)
    if as_json:
        typer.echo(json.dumps(rows + [{"kind": "bundle", **b} for b in bundles], indent=1))
        return
    if not rows and not bundles:
        typer.echo("no heads")
    for r in rows:
        if "error" in r:
            typer.echo(f"{r['model']:<16} {r['name']:<24} invalid: {r['error']}")
            continue
        auc = r["metrics"].get("test_auroc", r["metrics"].get("cv_auroc"))
        typer.echo(f"{r['model']:<16} {r['name']:<24} {r['kind']:<8} layer {r['layer']:<3} "
                   f"{r['pooling'] or r['aggregate']:<9} AUROC {'n/a' if auc is None else f'{auc:.3f}'}"
                   f"  readout probe:{r['name']}")
    for b in bundles:
        if "error" in b:
            typer.echo(f"{b['model']:<16} {b['name']:<24} invalid: {b['error']}")
            continue
        auc = b["auroc"]
        typer.echo(f"{b['model']:<16} {b['name']:<24} bundle   {b['sequence_head']} + "
                   f"{b['token_head'] or '-'}, map {b['calibration_map'] or '-'}  AUROC "
                   f"{'n/a' if auc is None else f'{auc:.3f}'}  readout probe:{b['name']}")


@heads_app.command("bundle")
@cli_errors
def heads_bundle(
    name: Annotated[str, typer.Option(help="Bundle name (heads/<model>/<name>.bundle.yaml; the readout is probe:<name>).")],
    sequence_head: Annotated[str, typer.Option(help="The sequence head that gives the score (a head name under heads/<model>/).")],
    recipe: Annotated[str, typer.Option(help="How the heads were trained, in words (recorded on the card).")],
    command: Annotated[str, typer.Option(help="The command that made the bundle (recorded on the card).")],
    token_head: Annotated[str | None, typer.Option(help="The token head that gives the spans.")] = None,
    calibration_map: Annotated[Path | None, typer.Option(help="A map file of a curve run (runs/NAME/calibration/<method>.json), copied next to the heads.")] = None,
    metrics_from: Annotated[Path | None, typer.Option(help="The curve.json of a run of the sequence head whose figures the card records.")] = None,
    model: ModelOpt = DEFAULT_MODEL,
    root: Annotated[Path | None, typer.Option(help="Heads folder the heads are in and the bundle goes to (default: as heads train --out).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Bind a --calibration-map or --metrics-from made for another model, revision, prompt, readout or defense than the sequence head anyway (what differed is recorded on the card).")] = False,
):
    """Bind saved heads and a calibration map into one shipped monitor (a bundle card). The map
    and the metrics must come from a run of the sequence head (or of the bundle)."""
    from calimon.scoring.probes.bundle import load_bundle, make_bundle

    path = make_bundle(name, model, sequence_head, recipe=recipe, command=command,
                       token_head=token_head, calibration_map=calibration_map,
                       curve_json=metrics_from, root=root, force=force)
    forced = load_bundle(path).card.forced
    if forced:
        typer.echo("WARNING: bound with --force to artifacts of another monitor: "
                   + "; ".join(forced))
    typer.echo(f"wrote {path} (readout probe:{name})")


def register(app: typer.Typer) -> None:
    """Mount `heads` on the main CLI."""
    app.add_typer(heads_app, name="heads")
