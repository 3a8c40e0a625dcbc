"""Pieces every CLI module shares: one-line errors, progress bars, JSON-ready values, and the
number and table formats of the printed reports."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
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
            raise typer.Exit(int(exc.exit_code)) from None

    return wrapper


def progress_factory(quiet: bool):
    """The command line's progress (`calimon.progress.Bars`): one bar at a time on stderr
    (rate and ETA), lines above it; None with --quiet. Library bars (transformers' "Loading
    weights") are silenced either way."""
    from calimon.progress import Bars, silence_library_bars

    if quiet:
        silence_library_bars()
        return None
    return Bars()


def json_ready(x: Any) -> Any:
    """NaN and infinities become null, tuples lists (for json.dumps with allow_nan=False)."""
    if isinstance(x, dict):
        return {k: json_ready(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [json_ready(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def num(x: float | None, digits: int = 4) -> str:
    """A number as printed in the reports: ``digits`` significant digits, n/a for None/NaN."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.{digits}g}"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, rule: bool = False) -> str:
    """A plain-text table, columns padded to their widest cell; ``rule`` adds a dashed line
    under the headers."""
    cells = [[str(c) for c in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
             for r in cells]
    if rule:
        lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def usage_line(usage: dict) -> str:
    """One line on what a chat-API run asked for (and paid, when prices are known)."""
    cost = usage.get("cost_usd")
    return (f"API: {usage['requests']} requests ({usage['journal_hits']} answered from the "
            f"journal, {usage['failed']} failed), {usage['prompt_tokens']} prompt tokens, "
            f"{usage['completion_tokens']} completion tokens"
            + (f", cost ${cost:.4f}" if cost is not None else ", cost unknown (no prices "
               "in the model config)"))
