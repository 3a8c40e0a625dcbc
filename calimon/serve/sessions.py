"""Sessions of `POST /v1/sessions/{id}/steps`: each keeps its trajectory (the messages so far)
and, on the transformers backend, the keys and values of what it already read
(`calimon.serve.kv`; for a probe monitor, up to the probe's layer, with that layer's states:
`calimon.serve.probe_kv`), so a step costs its new tokens.

Memory is bounded twice. The caches together hold at most ``memory_bytes``: past it, the least
recently used sessions lose theirs (the trajectory stays, so the next step recomputes it and
scores exactly as before). At most ``max_sessions`` sessions are kept: past it, the least
recently used one is forgotten whole (its next step rebuilds it from the decision log,
`calimon.serve.steps.follow_log`).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from calimon.serve.kv import KVState
from calimon.serve.metrics import Metrics
from calimon.serve.probe_kv import ProbeState
from calimon.serve.schemas import Message


@dataclass
class Session:
    """One trajectory: its task text (None: taken from the messages), its messages, the steps
    scored, the request id of the last one (as the decision log holds it), and its cache
    (None: none held)."""

    id: str
    request: str | None = None
    messages: list[Message] = field(default_factory=list)
    steps: int = 0
    last_id: str | None = None
    kv: KVState | ProbeState | None = None
    used: float = field(default_factory=time.monotonic)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class SessionStore:
    """The sessions of one server (module docstring)."""

    def __init__(self, *, max_sessions: int, memory_bytes: int, metrics: Metrics):
        self.max_sessions = max_sessions
        self.memory_bytes = memory_bytes
        self.metrics = metrics
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: str) -> Session | None:
        """The session, marked as just used; None when there is none."""
        s = self._sessions.get(session_id)
        if s is not None:
            self._sessions.move_to_end(session_id)
            s.used = time.monotonic()
        return s

    def open(self, session_id: str) -> Session:
        """The session, made if new; the least recently used one is forgotten past
        ``max_sessions``."""
        s = self.get(session_id)
        if s is None:
            s = self._sessions[session_id] = Session(session_id)
            while len(self._sessions) > self.max_sessions:
                self._sessions.popitem(last=False)
        return s

    def drop(self, session_id: str) -> bool:
        """Forget a session; False when there was none."""
        return self._sessions.pop(session_id, None) is not None

    def caches(self, but: Session) -> list[KVState | ProbeState]:
        """The caches the sessions other than ``but`` hold."""
        return [s.kv for s in list(self._sessions.values()) if s is not but and s.kv is not None]

    def cache_bytes(self) -> int:
        """Bytes held by every session's cache."""
        return sum(s.kv.nbytes for s in list(self._sessions.values()) if s.kv is not None)

    def keep_kv(self, session: Session, state: KVState | ProbeState) -> None:
        """Hold ``state`` as the session's cache, then drop the caches of the least recently
        used sessions (this one last) until all fit in ``memory_bytes``."""
        session.kv = state
        session.used = time.monotonic()
        total = self.cache_bytes()
        if total <= self.memory_bytes:
            return
        holders = sorted((s for s in list(self._sessions.values()) if s.kv is not None),
                         key=lambda s: (s is session, s.used))
        for s in holders:
            if total <= self.memory_bytes:
                break
            total -= s.kv.nbytes
            s.kv = None
            self.metrics.evictions.inc()
