"""Benchmarks by name. Each entry is a lazy "module:function" builder that writes
<data_dir>/<name>/samples.jsonl and manifest.json; third parties add entries through the
`calimon.benchmarks` entry-point group."""

from __future__ import annotations

import importlib
import json
from importlib.metadata import entry_points
from pathlib import Path

from calimon.data.paths import benchmark_dir
from calimon.errors import InputError
from calimon.samples import Sample, load_samples

BUILDERS: dict[str, str] = {
    "humaneval-pairs": "calimon.data.humaneval:build",
    "amb-open": "calimon.data.amb_open:build",
}
# Built automatically on first use (no external files needed).
AUTO_BUILD = {"humaneval-pairs"}


def available() -> dict[str, str]:
    """Every known benchmark's name -> "module:function" builder, built-ins first, then entry
    points."""
    table = dict(BUILDERS)
    for ep in entry_points(group="calimon.benchmarks"):
        table.setdefault(ep.name, ep.value)
    return table


def builder(name: str):
    """The builder function of benchmark ``name`` (imported now); raises InputError for an
    unknown name."""
    table = available()
    if name not in table:
        raise InputError(f"unknown benchmark {name!r}; known: {sorted(table)} "
                         "(or pass a path to a samples .jsonl file)", field="benchmark")
    module, attr = table[name].split(":")
    return getattr(importlib.import_module(module), attr)


def samples_path(name: str) -> Path:
    """Where the built benchmark ``name`` keeps its samples.jsonl."""
    return benchmark_dir(name) / "samples.jsonl"


def manifest(name: str) -> dict | None:
    """The built benchmark's manifest.json as a dict, or None when it has not been built."""
    path = benchmark_dir(name) / "manifest.json"
    return json.loads(path.read_text()) if path.is_file() else None


def load_benchmark(name_or_path: str, *, build_if_missing: bool = True) -> list[Sample]:
    """Samples of a named benchmark (building the auto-build ones on first use), a samples
    JSONL path, or an Inspect eval log (``.eval`` / ``.json``, with options: see
    `calimon.data.inspect_log`)."""
    from calimon.data.inspect_log import is_inspect_spec, load_inspect_log

    if is_inspect_spec(name_or_path):
        return load_inspect_log(name_or_path)
    path = Path(name_or_path)
    if name_or_path.endswith(".jsonl") or path.is_file():
        return load_samples(path)
    target = samples_path(name_or_path)
    if not target.is_file():
        if name_or_path in AUTO_BUILD and build_if_missing:
            builder(name_or_path)(out_dir=benchmark_dir(name_or_path))
        else:
            builder(name_or_path)  # raises for unknown names
            raise InputError(f"benchmark {name_or_path!r} is not built yet; run "
                             f"`calimon data build {name_or_path}`", field="benchmark")
    return load_samples(target)
