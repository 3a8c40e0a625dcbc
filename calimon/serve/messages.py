"""Chat messages (OpenAI's or Inspect's shape, `calimon.serve.schemas.Message`) as the
transcript a monitor reads: the same ``request`` and ``response`` text that
`calimon.data.inspect_log` makes of an Inspect log's sample, so a policy designed on logs reads
served traffic the same way.

- ``request``: the text of the non-system messages before the first assistant message;
- ``response``: every message from the first assistant message on, rendered by
  `calimon.data.trajectory.render_parts` (assistant text, each tool call with its arguments,
  each tool result and its error, later user messages).

Rendering only appends: a trajectory's text is a prefix of the text of the same trajectory with
more messages, which is what lets a session reuse what it already read.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from calimon.data.inspect_log import task_input, trajectory_parts
from calimon.data.trajectory import render_parts
from calimon.serve.body import BadJson, read_json
from calimon.serve.schemas import Message


@dataclass(frozen=True)
class _Call:
    function: str
    arguments: dict[str, Any]
    parse_error: str | None = None


@dataclass(frozen=True)
class _Error:
    type: str
    message: str


@dataclass(frozen=True)
class _Msg:
    """A message with the attributes `calimon.data.inspect_log.trajectory_parts` reads."""

    role: str
    text: str
    tool_calls: list[_Call] = field(default_factory=list)
    function: str | None = None
    error: _Error | None = None


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(p.text for p in content if p.type == "text" and p.text)


def _call(call) -> _Call:
    if isinstance(call.function, str):
        return _Call(call.function, dict(call.arguments or {}), call.parse_error)
    raw = call.function.arguments
    if isinstance(raw, dict):
        return _Call(call.function.name, raw, call.parse_error)
    if not raw.strip():
        return _Call(call.function.name, {}, call.parse_error)
    try:  # within the body's depth limit; NaN taken as JSON readers of tool calls take it
        parsed = read_json(raw, finite=False)
    except BadJson:
        parsed = None
    if isinstance(parsed, dict):
        return _Call(call.function.name, parsed, call.parse_error)
    return _Call(call.function.name, {}, f"arguments are not a JSON object: {raw}")


def normalize(messages: Sequence[Message]) -> list[_Msg]:
    """The messages in one shape; a tool result's tool is named from its ``function``, its
    ``name`` or the earlier call its ``tool_call_id`` answers."""
    names: dict[str, str] = {}
    out = []
    for m in messages:
        calls = []
        for c in m.tool_calls or []:
            call = _call(c)
            calls.append(call)
            if c.id:
                names[c.id] = call.function
        tool = m.function or m.name or names.get(m.tool_call_id or "")
        error = _Error(m.error.type, m.error.message) if m.error is not None else None
        role = "system" if m.role == "developer" else m.role
        out.append(_Msg(role, _text(m.content), calls, tool, error))
    return out


def transcript(messages: Sequence[Message], request: str | None = None) -> tuple[str, str]:
    """``(request, response)`` of a conversation (module docstring); ``request`` replaces the
    task text taken from the messages."""
    msgs = normalize(messages)
    first = next((i for i, m in enumerate(msgs) if m.role == "assistant"), len(msgs))
    task = request if request is not None else task_input(msgs[:first])
    response, _ = render_parts(trajectory_parts(msgs))
    return task, response


def text_fields(messages: Sequence[Message]) -> list[tuple[str, str]]:
    """``(field path, text)`` of every string a monitor reads in ``messages``, for the size and
    text checks that name the offending field."""
    out = []
    for i, m in enumerate(messages):
        if isinstance(m.content, str):
            out.append((f"messages.{i}.content", m.content))
        elif m.content is not None:
            out += [(f"messages.{i}.content.{j}.text", p.text or "")
                    for j, p in enumerate(m.content)]
        for j, c in enumerate(m.tool_calls or []):
            args = c.arguments if isinstance(c.function, str) else c.function.arguments
            out.append((f"messages.{i}.tool_calls.{j}",
                        args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)))
        if m.error is not None:
            out.append((f"messages.{i}.error.message", m.error.message))
    return out
