"""The progress callback every long-running study takes: ``progress(label, total)`` returns a
``tick(n)`` the study calls as ``n`` more items finish (the CLI draws a bar per label)."""

from __future__ import annotations

from collections.abc import Callable

Tick = Callable[[int], None]
Progress = Callable[[str, int], Tick]


def ticker(progress: Progress | None, label: str, total: int) -> Tick | None:
    """The tick of one stage, or None when there is no progress callback or nothing to do."""
    return progress(label, total) if (progress and total) else None
