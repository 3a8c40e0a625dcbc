"""The JSON reader of `calimon serve`'s request bodies (`read_json`), stricter than JSON parsers
usually are, so that every body a route sees is one its models and the monitor can take:

- UTF-8 only (RFC 8259), no byte order mark;
- numbers finite: ``NaN``, ``Infinity`` and ``-Infinity`` (which Python's parser takes) and a
  number too large for a double (``1e999``, read as infinity) are refused;
- objects and arrays nested at most `MAX_DEPTH` levels (the body itself is level 1). A tool
  call's ``arguments`` nested hundreds of levels deep would otherwise reach the limits of the
  parser and of pydantic's serializer as a server fault.

A body that breaks a rule raises `BadJson`, naming where: ``body`` for the document as a whole,
or the dotted path of the offending value (``messages.1.tool_calls.0.function.arguments.x``).
Values are never echoed back.
"""

from __future__ import annotations

import json
import math
from math import isfinite
from typing import Any

MAX_DEPTH = 64
_KEY_CHARS = 64  # a key longer than this is cut in the field path an error names


class BadJson(ValueError):
    """A body that is not JSON the server reads: the reason and the field (module docstring)."""

    def __init__(self, message: str, field: str = "body"):
        super().__init__(message)
        self.message, self.field = message, field


class _Constant:
    """``NaN``, ``Infinity`` or ``-Infinity`` as the parser met it, found again by the walk
    so the error can name its field."""

    def __init__(self, name: str):
        self.name = name


def read_json(raw: bytes | str, *, finite: bool = True) -> Any:
    """The value of a JSON document under the rules of the module docstring (``finite=False``
    lets non-finite numbers through as floats, for text that is not the request's own JSON).
    Raises `BadJson`."""
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadJson(f"the body is not UTF-8 (byte {exc.start})") from None
    try:
        value = json.loads(raw, parse_constant=_Constant if finite else None)
    except json.JSONDecodeError as exc:
        raise BadJson(f"the body is not valid JSON: {exc.msg} (at character {exc.pos})"
                      ) from None
    except RecursionError:
        raise BadJson(f"the body is nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # an integer of more than 4300 digits
        raise BadJson(f"the body is not JSON this server reads: {exc}") from None
    _walk(value, finite)
    return value


def _walk(value: Any, finite: bool) -> None:
    """Check depth and numbers without recursion (a deep value must not overflow the stack);
    only containers are pushed, so a body of a million numbers costs one pass over them."""
    if not isinstance(value, dict | list):
        if finite:
            _check_number(value, ())
        return
    stack: list[tuple[Any, tuple, int]] = [(value, (), 1)]
    while stack:
        node, path, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise BadJson(f"nested deeper than {MAX_DEPTH} levels of objects and arrays",
                          field_of(path))
        for key, child in (node.items() if type(node) is dict else enumerate(node)):
            kind = type(child)
            if kind is dict or kind is list:
                stack.append((child, (*path, key), depth + 1))
            elif finite and (kind is _Constant or (kind is float and not isfinite(child))):
                _check_number(child, (*path, key))


def _check_number(node: Any, path: tuple) -> None:
    if isinstance(node, _Constant):
        raise BadJson(f"{node.name} is not a JSON number: numbers must be finite",
                      field_of(path))
    if isinstance(node, float) and not math.isfinite(node):
        raise BadJson("a number too large for a double: numbers must be finite",
                      field_of(path))


def field_of(path: tuple) -> str:
    """A path into the body as a dotted field (``body`` for the body itself); long keys cut."""
    parts = [str(p) if len(str(p)) <= _KEY_CHARS else str(p)[:_KEY_CHARS] + "..."
             for p in path]
    return ".".join(parts) or "body"
