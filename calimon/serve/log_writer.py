"""Group commit of the decision log (`GroupWriter`): every decision is committed durably before
it is answered, and the decisions that arrive while a commit is on disk are committed together
in the next one; the request ids looked up meanwhile are read together too (`GroupReader`).

A commit costs one flush to disk (SQLite's WAL under ``synchronous=FULL``, PostgreSQL's WAL
under ``synchronous_commit = on``): several milliseconds on an ordinary disk, so one commit per
decision caps a server at a few hundred decisions a second, whatever else it does. Here one
task takes the decisions waiting, writes them in one transaction
(`calimon.serve.decision_log.DecisionLog.record_many`, in a worker thread), and answers each
waiting request once that transaction's commit returns; meanwhile new decisions gather for the
next commit. A decision is never answered before its commit, and one commit never waits for
decisions that were not there when it began (no timer: a lone request is committed at once).
Lookups of request ids (each request with an id is looked up before it is decided) gather the
same way into one read (`DecisionLog.lookup_many`): a hop to a worker thread costs a server
more than the read itself.

A session step another server logged first (`calimon.serve.session_log.StepTaken`) fails that
step alone; a log that cannot be written (or read) fails every call of that group (each
answered 503 by its route; nothing of a failed commit is logged).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from calimon.serve.metrics import Histogram

MAX_GROUP = 256  # calls in one group at most
GROUP_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class Grouped:
    """Calls of one kind that arrive together, made as one call of ``many`` (a list of items
    to a list of results, an exception in place of an item's result failing that item alone)
    in a worker thread. `start` and `stop` run on the server's event loop; a call before
    `start` (or after `stop`) is made alone."""

    def __init__(self, many: Callable[[list], list], *, max_group: int = MAX_GROUP):
        self.many, self.max_group = many, max_group
        self._pending: list[tuple[Any, asyncio.Future]] = []
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._running = 0
        self._closing = False
        self.sizes: list[int] | None = None  # a test may record each group's size here

    def waiting(self) -> int:
        """Calls waiting for a group or in the one under way."""
        return len(self._pending) + self._running

    async def start(self) -> None:
        """Start the grouping task on the running loop."""
        if self._task is None:
            self._wake, self._closing = asyncio.Event(), False
            self._task = asyncio.create_task(self._run(), name="calimon-log-groups")

    async def stop(self) -> None:
        """Make the calls waiting, then stop."""
        task, self._task = self._task, None
        if task is None:
            return
        assert self._wake is not None
        self._closing = True
        self._wake.set()
        await task

    async def call(self, item: Any) -> Any:
        """``item``'s result, once the group holding it returned; raises what ``many`` raised
        for it (or for its whole group)."""
        if self._task is None:
            [got] = await asyncio.to_thread(self.many, [item])
            if isinstance(got, BaseException):
                raise got
            return got
        future = asyncio.get_running_loop().create_future()
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._pending.append((item, future))
        assert self._wake is not None
        self._wake.set()
        return await asyncio.shield(future)

    def observe(self, size: int) -> None:
        """A group of ``size`` calls returned (a subclass counts it)."""
        if self.sizes is not None:
            self.sizes.append(size)

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                group, self._pending = (self._pending[:self.max_group],
                                        self._pending[self.max_group:])
                await self._make(group)
            if self._closing:
                return

    async def _make(self, group: list[tuple[Any, asyncio.Future]]) -> None:
        self._running = len(group)
        try:
            results = await asyncio.to_thread(self.many, [item for item, _ in group])
        except Exception as exc:  # noqa: BLE001 - each waiting route answers it (503)
            for _, future in group:
                if not future.done():
                    future.set_exception(exc)
            return
        finally:
            self._running = 0
        self.observe(len(group))
        for (_, future), got in zip(group, results, strict=True):
            if future.done():
                continue
            if isinstance(got, BaseException):
                future.set_exception(got)
            else:
                future.set_result(got)


class GroupWriter(Grouped):
    """The group committer of one server's decision ``log`` (module docstring); ``groups``:
    the size of each group committed (a metric of ``/metrics``)."""

    def __init__(self, log: Any, *, max_group: int = MAX_GROUP):
        super().__init__(lambda entries: self.log.record_many(entries), max_group=max_group)
        self.log = log
        self.groups = Histogram("calimon_log_commit_decisions", "Decisions the decision log "
                                "committed per transaction (group commit): _count is the "
                                "commits, _sum the decisions.", GROUP_BUCKETS)

    def observe(self, size: int) -> None:
        """Count a commit of ``size`` decisions."""
        super().observe(size)
        self.groups.observe(size)

    async def record(self, entry: Any) -> Any:
        """Log ``entry`` (a `calimon.serve.decision_log.LoggedDecision`) and return what the
        log holds under its id, once the commit holding it returned; raises what the log raised
        for it (`calimon.serve.session_log.StepTaken`, or the log's fault)."""
        return await self.call(entry)


class GroupReader(Grouped):
    """The request ids a server looks up in its decision ``log``, read in groups."""

    def __init__(self, log: Any, *, max_group: int = MAX_GROUP):
        super().__init__(self._lookup_many, max_group=max_group)
        self.log = log

    def _lookup_many(self, ids: list[str]) -> list:
        found = self.log.lookup_many(list(dict.fromkeys(ids)))
        return [found.get(i) for i in ids]

    async def lookup(self, request_id: str) -> Any:
        """The entry logged under ``request_id`` (None when there is none)."""
        return await self.call(request_id)


__all__ = ["GROUP_BUCKETS", "MAX_GROUP", "GroupReader", "GroupWriter", "Grouped"]
