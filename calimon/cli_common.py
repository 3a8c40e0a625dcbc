"""Pieces every CLI module shares: one-line errors, progress bars, JSON-ready values."""

from __future__ import annotations

import functools
import math
import sys
from typing import Any

import typer

from calimon.errors import CalimonError


def cli_errors(fn):
    """Library errors become one line on stderr and the error's exit code."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except CalimonError as exc:
            typer.echo(f"calimon: error: {exc}", err=True)
            raise typer.Exit(exc.exit_code) from None

    return wrapper


def progress_factory(quiet: bool):
    """A bar factory ``(label, total) -> tick(n)`` drawing on stderr (rate and ETA); None with
    --quiet."""
    if quiet:
        return None
    from tqdm import tqdm

    def make(label: str, total: int):
        bar = tqdm(total=total, desc=label, unit="sample", file=sys.stderr, dynamic_ncols=True)

        def tick(n: int) -> None:
            bar.update(n)
            if bar.n >= bar.total:
                bar.close()

        return tick

    return make


def json_ready(x: Any) -> Any:
    """NaN and infinities become null, tuples lists (for json.dumps with allow_nan=False)."""
    if isinstance(x, dict):
        return {k: json_ready(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [json_ready(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x
