"""Agent trajectories as plain text with visible message boundaries, and the way back from a
character span of that text to the messages it falls in.

A trajectory is a list of `Part` s (an assistant message's text, one of its tool calls, a tool
result, a user message, ...). `render_parts` writes each as a header line and its body::

    [assistant]
    Let me look at the tests.

    [tool call: bash]
    cmd: ls tests

    [tool result: bash]
    test_add.py

and returns the text with one offset record per part (``meta["messages"]`` of a sample)::

    {"index": 2, "role": "assistant", "part": "tool_call", "tool": "bash",
     "header_start": 27, "start": 45, "end": 58}

``index`` is the message's position in the source transcript, ``[start, end)`` the body's
characters and ``header_start`` where its header line starts. `messages_in_span` maps a span of
the text to the records it overlaps (header included). No third-party import.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

HEADERS = {"text": "[{role}]", "tool_call": "[tool call: {tool}]",
           "tool_result": "[tool result: {tool}]"}
SEPARATOR = "\n\n"


@dataclass(frozen=True)
class Part:
    """One rendered piece of a transcript message: ``part`` is ``text``, ``tool_call`` or
    ``tool_result``; ``tool`` names the tool of a call or a result."""

    index: int
    role: str
    part: str
    body: str
    tool: str | None = None

    def header(self) -> str:
        """The part's header line (without its newline)."""
        return HEADERS[self.part].format(role=self.role, tool=self.tool or "?")


def render_parts(parts: Iterable[Part]) -> tuple[str, list[dict[str, Any]]]:
    """The parts as one text (header line, body, a blank line between parts) and the offset
    record of each part in that text (module docstring)."""
    chunks: list[str] = []
    records: list[dict[str, Any]] = []
    pos = 0
    for p in parts:
        if chunks:
            chunks.append(SEPARATOR)
            pos += len(SEPARATOR)
        header = p.header() + "\n"
        start = pos + len(header)
        chunks += [header, p.body]
        records.append({"index": p.index, "role": p.role, "part": p.part, "tool": p.tool,
                        "header_start": pos, "start": start, "end": start + len(p.body)})
        pos = start + len(p.body)
    return "".join(chunks), records


def messages_in_span(meta: Mapping[str, Any] | None, start: int, end: int
                     ) -> list[dict[str, Any]]:
    """The offset records (``meta["messages"]``) whose part, header included, overlaps the
    span ``[start, end)``, in text order; empty when the sample has no such records."""
    records = (meta or {}).get("messages")
    if not isinstance(records, Sequence):
        return []
    return [r for r in records if isinstance(r, Mapping)
            and r.get("header_start", 0) < end and start < r.get("end", 0)]


def describe(record: Mapping[str, Any]) -> str:
    """A short name of an offset record, e.g. ``#3 tool result: bash`` or ``#2 assistant``."""
    part, tool = record.get("part"), record.get("tool")
    if part == "tool_call":
        what = f"tool call: {tool}"
    elif part == "tool_result":
        what = f"tool result: {tool}"
    else:
        what = str(record.get("role"))
    return f"#{record.get('index')} {what}"


__all__ = ["HEADERS", "Part", "describe", "messages_in_span", "render_parts"]
