"""JSON files of a run: numpy values and paths written as plain JSON, NaN refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def json_default(o):
    """`json.dumps(default=...)` for numpy scalars and arrays and paths."""
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


def json_error_where(exc: ValueError) -> str:
    """What a JSON decoding error says and where, as one phrase: ``Expecting value at column
    3``; json's messages that end in "at" (``Unterminated string starting at``) are not given
    a second one. Another ValueError: its text."""
    if not isinstance(exc, json.JSONDecodeError):
        return str(exc)
    at = "" if exc.msg.endswith(" at") else " at"
    return f"{exc.msg}{at} column {exc.colno}"


def dump_json(obj, path: Path) -> None:
    """Write ``obj`` as indented JSON (one space) with a final newline; NaN is an error."""
    path.write_text(json.dumps(obj, indent=1, default=json_default, allow_nan=False) + "\n")
