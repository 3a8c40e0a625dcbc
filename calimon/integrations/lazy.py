"""`LazyMonitor`: the monitor an integration's arguments name, built on first use and shared by
every task of an async agent framework (Inspect, Scout, ControlArena); scoring runs in a worker
thread (anyio, which they all run on), so the event loop keeps serving the other samples."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from calimon.errors import InputError
from calimon.integrations import Assessment, resolve_monitor


class LazyMonitor:
    """`calimon.integrations.resolve_monitor` of ``kwargs``, built once, in a worker thread (a
    local model's weights load there). ``need_policy``: refuse a monitor without decisions (a
    model without a policy file), for an approver or a protocol that acts on the decision."""

    def __init__(self, kwargs: dict[str, Any], *, need_policy: bool = False):
        self.kwargs = {k: str(v) if isinstance(v, Path) else v for k, v in kwargs.items()}
        self.need_policy = need_policy
        self.monitor: Any = None
        self._lock = threading.Lock()  # not an event loop's lock: one run may start several

    def build(self) -> Any:
        """The monitor (built on the first call; blocking)."""
        with self._lock:
            if self.monitor is None:
                if self.need_policy and not (self.kwargs.get("policy") or self.kwargs.get("url")):
                    raise InputError("this integration acts on the policy's decision: give "
                                     "policy=PATH or url=URL (a calimon serve server applies "
                                     "its own)", field="policy")
                self.monitor = resolve_monitor(**self.kwargs)
        return self.monitor

    async def assess(self, samples: list) -> list[Assessment]:
        """The monitor's `Assessment` of each sample, scored in a worker thread."""
        import anyio

        return await anyio.to_thread.run_sync(lambda: self.build().assess(samples))

    async def assess_step(self, key: str, sample: Any, messages: list) -> Assessment:
        """The monitor's `Assessment` of a trajectory as the next step of its session ``key``
        (`LocalMonitor.assess_step`, `RemoteMonitor.assess_step`), in a worker thread."""
        import anyio

        return await anyio.to_thread.run_sync(
            lambda: self.build().assess_step(key, sample, messages))

    async def forget(self, key: str) -> None:
        """Forget the session of trajectory ``key`` (nothing when the monitor was never
        built)."""
        import anyio

        if self.monitor is not None:
            await anyio.to_thread.run_sync(lambda: self.monitor.forget(key))


__all__ = ["LazyMonitor"]
