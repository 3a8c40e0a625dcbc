"""The run-folder files that later commands re-read, each with one writer and one reader:
``curve.csv`` (its columns declared once, versioned) and ``curve.json`` (`CurveResult`,
versioned).

``calimon curve`` writes both (``calimon.studies.curve.outputs``); the deployment tools
(``calimon.deploy.io``: ``thresholds``, ``escalate``, ``apply-policy``) and the report
(``calimon.report.data``) read curve.csv through :func:`read_curve_csv`; the report, compare,
bundles, shift and the deployment commands read curve.json through :func:`read_curve_json`.

curve.json format version 1 (``CURVE_JSON_VERSION``): the parts of `CurveResult`, with
``format_version`` first; a file without it (written before it was recorded) is version 1. A
newer version is refused with a line naming the file (the reader refuses keys it does not
know, so a field added to a part comes with a default and a new ``CURVE_JSON_VERSION``); an
older one is upgraded here, one numbered step at a time (``_CURVE_JSON_UPGRADES``; none yet).

Format version 3 (``CURVE_CSV_VERSION``): one row per sample with the columns ``CURVE_COLUMNS``;
every number is written as ``repr(float)``, the shortest text that reads back as the same
double, so a threshold taken from ``curve.json`` splits the rows of ``curve.csv`` exactly as it
split the scores the curve was computed from. Version 1 wrote scores with 6 significant digits,
which moved samples across their own thresholds; version 3 added ``source``. A missing score is
an empty cell, never 0. ``curve.json`` names the version under ``files["curve.csv"]``.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from calimon.curve_result import CURVE_JSON, CURVE_JSON_VERSION, CurveResult
from calimon.errors import InputError

CURVE_CSV = "curve.csv"
CURVE_CSV_VERSION = 3
CURVE_COLUMNS = ("id", "pair_id", "label", "category", "task", "split", "status", "p_raw",
                 "p_cal", "format_mass", "truncated", "source")
PROB_COLUMNS = ("p_raw", "p_cal", "format_mass")
SCORED_STATUSES = ("ok", "truncated")
_TRUE, _FALSE = {"1", "true", "True", "TRUE"}, {"0", "false", "False", "FALSE"}


@dataclass(frozen=True)
class CurveRow:
    """One line of ``curve.csv``. A missing score (or label) is None, never 0; ``line`` is the
    line it was read from (0 for a row made in memory)."""

    id: str
    pair_id: str
    label: bool | None
    category: str
    task: str
    split: str
    status: str
    p_raw: float | None
    p_cal: float | None
    format_mass: float | None = None
    truncated: bool = False
    source: str = ""
    line: int = field(default=0, compare=False)

    @property
    def scored(self) -> bool:
        """Whether the status says the row carries a score (``ok`` or ``truncated``)."""
        return self.status in SCORED_STATUSES


def format_float(value: float | None) -> str:
    """``repr(float(value))`` (exact round trip), or empty for a missing / NaN value."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return repr(float(value))


def curve_csv_info() -> dict:
    """What ``curve.json`` records about the ``curve.csv`` next to it."""
    return {"version": CURVE_CSV_VERSION, "columns": list(CURVE_COLUMNS),
            "numbers": "repr(float): exact round trip"}


def write_curve_csv(path: str | Path, rows: Iterable[CurveRow]) -> Path:
    """Write ``rows`` as a ``curve.csv`` (header ``CURVE_COLUMNS``, numbers as repr(float))."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(CURVE_COLUMNS)
        for r in rows:
            w.writerow([r.id, r.pair_id, "" if r.label is None else int(r.label), r.category,
                        r.task, r.split, r.status, format_float(r.p_raw), format_float(r.p_cal),
                        format_float(r.format_mass), int(bool(r.truncated)), r.source])
    return out


def _prob(text: str, path: str, line: int, column: str) -> float | None:
    if text == "":
        return None
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not (math.isfinite(v) and 0.0 <= v <= 1.0):
        raise InputError(f"expected a probability in [0, 1] or empty, got {text!r}", path=path,
                         line=line, field=column)
    return v


def _label(text: str, path: str, line: int) -> bool | None:
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    if text == "":
        return None
    raise InputError(f"expected 1, 0 or empty, got {text!r}", path=path, line=line,
                     field="label")


def _row(get, path: str, line: int, seen: dict[str, int]) -> CurveRow:
    rid = get("id")
    if not rid:
        raise InputError("must not be empty", path=path, line=line, field="id")
    if rid in seen:
        raise InputError(f"duplicate id {rid!r} (first seen on line {seen[rid]})", path=path,
                         line=line, field="id")
    seen[rid] = line
    status = get("status")
    if not status:
        raise InputError("must not be empty (expected ok, truncated, parse_failure, error, ...)",
                         path=path, line=line, field="status")
    probs = {c: _prob(get(c), path, line, c) for c in PROB_COLUMNS}
    return CurveRow(id=rid, pair_id=get("pair_id") or rid, label=_label(get("label"), path, line),
                    category=get("category"), task=get("task"), split=get("split"),
                    status=status, p_raw=probs["p_raw"], p_cal=probs["p_cal"],
                    format_mass=probs["format_mass"], truncated=get("truncated") in _TRUE,
                    source=get("source"), line=line)


def read_curve_csv(path: str | Path, *, required: Sequence[str] = ("id", "status"),
                   hint: str = "write a run folder with `calimon curve --out DIR`"
                   ) -> tuple[CurveRow, ...]:
    """Every row of a ``curve.csv`` (or a CSV with the same columns), unscored ones included.

    ``required``: columns the header must have; absent optional columns read as empty (``pair_id``
    defaults to the id); extra columns are ignored. Errors name the file, the line and the
    column; ``hint`` says what to run when the file is missing.
    """
    p = str(path)
    if not Path(path).is_file():
        raise InputError(f"no such file ({hint})", path=p)
    rows: list[CurveRow] = []
    seen: dict[str, int] = {}
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        header = reader.fieldnames or []
        for col in required:
            if col not in header:
                raise InputError(f"missing column {col!r} in the header (got {header}); "
                                 f"{hint}", path=p, line=1, field=col)
        for raw in reader:
            line = reader.line_num
            if None in raw:
                raise InputError(f"{len(raw[None])} more value(s) than header columns",
                                 path=p, line=line)

            def get(name: str, _raw: dict = raw) -> str:
                v = _raw.get(name)
                return "" if v is None else v.strip()

            rows.append(_row(get, p, line, seen))
    return tuple(rows)


# ---------------------------------------------------------------------------- curve.json

# version v -> a doc of version v + 1; a step without one changes no key the reader needs (a
# field added with a default reads from older files as its default)
_CURVE_JSON_UPGRADES: dict[int, Callable[[dict], dict]] = {}
_CURVE_HINT = "not a curve.json of `calimon curve`"


def curve_json_doc(result: CurveResult) -> dict[str, Any]:
    """``result`` as curve.json's object (JSON values), ``format_version`` first."""
    from calimon.typed_json import to_json

    return {**to_json(result), "format_version": CURVE_JSON_VERSION}


def write_curve_json(path: str | Path, result: CurveResult) -> Path:
    """Write ``result`` as a curve.json (indented, NaN refused); returns the path."""
    out = Path(path)
    text = json.dumps(curve_json_doc(result), indent=1, allow_nan=False)
    out.write_text(text + "\n", encoding="utf-8")
    return out


def _version(doc: dict[str, Any], where: str) -> int:
    v = doc.get("format_version", 1)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise InputError(f"expected a format version >= 1, got {v!r}", path=where,
                         field="format_version")
    if v > CURVE_JSON_VERSION:
        raise InputError(f"curve.json format version {v} is newer than this calimon reads "
                         f"(up to {CURVE_JSON_VERSION}); upgrade calimon to read it",
                         path=where, field="format_version")
    return v


def curve_result_from_doc(doc: Any, *, path: str | None = None,
                          required: Sequence[str] = ()) -> CurveResult:
    """The `CurveResult` of a curve.json object already parsed: its version checked (and
    upgraded to the current one), the keys in ``required`` present, every value checked
    against its type. Raises InputError naming ``path`` and the key."""
    from calimon.typed_json import from_json

    if not isinstance(doc, dict):
        raise InputError(f"expected a JSON object, got {type(doc).__name__}: {_CURVE_HINT}",
                         path=path)
    v = _version(doc, path or CURVE_JSON)
    while v < CURVE_JSON_VERSION:
        doc, v = _CURVE_JSON_UPGRADES.get(v, dict)(doc), v + 1
    for key in required:
        if key not in doc:
            raise InputError(f"missing key {key!r}: {_CURVE_HINT}", path=path, field=key)
    return from_json(CurveResult, {**doc, "format_version": CURVE_JSON_VERSION}, path=path)


def parse_curve_json(raw: bytes | str, *, path: str | None = None,
                     required: Sequence[str] = ()) -> tuple[CurveResult, dict[str, Any]]:
    """(the result, the object as written) of curve.json's text (see `curve_result_from_doc`)."""
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise InputError(f"not valid JSON ({exc})", path=path) from None
    return curve_result_from_doc(doc, path=path, required=required), doc


def read_curve_json(path: str | Path, *, required: Sequence[str] = (),
                    hint: str = "write a run folder with `calimon curve --out DIR`"
                    ) -> CurveResult:
    """The `CurveResult` of a curve.json file (a run folder is read as its curve.json); a
    missing file, bad JSON, a newer format version or a value of the wrong type raises
    InputError naming the file."""
    p = Path(path)
    if p.is_dir():
        p = p / CURVE_JSON
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read this curve.json ({exc.strerror or exc}); {hint}",
                         path=str(p)) from None
    return parse_curve_json(raw, path=str(p), required=required)[0]


__all__ = ["CURVE_COLUMNS", "CURVE_CSV", "CURVE_CSV_VERSION", "CURVE_JSON",
           "CURVE_JSON_VERSION", "CurveRow", "SCORED_STATUSES", "curve_csv_info",
           "curve_json_doc", "curve_result_from_doc", "format_float", "parse_curve_json",
           "read_curve_csv", "read_curve_json", "write_curve_csv", "write_curve_json"]
