"""Chat transcripts (Inspect's messages, as Inspect, Inspect Scout and ControlArena hold them) as
calimon `Sample` s, rendered exactly as the Inspect log reader renders a logged sample
(`calimon.data.inspect_log`), so `calimon score --benchmark LOG.eval` reads the same text and
gets the same score; and the way back from a span of that text to the messages it falls in.

- ``request``: the task input (`calimon.data.inspect_log.task_input` of the sample's ``input``
  when the caller has it, else the text of the non-system messages before the first assistant
  message: the same text for a task whose input is its user messages);
- ``response``: every message from the first assistant message on, each part under a header
  line (`calimon.data.trajectory`);
- ``meta["messages"]``: one offset record per rendered part, with the message's ``id`` added
  when the message has one (Inspect's message ids, which Scout and Inspect View cite).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from calimon.data.inspect_log import task_input, trajectory_parts
from calimon.data.trajectory import messages_in_span, render_parts
from calimon.samples import Sample, transcript_hash


def request_text(messages: Sequence[Any], input: Any = None) -> str:
    """The task a transcript answers: ``input`` rendered as the log reader renders a sample's
    input, else the non-system messages before the first assistant message."""
    if input is not None:
        return task_input(input)
    first = next((i for i, m in enumerate(messages) if m.role == "assistant"), len(messages))
    return "\n\n".join(m.text for m in messages[:first] if m.role != "system")


def sample_from_messages(messages: Sequence[Any], *, input: Any = None, id: str | None = None,
                         label: bool | None = None, category: str = "safety",
                         task: str = "reasoning", split: str | None = None,
                         source: str = "inspect", meta: dict[str, Any] | None = None
                         ) -> Sample:
    """A transcript of Inspect chat messages as a `Sample` (module docstring); ``id`` defaults
    to the transcript's hash, ``meta`` is merged into the sample's meta."""
    messages = list(messages)
    text, records = render_parts(trajectory_parts(messages))
    for r in records:
        mid = getattr(messages[r["index"]], "id", None)
        if mid:
            r["id"] = mid
    request = request_text(messages, input)
    sid = id or transcript_hash(request, text)
    return Sample(id=sid, request=request, response=text, label=label, category=category,
                  task=task, pair_id=sid, split=split, source=source,
                  meta={**(meta or {}), "messages": records})


def message_refs(sample: Sample, start: int, end: int) -> list[dict[str, Any]]:
    """The messages a span ``[start, end)`` of the sample's response overlaps: each message's
    ``index`` in the transcript, its ``role``, the ``part`` (text, tool_call, tool_result),
    the ``tool`` and the message ``id`` where it has one; one entry per part, in text order."""
    keys = ("index", "role", "part", "tool", "id")
    return [{k: r.get(k) for k in keys} for r in messages_in_span(sample.meta, start, end)]


__all__ = ["message_refs", "request_text", "sample_from_messages"]
