"""The progress callback every long-running study takes: ``progress(label, total)`` returns a
``tick(n)`` the study calls as ``n`` more items finish (the CLI draws a bar per label).

Also here, because they decide what a person watching a run sees:

- `paced`: the chunks a scoring loop commits, sized so that each takes about
  ``PACE_SECONDS`` (the first is one sample): the bar moves every few seconds, or after every
  sample when one sample takes longer, and an interrupt loses at most the chunk in flight;
- `note`: a line for that person (a benchmark being built, readings reused, an interrupt),
  drawn above the open bar by a progress that has a ``note`` method (`Bars`);
- `Bars`: the command line's progress: one bar at a time, notes, and the bars libraries would
  draw inside it (transformers' "Loading weights") silenced;
- `pulse` and `pulsing`: work deep inside one step of a bar (the thousands of sandboxed code
  checks of a benchmark cell) counted on that bar while it runs, so that it moves between its
  ticks; the code doing the work calls `pulse` and knows nothing of bars.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

Tick = Callable[[int], None]
Progress = Callable[[str, int], Tick]
T = TypeVar("T")

PACE_SECONDS = 2.0  # the wall time a scoring chunk aims at (one sample when that takes longer)


def ticker(progress: Progress | None, label: str, total: int) -> Tick | None:
    """The tick of one stage, or None when there is no progress callback or nothing to do."""
    return progress(label, total) if (progress and total) else None


def note(progress: Progress | None, message: str, *, always: bool = False) -> None:
    """Say ``message`` to the person watching: through ``progress.note`` when the progress has
    one (above its bar); otherwise only when ``always`` (on stderr), as for an interrupt."""
    say = getattr(progress, "note", None)
    if say is not None:
        say(message)
    elif always:
        print(message, file=sys.stderr, flush=True)


_PULSE: list[Callable[[], None]] = []  # the innermost `pulsing` block's counter, if any


def pulse() -> None:
    """One unit of work done inside a `pulsing` block (nothing outside one)."""
    if _PULSE:
        _PULSE[-1]()


@contextmanager
def pulsing(progress: Progress | None, what: str) -> Iterator[None]:
    """While inside, each `pulse` counts one ``what`` on ``progress``'s open bar (a progress
    with a ``pulse(what, n)`` method, as `Bars`); other progresses, and None, count nothing."""
    shown = getattr(progress, "pulse", None)
    if shown is None:
        yield
        return
    lock, done = threading.Lock(), [0]

    def count() -> None:  # the work may run on several threads
        with lock:
            done[0] += 1
            n = done[0]
        shown(what, n)

    _PULSE.append(count)
    try:
        yield
    finally:
        _PULSE.remove(count)


def next_chunk_size(size: int, seconds: float, largest: int,
                    pace: float | None = None) -> int:
    """The size of the chunk after one of ``size`` items that took ``seconds``: about ``pace``
    seconds of work at that rate (default `PACE_SECONDS`), at most double ``size`` and at most
    ``largest``, at least 1."""
    pace = PACE_SECONDS if pace is None else pace
    cap = max(1, min(largest, 2 * size))
    fit = size * pace / seconds if seconds > 0 else math.inf
    return cap if fit >= cap else max(1, int(fit))


def paced(items: Sequence[T], largest: int, *, pace: float | None = None,
          clock: Callable[[], float] | None = None) -> Iterator[Sequence[T]]:
    """``items`` in consecutive chunks: the first of one item, each next one sized from the
    time the caller spent on the last (`next_chunk_size`: about ``pace`` seconds, default
    `PACE_SECONDS`, at most ``largest``; ``clock`` default `time.perf_counter`). A caller
    that stores and reports each chunk before asking for the next moves its bar every few
    seconds (or every item, when one takes longer) and, interrupted, loses only the chunk in
    flight."""
    if isinstance(largest, bool) or largest < 1:
        raise ValueError(f"expected largest >= 1, got {largest!r}")
    clock = clock or time.perf_counter
    start, size = 0, 1
    while start < len(items):
        chunk = items[start:start + size]
        began = clock()
        yield chunk
        size = next_chunk_size(len(chunk), clock() - began, largest, pace)
        start += len(chunk)


def silence_library_bars() -> None:
    """Turn off the progress bars of huggingface_hub and transformers (e.g. "Loading weights"
    while a model loads), which would be drawn inside calimon's own bar."""
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"  # read when those libraries load
    hub = sys.modules.get("huggingface_hub.utils")
    if hub is not None:
        hub.disable_progress_bars()
    tf_logging = sys.modules.get("transformers.utils.logging")
    if tf_logging is not None:
        tf_logging.disable_progress_bar()


class Bars:
    """The command line's `Progress`: a tqdm bar per label on ``stream`` (stderr by default),
    one at a time (a new bar closes the one before), with rate and ETA; `note` prints a line
    above the open bar. Library bars are silenced (`silence_library_bars`)."""

    PULSE_EVERY = 0.5  # seconds between two redraws of a bar's pulse count

    def __init__(self, stream=None):
        self.stream = stream
        self._open = None
        self._drawn = 0.0
        silence_library_bars()

    def __call__(self, label: str, total: int) -> Tick:
        from tqdm import tqdm

        self.close()
        bar = tqdm(total=total, desc=label, unit="sample", file=self.stream or sys.stderr,
                   dynamic_ncols=True)
        self._open = bar

        def tick(n: int) -> None:
            bar.update(n)
            if bar.n >= bar.total:
                bar.close()
                if self._open is bar:
                    self._open = None

        return tick

    def pulse(self, what: str, n: int) -> None:
        """Show ``n`` (``what``) after the open bar's figures, redrawn at most every
        `PULSE_EVERY` seconds: the bar moves while one of its steps runs."""
        bar, now = self._open, time.monotonic()
        if bar is None or now - self._drawn < self.PULSE_EVERY:
            return
        self._drawn = now
        bar.set_postfix_str(f"{what}: {n:,}")

    def note(self, message: str) -> None:
        """A line above the open bar (or just a line when none is open)."""
        from tqdm import tqdm

        tqdm.write(message, file=self.stream or sys.stderr)

    def close(self) -> None:
        """Close the open bar, if any."""
        if self._open is not None:
            self._open.close()
            self._open = None
