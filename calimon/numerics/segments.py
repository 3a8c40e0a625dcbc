"""Split a response into segments (the units occlusion masks and the random baseline draws).

Kinds:

- ``lines``: one segment per non-blank line (code);
- ``sentences``: a regex splitter for prose: a break after ``.``, ``!`` or ``?`` (with any closing
  quotes or brackets) followed by whitespace, and at every line break; no break after a known
  abbreviation ("e.g.", "Dr.") or after a list number at the start of a line ("1.");
- ``turns``: one segment per dialogue turn, the text after a ``Human:``, ``User:``,
  ``Assistant:`` or ``System:`` marker at the start of a line up to the next marker (the marker
  itself is not part of the segment, so masking a turn keeps the dialogue's shape); text before
  the first marker is a segment of its own;
- ``auto``: ``turns`` when the text has both a user-side and an assistant-side marker, else
  ``lines`` for ``task="code"``, else ``sentences``.

Every segment is trimmed to its non-whitespace content, segments never overlap, are in text
order, and ``segment.text == text[segment.start:segment.end]``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from calimon.errors import InputError

KINDS = ("lines", "sentences", "turns", "auto")
DEFAULT_MASK = "[...]"

_TURN = re.compile(r"^(Human|User|Assistant|System|HUMAN|USER|ASSISTANT|SYSTEM)[ \t]*:", re.M)
_USER_SIDE = {"human", "user"}
_END = re.compile(r"[.!?]+[\"'\u201d\u2019)\]]*(?=\s)")
_ABBREV = {"e.g", "i.e", "etc", "vs", "cf", "mr", "mrs", "ms", "dr", "prof", "st", "no",
           "fig", "eq", "approx", "al", "inc", "ltd", "jr", "sr", "u.s", "a.m", "p.m"}


@dataclass(frozen=True)
class Segment:
    """One segment of a text: [start, end) character offsets and the text there."""

    start: int
    end: int
    text: str

    @property
    def span(self) -> tuple[int, int]:
        """``(start, end)``."""
        return self.start, self.end


def _trimmed(text: str, start: int, end: int) -> Segment | None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return Segment(start, end, text[start:end]) if start < end else None


def _lines(text: str, start: int = 0, end: int | None = None) -> Iterator[tuple[int, int]]:
    end = len(text) if end is None else end
    pos = start
    while pos < end:
        nl = text.find("\n", pos, end)
        stop = end if nl < 0 else nl
        yield pos, stop
        pos = stop + 1


def _is_break(line: str, m: re.Match) -> bool:
    if not m.group().startswith("."):
        return True
    before = line[:m.start()]
    word = before.rsplit(None, 1)[-1] if before.strip() else ""
    bare = word.lstrip("(\"'").lower()
    if bare in _ABBREV:
        return False
    is_list_number = bare.isdigit() and len(bare) <= 3 and not before[:-len(word)].strip()
    return not is_list_number


def _sentences(text: str) -> Iterator[tuple[int, int]]:
    for lo, hi in _lines(text):
        line = text[lo:hi]
        cut = 0
        for m in _END.finditer(line):
            if _is_break(line, m):
                yield lo + cut, lo + m.end()
                cut = m.end()
        yield lo + cut, hi


def _turns(text: str) -> Iterator[tuple[int, int]]:
    marks = list(_TURN.finditer(text))
    if not marks:
        yield 0, len(text)
        return
    yield 0, marks[0].start()
    for k, m in enumerate(marks):
        yield m.end(), marks[k + 1].start() if k + 1 < len(marks) else len(text)


def has_turns(text: str) -> bool:
    """Whether ``text`` looks like a dialogue: a user-side and an assistant-side turn marker."""
    roles = {m.group(1).lower() for m in _TURN.finditer(text)}
    return bool(roles & _USER_SIDE) and "assistant" in roles


def auto_kind(text: str, task: str | None = None) -> str:
    """The segmentation kind ``auto`` resolves to for this text and task."""
    if has_turns(text):
        return "turns"
    return "lines" if task == "code" else "sentences"


def segment(text: str, kind: str = "auto", *, task: str | None = None) -> list[Segment]:
    """Split ``text`` into non-overlapping, whitespace-trimmed segments of the given kind."""
    if not isinstance(text, str):
        raise InputError(f"expected a string, got {type(text).__name__}", field="text")
    if kind not in KINDS:
        raise InputError(f"expected one of {list(KINDS)}, got {kind!r}", field="kind")
    if kind == "auto":
        kind = auto_kind(text, task)
    pieces = {"lines": _lines, "sentences": _sentences, "turns": _turns}[kind](text)
    return [seg for lo, hi in pieces if (seg := _trimmed(text, lo, hi)) is not None]


def _bounds(text: str, seg: Any) -> tuple[int, int]:
    if isinstance(seg, tuple | list) and len(seg) == 2:
        start, end = seg
    elif hasattr(seg, "start") and hasattr(seg, "end"):
        start, end = seg.start, seg.end
    else:
        raise InputError(f"expected a Segment or a (start, end) pair, got {seg!r}", field="seg")
    ok = all(isinstance(x, int) and not isinstance(x, bool) for x in (start, end))
    if not ok or not 0 <= start <= end <= len(text):
        raise InputError(f"expected 0 <= start <= end <= {len(text)}, got ({start!r}, {end!r})",
                         field="seg")
    return start, end


def mask_segment(text: str, seg: Any, mask: str = DEFAULT_MASK) -> str:
    """``text`` with the segment (a Segment, a span, or a (start, end) pair) replaced by ``mask``."""
    start, end = _bounds(text, seg)
    return text[:start] + mask + text[end:]


def mask_spans(text: str, spans: Any, mask: str = DEFAULT_MASK) -> str:
    """``text`` with several spans masked; overlapping or touching spans become one mask."""
    bounds = sorted(_bounds(text, s) for s in spans)
    merged: list[list[int]] = []
    for start, end in bounds:
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    for start, end in reversed(merged):
        text = text[:start] + mask + text[end:]
    return text
