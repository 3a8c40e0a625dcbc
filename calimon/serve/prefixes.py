"""Sessions that begin from another session's cache.

A session's first step (or a step whose cache was evicted) would read everything after the
template head. Trajectories of one task share their task text (the honest and attack runs of a
ControlArena sample, the epochs of an Inspect sample, every sample of a setting written from one
template), so the new session starts instead from a copy of the cache, among the open sessions'
and those of sessions ended lately, that shares the longest token prefix with its prompt. The
step functions cut that copy back to the shared prefix as they cut a session's own cache
(`calimon.serve.kv.extend`, `calimon.serve.probe_kv.extend_probe`), so the reading is the one
the whole prompt gives, within float rounding.

`PrefixPool` holds the ended sessions' caches within ``mib`` (least recently kept dropped
first); ``mib`` 0 turns sharing off, the open sessions' caches included. Sharing is by tokens
only, not by client: how long a step takes can tell a client that another session's prompt
began as its own did (as with any prefix cache); a server whose clients must not learn that
of each other runs with 0 (``calimon serve --prefix-pool-mib 0``).
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any


class PrefixPool:
    """The ended sessions' caches a new session may start from (module docstring)."""

    def __init__(self, mib: float):
        self.max_bytes = int(mib * 2 ** 20)
        self._kept: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()  # kept from the event loop, read on the model thread

    @property
    def enabled(self) -> bool:
        """Whether sessions may start from each other's caches at all."""
        return self.max_bytes > 0

    def keys(self) -> list[str]:
        """The ended sessions whose caches are kept, least recently kept first."""
        with self._lock:
            return list(self._kept)

    def keep(self, key: str, state: Any) -> None:
        """Keep an ended session's cache (if it holds tokens), dropping the least recently
        kept past the pool's bytes."""
        if not self.enabled or not reusable(state):
            return
        with self._lock:
            self._kept[key] = state
            self._kept.move_to_end(key)
            while self._kept and sum(s.nbytes for s in self._kept.values()) > self.max_bytes:
                self._kept.popitem(last=False)

    def seed(self, ids: list[int], prefix_len: int, open_states: Iterable[Any]) -> Any:
        """A copy of the cache, among ``open_states`` (other sessions') and the pool's, that
        shares the longest token prefix past the template head (``prefix_len`` tokens) with the
        prompt ``ids``; None when none does or sharing is off. The step functions ask for it
        only for a prompt within the input limit (a cut one is read whole or in windows)."""
        from calimon.serve.kv import common_prefix

        if not self.enabled:
            return None
        with self._lock:
            held = [s for s in open_states if reusable(s)] + list(self._kept.values())
        best, shared = None, prefix_len
        for state in held:
            n = common_prefix(state.ids, ids)
            if n > shared:
                best, shared = state, n
        return None if best is None else copy_state(best)


def reusable(state: Any) -> bool:
    """Whether a session's cache can seed another: it holds tokens (not windows' readings)."""
    return state is not None and bool(getattr(state, "ids", None)) \
        and not getattr(state, "windows", None)


def copy_state(state: Any) -> Any:
    """A copy of a session's cache that a step may cut and extend."""
    import torch

    with torch.inference_mode():
        cache = copy.deepcopy(state.cache)
    if hasattr(state, "states"):  # a probe session's state
        return type(state)(list(state.ids), cache, state.response_start,
                           {k: v.copy() for k, v in state.states.items()})
    return type(state)(list(state.ids), cache)


__all__ = ["PrefixPool", "copy_state", "reusable"]
