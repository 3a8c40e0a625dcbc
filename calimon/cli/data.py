"""`calimon data ...` commands: build, list, audit and import benchmarks.

``register(app)`` mounts ``data_app`` as ``calimon data``. A library error becomes one line on
stderr and the error's exit code.
"""

from __future__ import annotations

import inspect
import json
import math
from pathlib import Path

import typer

from calimon.cli.common import cli_errors, progress_factory, table
from calimon.errors import InputError


def data_build(
    name: str = typer.Argument(..., help="Benchmark name, e.g. amb-open (see `calimon data list`)."),
    sources: Path | None = typer.Option(
        None, "--sources", help="Folder of public source files (default: $CALIMON_SOURCES, "
                                "then ../shared/sources)."),
    out: Path | None = typer.Option(None, "--out", help="Output folder (default: the data dir)."),
    seed: int = typer.Option(0, "--seed", help="Seed of frames and splits."),
    version: int | None = typer.Option(
        None, "--version", help="Benchmark version (default: the newest); a non-default version "
                                "is built into <data dir>/<name>@<version>, e.g. amb-open@1."),
    partial: bool = typer.Option(False, "--partial", hidden=True,
                                 help="Development: skip cell builders that do not exist yet."),
    markdown: Path | None = typer.Option(None, "--markdown",
                                         help="Also write the counts table as markdown here."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bars."),
    json_out: bool = typer.Option(False, "--json", help="Print the manifest as JSON."),
) -> None:
    """Build a benchmark from its sources and print its pair counts per cell and split."""
    from calimon.data import registry
    from calimon.data.paths import benchmark_dir

    build = registry.builder(name)
    folder = registry.folder_name(name, version)
    target = Path(out) if out is not None else benchmark_dir(folder)
    kwargs: dict = {"sources": sources, "seed": seed}
    accepts = inspect.signature(build).parameters
    version = version if version is not None else registry.split_name(name)[1]
    if version is not None:
        if "version" not in accepts:
            raise InputError(f"benchmark {name!r} has no versions", field="version")
        kwargs["version"] = version
    if partial and "allow_missing" in accepts:
        kwargs["allow_missing"] = True
    progress = progress_factory(quiet or json_out)  # bars on stderr; none with --json
    if progress is not None and "progress" in accepts:  # a plugin builder may take none
        kwargs["progress"] = progress
    build(target, **kwargs)
    manifest = json.loads((target / "manifest.json").read_text(encoding="utf-8"))
    if markdown is not None:
        Path(markdown).write_text(counts_markdown(manifest), encoding="utf-8")
    if json_out:
        typer.echo(json.dumps(manifest, indent=1, sort_keys=True))
        return
    typer.echo(f"built {name} version {manifest.get('version')} in {target}"
               if manifest.get("version") is not None else f"built {name} in {target}")
    typer.echo(counts_table(manifest))


def data_list(
    json_out: bool = typer.Option(False, "--json", help="Print JSON rows."),
) -> None:
    """List the benchmarks available, whether each is built, and its counts."""
    rows = benchmark_rows()
    if json_out:
        typer.echo(json.dumps(rows, indent=1))
        return
    typer.echo(table(["benchmark", "built", "pairs", "samples", "train pairs", "calib pairs",
                       "test pairs", "path"],
                      [[r["name"], "yes" if r["built"] else "no", r.get("pairs", ""),
                        r.get("samples", ""), *(r.get("split_pairs", {}).get(k, "")
                                                for k in ("train", "calib", "test")),
                        r["path"]] for r in rows], rule=True))


def data_audit(
    name: str = typer.Argument(..., help="Benchmark name or a samples .jsonl path."),
    markdown: Path | None = typer.Option(None, "--markdown",
                                         help="Also write the table as markdown to this file."),
    by_source: bool = typer.Option(False, "--by-source",
                                   help="Add a row per source in cells with several sources."),
    without: list[str] = typer.Option(
        [], "--without", help="Leave out a cell (category/task), e.g. to report the 'all' row "
                              "without a cell that misses its target; repeatable."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON rows."),
) -> None:
    """Shortcut audit: AUROC of length-only and TF-IDF baselines per cell (train -> test)."""
    from calimon.data import registry
    from calimon.data.amb_open.audit import audit_markdown, shortcut_audit
    from calimon.samples import CATEGORIES, TASKS

    cells = {f"{c}/{t}" for c in CATEGORIES for t in TASKS}
    unknown = sorted(set(without) - cells)
    if unknown:
        raise InputError(f"--without {unknown[0]}: not a cell (category/task)", field="without")
    samples = [s for s in registry.load_benchmark(name)
               if f"{s.category}/{s.task}" not in set(without)]
    rows = shortcut_audit(samples, by_source=by_source)
    if markdown is not None:
        Path(markdown).write_text(audit_markdown(rows), encoding="utf-8")
    if json_out:
        typer.echo(json.dumps([r.to_dict() for r in rows], indent=1))
        return

    def fmt(x: float, ok: bool) -> str:
        return "n/a" if math.isnan(x) else f"{x:.3f}" + ("" if ok else " (above target)")

    typer.echo(table(["cell", "train", "test", "length-only AUROC", "TF-IDF AUROC"],
                      [[r.cell, r.n_train, r.n_test, fmt(r.length_auroc, r.length_ok),
                        fmt(r.tfidf_auroc, r.tfidf_ok)] for r in rows], rule=True))


def benchmark_rows() -> list[dict]:
    """One row per registered benchmark: whether it is built, its path and, when built, its
    sample, pair and per-split pair counts."""
    from calimon.data import registry
    from calimon.data.paths import benchmark_dir

    rows = []
    for name in sorted(registry.available()):
        path = benchmark_dir(name)
        row: dict = {"name": name, "built": False, "path": str(path)}
        manifest = registry.manifest(name)
        if manifest is not None and (path / "samples.jsonl").is_file():
            counts = manifest.get("counts", {})
            row.update(built=True, samples=manifest.get("n_samples"),
                       pairs=manifest.get("n_pairs"),
                       split_pairs={k: sum(c.get("pairs", {}).get(k, 0) for c in counts.values())
                                    for k in ("train", "calib", "test")})
        rows.append(row)
    return rows


def counts_table(manifest: dict) -> str:
    """Pairs (and unpaired benign samples, in brackets) per cell and split."""
    rows = []
    for cell, c in _ordered(manifest.get("counts", {})):
        pairs, single = c.get("pairs", {}), c.get("unpaired_benign", {})
        rows.append([cell, *(f"{pairs.get(k, 0)}" + (f" (+{single[k]})" if single.get(k) else "")
                             for k in ("train", "calib", "test", "total"))])
    head = ["cell", "train", "calib", "test", "total pairs"]
    return table(head, rows, rule=True) + (f"\n{manifest.get('n_pairs')} pairs, "
                                 f"{manifest.get('n_samples')} samples")


def counts_markdown(manifest: dict) -> str:
    """Pairs per cell and split as a markdown table, unpaired hard negatives in brackets."""
    lines = ["| cell | train | calib | test | total pairs | by source | label quality |",
             "|---|---:|---:|---:|---:|---|---|"]
    for cell, c in _ordered(manifest.get("counts", {})):
        pairs, single = c.get("pairs", {}), c.get("unpaired_benign", {})
        vals = [f"{pairs.get(k, 0)}" + (f" (+{single[k]})" if single.get(k) else "")
                for k in ("train", "calib", "test", "total")]
        src = ", ".join(f"{k} {v}" for k, v in c.get("pairs_by_source", {}).items())
        qual = ", ".join(f"{k} {v}" for k, v in c.get("pairs_by_label_quality", {}).items())
        lines.append(f"| {cell} | " + " | ".join(vals) + f" | {src} | {qual} |")
    lines.append(f"| **all** | | | | **{manifest.get('n_pairs')}** "
                 f"(+{manifest.get('n_unpaired_benign', 0)}) | | |")
    return "\n".join(lines) + "\n"


def _ordered(counts: dict) -> list[tuple[str, dict]]:
    """Cells in category x task order (the manifest stores them sorted by name)."""
    from calimon.samples import CATEGORIES, TASKS

    order = [f"{c}/{t}" for c in CATEGORIES for t in TASKS]
    return sorted(counts.items(), key=lambda kv: (order.index(kv[0]) if kv[0] in order
                                                  else len(order), kv[0]))


def import_amb(
    path: Path = typer.Argument(..., help="The official AutoMonitor-Bench file (JSON or JSONL)."),
    out: Path = typer.Option(..., "--out", help="Where to write calimon samples JSONL."),
    config: Path | None = typer.Option(None, "--config", help="Field-mapping YAML (default "
                                       "configs/adapters/automonitor-bench.yaml)."),
) -> None:
    """Convert the official AutoMonitor-Bench release into calimon samples through a field map."""
    from calimon.data.automonitor import import_amb as convert

    typer.echo(f"wrote {convert(path, config, out)}")


data_app = typer.Typer(help="Build, list, audit and import benchmarks.", no_args_is_help=True)
data_app.command("build")(cli_errors(data_build))
data_app.command("list")(cli_errors(data_list))
data_app.command("audit")(cli_errors(data_audit))
data_app.command("import-amb")(cli_errors(import_amb))


def register(app: typer.Typer) -> None:
    """Mount ``data`` (build, list, audit, import-amb) on the main CLI."""
    app.add_typer(data_app, name="data")
