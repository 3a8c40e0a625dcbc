"""A trajectory scored step by step through a ``calimon serve`` server: one session per
trajectory (``POST /v1/sessions/{id}/steps``, docs/serve.md), each step sending only the
messages added since the last one, so the server reads only its new tokens.

- The messages go as serve's chat `calimon.serve.schemas.Message` records (Inspect's shape:
  `message_record`), with the task text on step 0. Before a trajectory is sent by session, the
  server's rendering of the records (`calimon.serve.messages.transcript`) is checked to be the
  text ``calimon score`` reads (`calimon.integrations.transcripts`); where it is not, the
  trajectory is scored whole by ``/v1/score`` as text, so the figures stay ``calimon score``'s.
- A trajectory that does not extend the one sent under its key (an agent that rewrote a message,
  or another tool call of the same turn) starts a new session, the old one deleted.
- Recovery: a server that restarted, or a replica that did not hold the session, rebuilds it
  from its decision log by itself. A step answered 409 ``unknown_session`` (the session was
  deleted, or began before the log kept steps) resends the session's steps from step 0 under a
  new session name with new request ids (the old ids are logged answers of the deleted session)
  and then the new step; a 409 ``step_mismatch`` (a step whose answer was lost in transit) starts a new session
  with the whole trajectory.
- `SessionClient.forget` deletes a session at the end of its sample.

Session names are the caller's key (its characters outside ``A-Za-z0-9._:@+=-`` made ``-``) and a
random suffix, so two runs, or two clients of one server, never share a session.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from calimon.samples import Sample


@dataclass
class Trail:
    """One trajectory's session on the server: the caller's key, the session's name, the
    message records sent so far, each step's body as sent (request ids included, for a resend)
    and the last answer."""

    key: str
    session_id: str
    sent: list[dict[str, Any]] = field(default_factory=list)
    bodies: list[dict[str, Any]] = field(default_factory=list)
    last: dict[str, Any] | None = None


def session_name(key: str) -> str:
    """A session id the server accepts, unique to this trail (module docstring)."""
    return re.sub(r"[^A-Za-z0-9._:@+=-]", "-", key)[:180] + "-" + uuid.uuid4().hex[:12]


def message_record(m: Any) -> dict[str, Any]:
    """An Inspect chat message as serve's `Message` record (Inspect's shape: tool calls with
    ``function`` and an ``arguments`` object; tool results with ``function`` and ``error``)."""
    rec: dict[str, Any] = {"role": m.role, "content": m.text}
    calls = getattr(m, "tool_calls", None)
    if calls:
        rec["tool_calls"] = [{"id": c.id, "function": c.function,
                              "arguments": dict(c.arguments or {}),
                              "parse_error": c.parse_error} for c in calls]
    if m.role == "tool":
        rec.update(tool_call_id=m.tool_call_id, function=m.function)
        if m.error is not None:
            rec["error"] = {"type": m.error.type, "message": m.error.message}
    return rec


def renders_as(records: list[dict[str, Any]], sample: Sample) -> bool:
    """Whether the server reads ``records`` (with the sample's task text) as the sample's text."""
    from pydantic import ValidationError

    from calimon.serve.messages import transcript
    from calimon.serve.schemas import Message

    try:
        messages = [Message.model_validate(r) for r in records]
        return transcript(messages, sample.request) == (sample.request, sample.response)
    except (ValidationError, TypeError, ValueError):
        return False


class SessionClient:
    """The sessions of one client of a server (module docstring); ``client``: its
    `calimon.scoring.backends.http_client.JsonClient` (base URL ending in ``/v1``)."""

    def __init__(self, client: Any):
        self.client = client
        self.trails: dict[str, Trail] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    def step(self, key: str, request: str, records: list[dict[str, Any]]) -> dict[str, Any]:
        """The server's answer (`calimon.serve.schemas.StepResponse`) for the trajectory
        ``records`` of task ``request``, sent as the next step of the session ``key`` (the
        steps of one key one at a time)."""
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            trail = self.trails.get(key)
            if trail is not None and records == trail.sent:
                return trail.last  # the same trajectory again: the same answer
            if trail is None or records[:len(trail.sent)] != trail.sent:
                if trail is not None:
                    self._delete(trail.session_id)
                trail = self.trails[key] = Trail(key, session_name(key))
            return self._next(trail, request, records)

    def _next(self, trail: Trail, request: str, records: list[dict[str, Any]]) -> dict:
        from calimon.scoring.backends.http_client import RequestFailed

        body: dict[str, Any] = {"request_id": uuid.uuid4().hex, "step": len(trail.bodies),
                                "messages": records[len(trail.sent):]}
        if not trail.bodies:
            body["request"] = request
        try:
            answer = self._post(trail, body)
        except RequestFailed as exc:
            if exc.status != 409 or "step_mismatch" not in str(exc):
                raise
            self._delete(trail.session_id)  # the server holds a step we have no answer to
            trail.session_id, trail.sent, trail.bodies = session_name(trail.key), [], []
            body = {"request_id": uuid.uuid4().hex, "step": 0, "request": request,
                    "messages": records}
            answer = self._post(trail, body)
        trail.bodies.append(body)
        trail.sent, trail.last = list(records), answer
        return answer

    def _post(self, trail: Trail, body: dict[str, Any]) -> dict[str, Any]:
        """POST one step; on 409 ``unknown_session``, resend the session's steps from step 0
        (module docstring), then this one."""
        from calimon.scoring.backends.http_client import RequestFailed

        try:
            return self.client.request("POST", f"sessions/{trail.session_id}/steps", body)
        except RequestFailed as exc:
            if exc.status != 409 or "unknown_session" not in str(exc):
                raise
        trail.session_id = session_name(trail.key)
        trail.bodies = [{**old, "request_id": uuid.uuid4().hex} for old in trail.bodies]
        body["request_id"] = uuid.uuid4().hex
        path = f"sessions/{trail.session_id}/steps"
        for old in trail.bodies:
            self.client.request("POST", path, old)
        return self.client.request("POST", path, body)

    def forget(self, key: str) -> None:
        """Delete the session of ``key`` on the server (best effort: a server that cannot be
        reached forgets it itself, least recently used first)."""
        with self._lock:
            lock = self._locks.pop(key, None)
        if lock is None:
            return
        with lock:
            trail = self.trails.pop(key, None)
        if trail is not None:
            self._delete(trail.session_id)

    def _delete(self, session_id: str) -> None:
        from calimon.scoring.backends.http_client import RequestFailed

        try:
            self.client.request("DELETE", f"sessions/{session_id}", None)
        except RequestFailed:
            pass


def sendable(messages: Sequence[Any], sample: Sample) -> list[dict[str, Any]] | None:
    """The message records of a trajectory when the server reads them as ``sample``'s text,
    else None (module docstring)."""
    records = [message_record(m) for m in messages]
    return records if records and renders_as(records, sample) else None


__all__ = ["SessionClient", "Trail", "message_record", "renders_as", "sendable",
           "session_name"]
