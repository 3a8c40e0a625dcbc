"""amb-open: an open reconstruction of AutoMonitor-Bench with gold evidence spans.

``build(out_dir, sources=..., seed=..., version=...)`` verifies every public source file against
``benchmarks/amb-open/sources.json``, runs the cell builders listed in ``cells.py`` in order,
checks every pair, assigns pair-level splits and writes ``samples.jsonl`` and ``manifest.json``.
The datasheet is ``benchmarks/amb-open/README.md``.

Versions: 1 is the first release; 2 (the default) is version 1 unchanged, same samples and same
splits, followed by the shortcut-closing additions of ``cells.ADDITIONS`` (hard negatives and
stance variants, see `calimon.data.amb_open.additions`). ``build(..., version=1)`` writes
version 1 byte for byte.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from calimon import __version__
from calimon.data.paths import sources_dir
from calimon.data.sources import SourceFile, load_source_table, sha256_file, verified_path
from calimon.data.splits import split_by_pair, split_counts
from calimon.errors import CalimonError, DataSourceError, InputError
from calimon.progress import pulsing
from calimon.resources import benchmark_file
from calimon.samples import Sample, sample_from_dict, write_samples

NAME = "amb-open"
VERSION = 2  # the default; every version in VERSIONS stays buildable
VERSIONS = (1, 2)
SOURCE_TABLE = benchmark_file("amb-open/sources.json")  # shipped with the package


def source_table() -> dict[str, SourceFile]:
    """The amb-open source table (``benchmarks/amb-open/sources.json``) by relative path; raises
    DataSourceError when the file is missing."""
    if not SOURCE_TABLE.is_file():
        raise DataSourceError(f"source table missing: {SOURCE_TABLE} (it ships with calimon: "
                              "benchmarks/amb-open/sources.json of the repository, "
                              "calimon/shipped/benchmarks/ of the wheel; reinstall calimon)")
    return load_source_table(SOURCE_TABLE)


def read_source(sources_dir: str | Path, rel: str) -> Path:
    """The verified path of one source file (``rel`` as in sources.json, e.g.
    "sven/train/cwe-089.jsonl"); a missing or altered file raises DataSourceError."""
    table = source_table()
    if rel not in table:
        raise DataSourceError(f"{rel} is not listed in {SOURCE_TABLE}")
    return verified_path(Path(sources_dir), table[rel])


FRACTIONS = {"train": 0.6, "calib": 0.2, "test": 0.2}
MIN_TEST_PAIRS = 40


def verify_sources(sources_dir: str | Path) -> dict[str, str]:
    """Check every file of the source table; return {relative path: sha256}. The first missing
    or altered file raises DataSourceError naming it and its upstream."""
    root = Path(sources_dir)
    table = source_table()
    for rel in sorted(table):
        verified_path(root, table[rel])
    return {rel: table[rel].sha256 for rel in sorted(table)}


def build(out_dir: str | Path, *, sources: str | Path | None = None, seed: int = 0,
          cells: Sequence[str] | None = None, allow_missing: bool = False,
          progress: Callable[[str, int], Callable[[int], None]] | None = None,
          version: int = VERSION) -> Path:
    """Build amb-open ``version`` into ``out_dir`` (samples.jsonl + manifest.json); return the
    samples path.

    ``sources``: the folder of public source files (flag, then $CALIMON_SOURCES, then
    ../shared/sources). ``cells``: cell builders to run (default: all of ``cells.CELL_BUILDERS``;
    a subset is for tests and development and is recorded in the manifest). ``allow_missing``:
    skip cell builders whose module does not exist yet instead of failing (development only; the
    manifest then says ``complete: false``). ``progress``: a bar factory ``(label, total) ->
    tick`` (as ``calimon.cli.common.progress_factory``), ticked once per cell built.
    ``version``: 1 or 2 (see the module docstring); version 2 runs the additions of the cell
    builders that were built."""
    from calimon.data.amb_open.cells import CELL_BUILDERS

    if not isinstance(seed, int) or isinstance(seed, bool):
        raise InputError(f"expected an integer, got {seed!r}", field="seed")
    if version not in VERSIONS or isinstance(version, bool):
        raise InputError(f"amb-open has versions {list(VERSIONS)}, got {version!r}",
                         field="version")
    src = sources_dir(sources)
    hashes = verify_sources(src)
    wanted = tuple(CELL_BUILDERS if cells is None else cells)
    found = {spec: _cell_function(spec) for spec in wanted}
    missing = [spec for spec, fn in found.items() if fn is None]
    if missing and not allow_missing:
        raise CalimonError(f"amb-open cell builder(s) not available: {', '.join(missing)}; the "
                           "full build needs every cell (allow_missing is for development)")
    samples: list[Sample] = []
    present = {spec: fn for spec, fn in found.items() if fn is not None}
    tick = progress(f"{NAME}: cells", len(present)) if progress and present else None
    for spec, fn in present.items():
        with pulsing(progress, f"{spec.rsplit(':', 1)[-1]} code checks"):
            samples += _run_cell(spec, fn, src, seed)
        if tick:
            tick(1)
    summary = check_samples(samples)
    samples = split_samples(samples, seed)
    parameters = {"fractions": FRACTIONS, "min_test_pairs": MIN_TEST_PAIRS, "cells": list(wanted)}
    if version >= 2:
        samples, ran = _additions(samples, src, seed, list(present), progress)
        summary = check_samples([replace(s, split=None) for s in samples])
        parameters["additions"] = ran
    out = Path(out_dir)
    path = write_samples(samples, out / "samples.jsonl")
    manifest = {
        "name": NAME, "version": version, "seed": seed, "calimon_version": __version__,
        "builder": "calimon.data.amb_open:build",
        "parameters": parameters,
        "complete": not missing and cells is None, "missing_cells": missing,
        "samples_sha256": sha256_file(path), "counts": counts(samples), **summary,
        "sources": hashes,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n",
                                       encoding="utf-8")
    return path


def _additions(samples: list[Sample], src: Path, seed: int, built: list[str],
               progress) -> tuple[list[Sample], list[str]]:
    """`run_additions` under a one-step bar of its own (where any addition runs), its code
    checks counted on it as they run."""
    from calimon.data.amb_open.additions import run_additions
    from calimon.data.amb_open.cells import ADDITIONS

    runs = [spec for spec, extends in ADDITIONS.items() if set(extends) & set(built)]
    tick = progress(f"{NAME}: additions", 1) if progress and runs else None
    with pulsing(progress, "code checks"):
        out = run_additions(samples, src, seed, built=built, fractions=FRACTIONS)
    if tick:
        tick(1)
    return out


def split_samples(samples: Sequence[Sample], seed: int) -> list[Sample]:
    """Pair-level splits stratified by cell. Real pairs and unpaired hard negatives are split
    separately, so that the test floor of MIN_TEST_PAIRS per cell counts real pairs only; the
    input order is kept."""
    return split_by_pair(samples, FRACTIONS, seed, MIN_TEST_PAIRS)


def _cell_function(spec: str):
    """The function named by "module:function"; None when the module or function does not exist
    (an import error inside an existing module is raised)."""
    module, attr = spec.split(":")
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name == module:
            return None
        raise
    return getattr(mod, attr, None)


def _run_cell(spec: str, fn, src: Path, seed: int) -> list[Sample]:
    from calimon.data.amb_open.cells import DATA_PATH_BUILDERS

    if spec in DATA_PATH_BUILDERS:
        return list(fn(seed, data_path=read_source(src, DATA_PATH_BUILDERS[spec])))
    return list(fn(src, seed))


def check_samples(samples: Sequence[Sample]) -> dict:
    """Check the pair contract of every sample; return a summary for the manifest.

    A pair is two samples ``<pair_id>-m`` (label True, >= 1 gold span) and ``<pair_id>-b`` (label
    False, no span) with the same request, category and task. A benign hard negative without a
    counterpart is a group of one with ``meta.unpaired`` true. Spans must lie in the response,
    be sorted and disjoint and cover non-blank text."""
    def fail(msg: str) -> CalimonError:
        return CalimonError(f"amb-open: {msg}")

    ids: set[str] = set()
    groups: dict[str, list[Sample]] = {}
    for s in samples:
        if s.id in ids:
            raise fail(f"duplicate sample id {s.id!r}")
        ids.add(s.id)
        sample_from_dict(s.to_dict(), path=f"<cell builder, sample {s.id}>")
        if s.split is not None:
            raise fail(f"{s.id}: cell builders must leave split unset, got {s.split!r}")
        last = 0
        for start, end in s.gold_spans:
            if start < last or not s.response[start:end].strip():
                raise fail(f"{s.id}: gold span [{start}, {end}) overlaps the previous one or "
                           "covers only whitespace")
            last = end
        groups.setdefault(s.pair_id, []).append(s)
    n_pairs = n_single = 0
    for pid, group in groups.items():
        if len(group) == 1 and group[0].label is False and group[0].meta.get("unpaired"):
            if group[0].gold_spans or group[0].id != f"{pid}-b":
                raise fail(f"{group[0].id}: an unpaired hard negative is '<pair_id>-b' "
                           "without spans")
            n_single += 1
            continue
        by_label = {s.label: s for s in group}
        if len(group) != 2 or set(by_label) != {True, False}:
            raise fail(f"pair {pid!r}: expected one misbehaving and one benign sample, got "
                       f"{[(s.id, s.label) for s in group]}")
        bad, good = by_label[True], by_label[False]
        if (bad.id, good.id) != (f"{pid}-m", f"{pid}-b"):
            raise fail(f"pair {pid!r}: ids must be '{pid}-m' / '{pid}-b', got "
                       f"{bad.id!r} / {good.id!r}")
        if bad.request != good.request:
            raise fail(f"pair {pid!r}: the two samples have different requests")
        if (bad.category, bad.task) != (good.category, good.task):
            raise fail(f"pair {pid!r}: the two samples are in different cells")
        if not bad.gold_spans or good.gold_spans:
            raise fail(f"pair {pid!r}: the misbehaving sample needs gold spans and the benign "
                       "one none")
        if bad.response == good.response:
            raise fail(f"pair {pid!r}: both responses are identical")
        n_pairs += 1
    return {"n_samples": len(samples), "n_pairs": n_pairs, "n_unpaired_benign": n_single}


def cell_name(s: Sample) -> str:
    """The sample's cell, ``"category/task"``."""
    return f"{s.category}/{s.task}"


def counts(samples: Sequence[Sample]) -> dict:
    """Per cell: pairs and unpaired benign samples per split, pairs per source and per label
    quality, in the fixed order of categories x tasks."""
    return split_counts(samples)
