"""CLI of the span layer: ``calimon spans`` (run a span-localization study) and
``calimon spans show ID --run DIR`` (one transcript with its spans, terminal or HTML).

``register(app)`` mounts the group as ``spans`` on the main app.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Annotated, Any

import typer

from calimon.cli.common import cli_errors, json_ready, progress_factory
from calimon.cli.options import (
    COUNT,
    DEFAULT_BENCHMARK,
    DEFAULT_MODEL,
    DEFAULT_READOUT,
    DEFAULT_SEED,
    DEFAULT_STORE,
    BenchmarkOpt,
    ForceOpt,
    JsonOpt,
    ModelOpt,
    QuietOpt,
    StoreOpt,
    backend_flags,
    settings_from,
)
from calimon.errors import InputError

spans_app = typer.Typer(add_completion=False,
                        help="Evidence spans: occlusion spans and grounded quotes vs gold spans.")
SOURCES = ("all", "occlusion", "quote")


@spans_app.callback(invoke_without_command=True)
@cli_errors
@backend_flags
def spans_cmd(
    ctx: typer.Context,
    model: ModelOpt = DEFAULT_MODEL,
    benchmark: BenchmarkOpt = DEFAULT_BENCHMARK,
    split: Annotated[str, typer.Option(help="Split to study: train, calib, test, or all.")] = "test",
    limit: Annotated[int | None, typer.Option(help="At most this many samples (whole pairs, balanced over cells); spans are scored on the misbehaving half.", **COUNT)] = None,
    prompt: Annotated[str, typer.Option(help="Prompt template of the monitor whose confidence is occluded.")] = "direct",
    readout: Annotated[str, typer.Option(help="Confidence whose drops are read: verdict, json, or a sequence probe head probe:<name> (occlusion on the head).")] = DEFAULT_READOUT,
    quote_prompt: Annotated[str, typer.Option(help="Prompt whose generated JSON gives the evidence quotes.")] = "evidence",
    no_quotes: Annotated[bool, typer.Option("--no-quotes", help="Skip quote generation (occlusion only).")] = False,
    copy_quotes: Annotated[bool, typer.Option("--copy-quotes", help="Also generate copy-constrained quotes: each quote can only be a run of the response's own tokens (grounded by construction; token backends).")] = False,
    token_head: Annotated[str | None, typer.Option(help="Also read this token probe head's spans (a head name or probe:<name>).")] = None,
    direction: Annotated[str, typer.Option(help="Span score = drop in P(misbehavior) (raw), its negative (flipped), or the sign from the raw AUROC on the calib split (auto).")] = "raw",
    top_k: Annotated[int, typer.Option(help="Occlusion spans per sample: the top-k units with a positive score.")] = 3,
    max_segments: Annotated[int, typer.Option(help="Cap on occlusion units per sample (adjacent small segments merged).")] = 24,
    seed: Annotated[int, typer.Option(help="Seed for selection and the random baseline.")] = DEFAULT_SEED,
    force: ForceOpt = False,
    no_share_prefix: Annotated[bool, typer.Option("--no-share-prefix", help="Run masked variants plainly (no per-sample prefix reuse).")] = False,
    store: StoreOpt = DEFAULT_STORE,
    out: Annotated[Path | None, typer.Option(help="Output folder (default runs/spans-<benchmark>-<split>).")] = None,
    quiet: QuietOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Score occlusion spans and grounded quotes on a benchmark split against gold spans."""
    if ctx.invoked_subcommand is not None:
        return
    from calimon.selection import split_arg
    from calimon.studies.spans.study import SpanSettings, run_span_study

    if split_arg(split) not in (None, "train", "calib", "test"):
        raise typer.BadParameter(f"expected train, calib, test or all, got {split!r}",
                                 param_hint="'--split'")
    settings = settings_from(SpanSettings, ctx.params, split=split_arg(split),
                             quotes=not no_quotes, share_prefix=not no_share_prefix)
    study = run_span_study(settings, progress=progress_factory(quiet or as_json))
    out = settings.out_dir()
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "spans.jsonl", "w", encoding="utf-8") as fh:
        for rec in study.records():
            fh.write(json.dumps(json_ready(rec), ensure_ascii=False, allow_nan=False) + "\n")
    (out / "summary.json").write_text(
        json.dumps(json_ready(study.summary), indent=1, allow_nan=False) + "\n", encoding="utf-8")
    command = settings.command()
    markdown = study.to_markdown(command)
    (out / "spans.md").write_text(markdown, encoding="utf-8")
    if as_json:
        typer.echo(json.dumps(json_ready(study.summary), indent=1, allow_nan=False))
        return
    if settings.offline:
        from calimon.scoring.backends.offline import offline_line

        typer.echo(offline_line(settings.backend, settings.base_url))
    typer.echo(markdown)
    typer.echo(f"wrote {out}/spans.jsonl, summary.json, spans.md")


def read_run(run: Path) -> list[dict[str, Any]]:
    """The records of a spans run folder (its spans.jsonl)."""
    path = run / "spans.jsonl" if run.is_dir() else run
    if not path.is_file():
        raise InputError(f"no spans.jsonl in {run} (run `calimon spans --out {run}` first)",
                         field="run")
    from calimon.jsonio import json_error_where

    records = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise InputError(f"invalid JSON: {json_error_where(exc)}", path=str(path), line=n) from None
    return records


def _pick(records: list[dict[str, Any]], sample_id: str) -> dict[str, Any]:
    for rec in records:
        if rec.get("id") == sample_id:
            return rec
    ids = [r.get("id") for r in records]
    shown = ", ".join(map(str, ids[:5])) + (", ..." if len(ids) > 5 else "")
    raise InputError(f"no sample {sample_id!r} in the run ({len(ids)} samples: {shown})",
                     field="id")


@spans_app.command("show")
@cli_errors
def show_cmd(
    sample_id: Annotated[str, typer.Argument(help="Sample id (as in spans.jsonl).")],
    run: Annotated[Path, typer.Option(help="A spans run folder (or its spans.jsonl).")],
    source: Annotated[str, typer.Option(help="Spans to show: all, occlusion or quote.")] = "all",
    html_out: Annotated[Path | None, typer.Option("--html", help="Also write an HTML page of the transcript to this file.")] = None,
    color: Annotated[bool | None, typer.Option("--color/--no-color", help="ANSI colours (default: when stdout is a terminal).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Show one transcript of a spans run with its predicted and gold spans highlighted."""
    from calimon.data.trajectory import describe
    from calimon.studies.spans.render import HTML_STYLE, render_html, render_terminal

    if source not in SOURCES:
        raise InputError(f"expected one of {list(SOURCES)}, got {source!r}", field="source")
    rec = _pick(read_run(run), sample_id)
    text = rec.get("response")
    if not isinstance(text, str):
        raise InputError("the record has no response text", field="response")
    chosen = [s for s in rec.get("spans", []) if source == "all" or s.get("source") == source]
    spans = [(s["start"], s["end"], s.get("score")) for s in chosen if s.get("start") is not None]
    gold = [tuple(g) for g in rec.get("gold", [])]
    if html_out is not None:
        title = f"{rec['id']} ({rec.get('category')}, {rec.get('task')})"
        page = (f"<!doctype html>\n<html><head><meta charset=\"utf-8\">"
                f"<title>{html.escape(title)}</title>\n<style>\n{HTML_STYLE}</style></head>\n"
                f"<body>\n{render_html(text, spans, gold, title=title)}</body></html>\n")
        html_out.write_text(page, encoding="utf-8")
    if as_json:
        shown = [{**s, "text": text[s["start"]:s["end"]]} if s.get("start") is not None
                 else dict(s) for s in chosen]
        doc = {**rec, "spans": shown, "source": source,
               "html": str(html_out) if html_out is not None else None}
        typer.echo(json.dumps(json_ready(doc), indent=1, ensure_ascii=False, allow_nan=False))
        return
    p_raw = rec.get("p_raw")
    typer.echo(f"{rec['id']}  category={rec.get('category')}  task={rec.get('task')}  "
               f"p_raw={'n/a' if p_raw is None else f'{p_raw:.4f}'}  "
               f"quotes={rec.get('quote_status')}  spans={source}\n")
    typer.echo(render_terminal(text, spans, gold, color=color), nl=False)
    for s in chosen:
        if s.get("start") is None:
            typer.echo(f"  ungrounded quote: {s.get('quote')!r} ({s.get('reason', '')})")
        elif s.get("messages"):  # a trajectory with message offsets (e.g. an Inspect log)
            where = ", ".join(describe(m) for m in s["messages"])
            typer.echo(f"  {s.get('source')} span [{s['start']}, {s['end']}) in {where}")
    if html_out is not None:
        typer.echo(f"wrote {html_out}")


def register(app: typer.Typer) -> None:
    """Mount ``spans`` (and ``spans show``) on the main CLI."""
    app.add_typer(spans_app, name="spans")


__all__ = ["read_run", "register", "show_cmd", "spans_app", "spans_cmd"]
