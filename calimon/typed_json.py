"""Frozen dataclasses to and from JSON: one generic writer (`to_json`) and one validating
reader (`from_json`), driven by the classes' type hints.

Types understood: dataclasses, ``X | None``, ``tuple[X, ...]``, ``Mapping[str, X]`` /
``dict[str, X]``, ``str``, ``int``, ``float``, ``bool`` and ``Any`` (any JSON value, kept as
read). A float that is NaN or infinite is written as null; a null read into a ``float`` (not
``float | None``) is NaN, or what the field's ``null`` metadata says (``NULL_INF``: +inf, as
for a threshold that flags nothing). An ``int`` is read as a float where a float is expected,
never the reverse; a bool is never a number.

Field metadata (`dataclasses.field(metadata=...)`) shapes what is written:

- ``OMIT_NONE``: the key is left out when the value is None (a part only some runs have);
- ``prefix(p)``: a ``Mapping`` written as one key ``p + name`` per item, at the object's level;
- ``REST``: a ``Mapping`` holding every key the class does not declare, written as it was;
- ``NOT_IN_JSON``: the field is neither written nor read (it keeps its default when read).

An object's key that the class neither declares nor collects (``REST``) is an error (naming
the class, or its ``JSON_NAME``), as is a missing key of a field without a default. Errors are `InputError` naming the file (``path``)
and the key path (``operating_points[2].mr``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from collections.abc import Mapping
from typing import Any

from calimon.errors import InputError

OMIT_NONE = {"omit_none": True}
NULL_INF = {"null": math.inf}
REST = {"rest": True}
NOT_IN_JSON = {"json": False}


class FieldError(ValueError):
    """Raised by a class's own check (``__post_init__``) for one of its keys; the reader
    reports it at that key."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key, self.message = key, message


def prefix(p: str) -> dict[str, str]:
    """Field metadata: write a mapping as keys ``p + name`` beside the object's own keys."""
    return {"prefix": p}


# ---------------------------------------------------------------------------- writing

def to_json(value: Any) -> Any:
    """``value`` as plain JSON values (dict, list, str, int, float, bool, None), following the
    field metadata (module docstring)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _object_to_json(value)
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if hasattr(value, "item"):  # a numpy scalar
        return to_json(value.item())
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def _object_to_json(obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        meta, value = f.metadata, getattr(obj, f.name)
        if meta.get("json", True) is False or (value is None and meta.get("omit_none")):
            continue
        if meta.get("rest") or "prefix" in meta:
            start = meta.get("prefix", "")
            out.update({f"{start}{k}": to_json(v) for k, v in (value or {}).items()})
        else:
            out[f.name] = to_json(value)
    return out


# ---------------------------------------------------------------------------- reading

def from_json(cls: type, data: Any, *, path: str | None = None, where: str = "") -> Any:
    """Build a ``cls`` (a dataclass, or any type of the module docstring) from JSON values,
    checking every value against its type hint; raises InputError naming ``path`` and the key."""
    return _read(cls, data, _Where(path, where), {})


@dataclasses.dataclass(frozen=True)
class _Where:
    path: str | None
    key: str

    def at(self, part: str | int) -> _Where:
        if isinstance(part, int):
            return _Where(self.path, f"{self.key}[{part}]")
        return _Where(self.path, f"{self.key}.{part}" if self.key else part)

    def fail(self, message: str) -> InputError:
        return InputError(message, path=self.path, field=self.key or None)


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
             int: "an integer", float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _read(tp: Any, value: Any, where: _Where, meta: Mapping[str, Any]) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1:
            raise TypeError(f"unsupported union {tp!r}")
        return _read(rest[0], value, where, meta)
    if dataclasses.is_dataclass(tp):
        return _read_object(tp, value, where)
    if origin is tuple:
        if not isinstance(value, list):
            raise where.fail(f"expected a list, got {_kind(value)}")
        return tuple(_read(args[0], v, where.at(i), meta) for i, v in enumerate(value))
    if origin in (dict, Mapping):
        if not isinstance(value, dict):
            raise where.fail(f"expected an object, got {_kind(value)}")
        return {k: _read(args[1], v, where.at(k), meta) for k, v in value.items()}
    return _read_scalar(tp, value, where, meta)


def _read_scalar(tp: Any, value: Any, where: _Where, meta: Mapping[str, Any]) -> Any:
    if tp is float:
        if value is None:
            return meta.get("null", math.nan)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise where.fail(f"expected a number, got {_kind(value)}")
    ok = {int: isinstance(value, int) and not isinstance(value, bool),
          bool: isinstance(value, bool), str: isinstance(value, str)}
    if tp not in ok:
        raise TypeError(f"unsupported type {tp!r}")
    if not ok[tp]:
        raise where.fail(f"expected {_kind(tp())}, got {_kind(value)}")
    return value


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _read_object(cls: type, value: Any, where: _Where) -> Any:
    if not isinstance(value, dict):
        raise where.fail(f"expected an object, got {_kind(value)}")
    hints, kwargs, seen = _hints(cls), {}, set()
    rest_field = None
    for f in dataclasses.fields(cls):
        meta = f.metadata
        if meta.get("json", True) is False:
            continue
        if meta.get("rest"):
            rest_field = f.name
            continue
        if "prefix" in meta:
            keys = [k for k in value if k.startswith(meta["prefix"])]
            seen.update(keys)
            got = {k[len(meta["prefix"]):]: value[k] for k in keys}
            kwargs[f.name] = _read(hints[f.name], got, where, meta)
            continue
        if f.name not in value:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise where.at(f.name).fail("missing key")
            continue
        seen.add(f.name)
        kwargs[f.name] = _read(hints[f.name], value[f.name], where.at(f.name), meta)
    unknown = [k for k in value if k not in seen]
    if rest_field is not None:
        kwargs[rest_field] = {k: value[k] for k in unknown}
    elif unknown:
        what = getattr(cls, "JSON_NAME", cls.__name__)
        raise where.at(unknown[0]).fail(f"unexpected key (not a field of {what})")
    try:
        return cls(**kwargs)
    except FieldError as exc:
        raise where.at(exc.key).fail(exc.message) from None
    except (TypeError, ValueError) as exc:
        raise where.fail(str(exc)) from None


__all__ = ["FieldError", "NOT_IN_JSON", "NULL_INF", "OMIT_NONE", "REST", "from_json", "prefix", "to_json"]
