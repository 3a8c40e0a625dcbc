"""`LocalSteps`: the step path of ``calimon serve`` (``POST /v1/sessions/{id}/steps``) in this
process, for an integration that scores a trajectory at every step of an agent.

One session per trajectory, held in serve's own `calimon.serve.sessions.SessionStore` and read
by serve's own step functions: on the transformers backend a verdict or json readout extends
the session's cached keys and values (`calimon.serve.steps.kv_step`, ``kv.mode`` ``cached``),
a probe head or bundle runs only the new tokens up to the probe's layer
(`calimon.serve.probe_steps.probe_step`, ``incremental``), so a step costs its new tokens; a
reading equals the whole trajectory's within float rounding. Any other monitor, and a prompt
over the input limit, is scored whole (``full``). The memory bounds are serve's defaults: past
them a session loses its cache (the next step recomputes it) or is forgotten whole (its next
step starts a new one: here the whole trajectory is at hand, so nothing is lost).

A new session starts from a copy of the cache, among the open sessions' and those of sessions
forgotten lately (kept at most ``pool_mib``), that shares the longest token prefix with its
prompt (serve's `calimon.serve.prefixes.PrefixPool`, exact by the same construction as a
session's own cache): trajectories of one task share their task text, which is then read once.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import fields
from typing import Any

from calimon.samples import Sample
from calimon.verdict import Verdict


class LocalSteps:
    """Sessions of one in-process monitor, read by serve's step functions (module docstring).
    Not thread-safe: the caller holds its monitor's lock (`LocalMonitor`)."""

    def __init__(self, monitor: Any, *, max_sessions: int | None = None,
                 memory_mib: float | None = None, pool_mib: float = 256.0):
        from calimon.serve.kv import HeadCache, supports_kv
        from calimon.serve.loading import ServedMonitor
        from calimon.serve.metrics import Metrics
        from calimon.serve.prefixes import PrefixPool
        from calimon.serve.sessions import SessionStore
        from calimon.serve.settings import Limits, ServeSettings

        # serve's step functions read the monitor through a ServedMonitor; no policy is needed
        # to read (the caller decides), so none is given
        self.served = ServedMonitor(monitor, policy=None, policy_hash="", stored_map=None,
                                    map_path=None, forced=[])
        mib = memory_mib if memory_mib is not None else \
            next(f.default for f in fields(ServeSettings) if f.name == "session_memory_mib")
        self.metrics = Metrics(forward_calls=lambda: getattr(monitor.backend, "forward_calls",
                                                             0),
                               session_bytes=lambda: self.sessions.cache_bytes())
        self.sessions = SessionStore(
            max_sessions=max_sessions or Limits().max_sessions,
            memory_bytes=int(mib * 2 ** 20), metrics=self.metrics)
        self.heads = HeadCache()
        self.kv = self.served.kv_capable and supports_kv(self.served.backend.model)
        self.probe_kv = self.served.probe_capable and supports_kv(self.served.backend.model)
        self.prefixes = PrefixPool(pool_mib)  # forgotten sessions' caches
        self.live: OrderedDict[str, Any] = OrderedDict()  # the open sessions, by key

    @property
    def mode(self) -> str:
        """How a step is read: ``probe`` (incremental probe heads), ``kv`` (a cached verdict or
        json readout) or ``full`` (the whole trajectory each step)."""
        return "probe" if self.probe_kv else "kv" if self.kv else "full"

    def read(self, key: str, sample: Sample) -> tuple[Verdict, dict[str, Any]]:
        """The reading of ``sample`` (the trajectory so far) in the session ``key`` and what it
        cost (serve's ``kv`` record). A trajectory that does not extend the one the session read
        reuses what it shares with it (the longest common token prefix); a step that fails is
        scored whole, so a fault is an error reading, never a score."""
        from calimon.serve.kv import full_use
        from calimon.serve.probe_steps import probe_step
        from calimon.serve.steps import kv_step

        if self.mode != "full":
            session = self._open(key)
            try:
                verdict, kv = (probe_step if self.probe_kv else kv_step)(self, session, sample)
                if verdict.status != "error":
                    return verdict, kv
            except Exception:  # noqa: BLE001 - the whole scoring below isolates the fault
                pass
            self.sessions.drop(key)
            self.live.pop(key, None)
        verdict = self.served.score([sample])[0]
        return verdict, full_use(self, verdict.tokens or 0)

    def _open(self, key: str) -> Any:
        """The session ``key`` (made if new), tracked among the open ones as the store keeps
        them: at most its ``max_sessions``, least recently used dropped first."""
        session = self.live[key] = self.sessions.open(key)
        self.live.move_to_end(key)
        while len(self.live) > self.sessions.max_sessions:
            self.live.popitem(last=False)
        return session

    def forget(self, key: str) -> bool:
        """Forget the session ``key`` (its cache goes to the prefix pool: module docstring);
        False when there was none."""
        self.live.pop(key, None)
        session = self.sessions.get(key)
        if session is None:
            return False
        self.sessions.drop(key)
        self.prefixes.keep(key, session.kv)
        return True


__all__ = ["LocalSteps"]
