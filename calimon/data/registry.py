"""Benchmarks by name. Each entry is a lazy "module:function" builder that writes
<data_dir>/<name>/samples.jsonl and manifest.json; third parties add entries through the
`calimon.benchmarks` entry-point group.

A versioned benchmark (its builder module has an integer ``VERSION``, the default, and its builder
takes ``version=``) is named ``name`` for the default version and ``name@N`` for another one,
e.g. ``amb-open@1``; each version is built into the folder of that name, so an older version
lives beside the default one."""

from __future__ import annotations

import importlib
import inspect
import json
import time
from importlib.metadata import entry_points
from pathlib import Path

from calimon.data.paths import benchmark_dir
from calimon.errors import InputError
from calimon.progress import Progress, note
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


def split_name(name: str) -> tuple[str, int | None]:
    """``"amb-open@1"`` -> ``("amb-open", 1)``; a name without ``@`` has version None. A version
    that is not a positive integer raises InputError."""
    base, at, version = name.partition("@")
    if not at:
        return name, None
    if not version.isdigit() or int(version) < 1:
        raise InputError(f"benchmark {name!r}: the version after '@' must be a positive integer",
                         field="benchmark")
    return base, int(version)


def default_version(name: str) -> int | None:
    """The default version of benchmark ``name`` (its builder module's ``VERSION``), or None
    for an unversioned benchmark (a builder without a ``version`` parameter)."""
    fn = builder(name)
    if "version" not in inspect.signature(fn).parameters:
        return None
    version = getattr(importlib.import_module(fn.__module__), "VERSION", None)
    return version if isinstance(version, int) else None


def folder_name(name: str, version: int | None = None) -> str:
    """The data-dir folder of ``name`` at ``version``: the bare name for the default version
    (or an unversioned benchmark), ``name@N`` for any other. ``name`` may itself carry
    ``@N``; a different explicit ``version`` raises InputError."""
    base, named = split_name(name)
    if named is not None and version is not None and named != version:
        raise InputError(f"benchmark {name!r} names version {named} but version {version} was "
                         "asked for", field="version")
    want = named if named is not None else version
    default = default_version(base)
    if want is not None and default is None:
        raise InputError(f"benchmark {base!r} has no versions", field="version")
    return base if want is None or want == default else f"{base}@{want}"


def builder(name: str):
    """The builder function of benchmark ``name`` (a ``@N`` version suffix is ignored; imported
    now); raises InputError for an unknown name."""
    name, _ = split_name(name)
    table = available()
    if name not in table:
        raise InputError(f"unknown benchmark {name!r}; known: {sorted(table)} (or pass a "
                         "samples .jsonl path, a .csv of scores, or an Inspect log, folder or "
                         "pattern)", field="benchmark")
    module, attr = table[name].split(":")
    return getattr(importlib.import_module(module), attr)


def samples_path(name: str) -> Path:
    """Where the built benchmark ``name`` (``name@N`` for a version) keeps its samples.jsonl."""
    return benchmark_dir(folder_name(name)) / "samples.jsonl"


def manifest(name: str) -> dict | None:
    """The built benchmark's manifest.json as a dict, or None when it has not been built."""
    path = benchmark_dir(folder_name(name)) / "manifest.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _check_built_version(name: str) -> None:
    """Refuse a folder whose manifest records another version than ``name`` asks for (e.g. a
    version-1 build left in the default folder after the default moved on)."""
    base, named = split_name(name)
    want = named if named is not None else default_version(base)
    found = (manifest(name) or {}).get("version")
    if want is not None and found is not None and found != want:
        raise InputError(
            f"{benchmark_dir(folder_name(name))} holds {base} version {found}, not version "
            f"{want}; rebuild it with `calimon data build {base} --version {want}`"
            + (f" (results made on version {found} load as {base}@{found} once built with "
               f"`calimon data build {base} --version {found}`)" if named is None else ""),
            field="benchmark")


def _build_on_first_use(name: str, progress: Progress | None) -> None:
    """Build an auto-build benchmark, saying so before and after (it takes a while once)."""
    fn, out = builder(name), benchmark_dir(name)
    note(progress, f"building benchmark {name} into {out} (first use only)")
    started = time.perf_counter()
    takes_progress = "progress" in inspect.signature(fn).parameters
    fn(out_dir=out, **({"progress": progress} if takes_progress and progress else {}))
    note(progress, f"built benchmark {name} in {time.perf_counter() - started:.0f} s")


def load_benchmark(name_or_path: str, *, build_if_missing: bool = True,
                   progress: Progress | None = None) -> list[Sample]:
    """Samples of a named benchmark (building the auto-build ones on first use, with a line
    before and after and the builder's bars on ``progress``), a samples JSONL path, a CSV file
    of scores (`calimon.data.score_table`), or Inspect
    eval logs (a ``.eval`` / ``.json`` file, a folder or a pattern of them, with options: see
    `calimon.data.inspect_log`). A registered name wins over a folder of the same name."""
    from calimon.data.inspect_log import is_inspect_spec, load_inspect_log

    if is_inspect_spec(name_or_path) and name_or_path.partition("@")[0] not in available():
        return load_inspect_log(name_or_path)
    path = Path(name_or_path)
    from calimon.data.score_table import is_score_table, load_score_table

    if is_score_table(name_or_path):
        return load_score_table(path)
    if name_or_path.endswith(".jsonl") or path.is_file():
        return load_samples(path)
    if "/" in name_or_path or "?" in name_or_path:  # a path, not a name
        raise InputError("no such file or folder", path=name_or_path.partition("?")[0])
    target = samples_path(name_or_path)
    if not target.is_file():
        if name_or_path in AUTO_BUILD and build_if_missing:
            _build_on_first_use(name_or_path, progress)
        else:
            base, version = split_name(name_or_path)
            flag = f" --version {version}" if version is not None else ""
            raise InputError(f"benchmark {name_or_path!r} is not built yet; run "
                             f"`calimon data build {base}{flag}`", field="benchmark")
    _check_built_version(name_or_path)
    return load_samples(target)
