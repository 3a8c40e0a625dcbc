"""Fitted calibration maps on disk: JSON only, validated on load, never pickle.

File layout (``version`` 1)::

    {"format": "calimon.calibration-map", "version": 1,
     "method": "platt", "params": {...},            # Calibrator.to_dict()
     "fit_set_hash": "sha256:...",                  # fit_set_hash(p, y, ids) of the fit set
     "metrics": {"ece": 0.03, ...},                 # numbers (NaN stored as null)
     "calimon_version": "0.1.0", "extra": {...}}    # extra: free JSON object
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import calimon
from calimon.calibration.maps import Calibrator, calibrator_from_dict
from calimon.errors import InputError
from calimon.jsonio import json_error_where
from calimon.numerics.metrics import as_probabilities
from calimon.validation import as_labels

__all__ = ["FORMAT", "VERSION", "StoredMap", "fit_set_hash", "load_map", "map_from_document",
           "save_map"]

FORMAT = "calimon.calibration-map"
VERSION = 1
_KEYS = ("format", "version", "method", "params", "fit_set_hash", "metrics",
         "calimon_version", "extra")


def fit_set_hash(p: Any, y: Any, ids: Any) -> str:
    """``"sha256:<hex>"`` of the fit set: canonical JSON of ``[id, p, y]`` rows sorted by id.

    The row order of the input does not matter; ids must be unique (they are compared as
    strings).
    """
    pa = as_probabilities(p)
    ya = as_labels(y, n=pa.shape[0], name="y", dtype=np.int64)
    if ids is None or isinstance(ids, str | bytes):
        raise InputError(f"expected one id per sample, got {type(ids).__name__}", field="ids")
    keys = [str(i) for i in ids]
    if len(keys) != pa.shape[0]:
        raise InputError(f"expected {pa.shape[0]} ids (one per sample), got {len(keys)}",
                         field="ids")
    if len(set(keys)) != len(keys):
        raise InputError("expected unique ids, got duplicates", field="ids")
    rows = sorted(zip(keys, (float(v) for v in pa), (int(v) for v in ya), strict=True))
    blob = json.dumps(rows, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return "sha256:" + hashlib.sha256(blob.encode("ascii")).hexdigest()


def _json_metrics(metrics: Any, *, path: str | None = None) -> dict[str, float | int | None]:
    if not isinstance(metrics, dict):
        raise InputError(f"expected an object of numbers, got {type(metrics).__name__}",
                         path=path, field="metrics")
    out: dict[str, float | int | None] = {}
    for k, v in metrics.items():
        if isinstance(v, np.generic):
            v = v.item()
        if not isinstance(k, str) or isinstance(v, bool) or not (
                v is None or isinstance(v, int | float)):
            raise InputError(f"expected a number or null, got {v!r}", path=path,
                             field=f"metrics.{k}")
        out[k] = None if isinstance(v, float) and math.isnan(v) else v
        if isinstance(v, float) and math.isinf(v):
            raise InputError(f"expected a finite number, got {v!r}", path=path,
                             field=f"metrics.{k}")
    return out


def save_map(calibrator: Calibrator, path: str | os.PathLike[str], *, fit_hash: str,
             metrics: dict[str, Any], extra: dict[str, Any] | None = None) -> Path:
    """Write a fitted map and its provenance as JSON (atomically); returns the path."""
    if not isinstance(calibrator, Calibrator):
        raise InputError(f"expected a fitted Calibrator, got {type(calibrator).__name__}",
                         field="calibrator")
    if not isinstance(fit_hash, str) or not fit_hash:
        raise InputError(f"expected a non-empty string (see fit_set_hash), got {fit_hash!r}",
                         field="fit_hash")
    if extra is not None and not isinstance(extra, dict):
        raise InputError(f"expected a dict or None, got {type(extra).__name__}", field="extra")
    d = calibrator.to_dict()
    doc = {"format": FORMAT, "version": VERSION, "method": d["method"], "params": d["params"],
           "fit_set_hash": fit_hash, "metrics": _json_metrics(metrics),
           "calimon_version": calimon.__version__, "extra": extra or {}}
    try:
        text = json.dumps(doc, indent=2, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InputError(f"expected JSON-serializable content without NaN: {exc}",
                         field="extra") from None
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


@dataclass(frozen=True)
class StoredMap:
    """A calibration map read back from disk, with its provenance."""

    calibrator: Calibrator
    fit_set_hash: str
    metrics: dict[str, float | int | None]
    calimon_version: str
    extra: dict[str, Any] = field(default_factory=dict)
    path: str = ""

    @property
    def method(self) -> str:
        """The calibration method's name (e.g. "platt", "isotonic")."""
        return self.calibrator.method

    def predict(self, p: Any) -> np.ndarray:
        """Calibrated probabilities for raw probabilities ``p`` (the stored map applied)."""
        return self.calibrator.predict(p)

    def document(self) -> dict[str, Any]:
        """The map as the JSON object :func:`save_map` writes (what a policy pins)."""
        d = self.calibrator.to_dict()
        return {"format": FORMAT, "version": VERSION, "method": d["method"],
                "params": d["params"], "fit_set_hash": self.fit_set_hash,
                "metrics": dict(self.metrics), "calimon_version": self.calimon_version,
                "extra": dict(self.extra)}

    def digest(self) -> str:
        """``"sha256:<hex>"`` of :meth:`document` as canonical JSON: the map's identity, equal
        for the file and a policy that pins it."""
        blob = json.dumps(self.document(), sort_keys=True, separators=(",", ":"),
                          ensure_ascii=True, allow_nan=False)
        return "sha256:" + hashlib.sha256(blob.encode("ascii")).hexdigest()


def load_map(path: str | os.PathLike[str]) -> StoredMap:
    """Read and validate a file written by :func:`save_map`; anything else raises InputError."""
    where = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read calibration map: {exc}", path=where) from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"expected JSON, got a syntax error: {json_error_where(exc)}", path=where,
                         line=exc.lineno) from None
    except (ValueError, RecursionError) as exc:  # digit-count limit, nesting bombs
        raise InputError(f"expected a calibration map, got unreadable JSON "
                         f"({type(exc).__name__})", path=where) from None
    return map_from_document(doc, where)


def map_from_document(doc: Any, where: str, *, prefix: str = "") -> StoredMap:
    """Validate a map document (the JSON object :func:`save_map` writes, e.g. embedded in a
    policy file); errors name ``where`` and the field, under ``prefix`` (``"pin.map."``)."""
    if not isinstance(doc, dict):
        raise InputError(f"expected a JSON object, got {type(doc).__name__}", path=where,
                         field=prefix.rstrip(".") or None)

    def reject(key: str, expected: str, ok: bool) -> None:
        if not ok:
            raise InputError(f"expected {expected}, got {doc.get(key)!r}", path=where,
                             field=prefix + key)

    reject("format", repr(FORMAT), doc.get("format") == FORMAT)
    reject("version", f"version {VERSION}",
           doc.get("version") == VERSION and not isinstance(doc.get("version"), bool))
    missing = [k for k in _KEYS if k not in doc]
    if missing:
        raise InputError("expected this field, got nothing", path=where,
                         field=prefix + missing[0])
    unknown = sorted(set(doc) - set(_KEYS))
    if unknown:
        raise InputError(f"unexpected field (allowed: {', '.join(_KEYS)})", path=where,
                         field=prefix + unknown[0])
    reject("fit_set_hash", "a non-empty string",
           isinstance(doc["fit_set_hash"], str) and bool(doc["fit_set_hash"]))
    reject("calimon_version", "a string", isinstance(doc["calimon_version"], str))
    reject("extra", "an object", isinstance(doc["extra"], dict))
    try:
        metrics = _json_metrics(doc["metrics"], path=where)
        cal = calibrator_from_dict({"method": doc["method"], "params": doc["params"]})
    except InputError as exc:
        message = str(exc).removeprefix(f"field '{exc.field}': ")
        field_ = prefix + exc.field if exc.field else prefix.rstrip(".") or None
        raise InputError(message, path=where, field=field_) from None
    return StoredMap(calibrator=cal, fit_set_hash=doc["fit_set_hash"], metrics=metrics,
                     calimon_version=doc["calimon_version"], extra=doc["extra"], path=where)
