"""Group commit of the decision log (`GroupWriter`): every decision is committed durably before
it is answered, and the decisions that arrive while a commit is on disk are committed together
in the next one.

A commit costs one flush to disk (SQLite's WAL under ``synchronous=FULL``, PostgreSQL's WAL
under ``synchronous_commit = on``): several milliseconds on an ordinary disk, so one commit per
decision caps a server at a few hundred decisions a second, whatever else it does. Here one
task takes the decisions waiting, writes them in one transaction
(`calimon.serve.decision_log.DecisionLog.record_many`, in a worker thread), and answers each
waiting request once that transaction's commit returns; meanwhile new decisions gather for the
next commit. A decision is never answered before its commit, and one commit never waits for
decisions that were not there when it began (no timer: a lone request is committed at once).

A session step another server logged first (`calimon.serve.session_log.StepTaken`) fails that
step alone; a log that cannot be written fails every decision of that group (each answered 503
by its route, none logged).
"""

from __future__ import annotations

import asyncio
from typing import Any

MAX_GROUP = 256  # decisions in one transaction at most


class GroupWriter:
    """The group committer of one server's decision ``log`` (module docstring). `start` and
    `stop` run on the server's event loop; `record` before `start` (or after `stop`) commits
    its decision alone."""

    def __init__(self, log: Any, *, max_group: int = MAX_GROUP):
        self.log, self.max_group = log, max_group
        self._pending: list[tuple[Any, asyncio.Future]] = []
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._writing = 0
        self._closing = False
        self.commits = 0  # transactions committed (a test reads how decisions were grouped)
        self.written = 0  # decisions they held

    def waiting(self) -> int:
        """Decisions waiting for a commit or in the one on its way to disk."""
        return len(self._pending) + self._writing

    async def start(self) -> None:
        """Start the committing task on the running loop."""
        if self._task is None:
            self._wake = asyncio.Event()
            self._task = asyncio.create_task(self._run(), name="calimon-log-writer")

    async def stop(self) -> None:
        """Commit what is waiting, then stop."""
        task, self._task = self._task, None
        if task is None:
            return
        assert self._wake is not None
        self._closing = True
        self._wake.set()
        await task

    async def record(self, entry: Any) -> Any:
        """Log ``entry`` (a `calimon.serve.decision_log.LoggedDecision`) and return what the
        log holds under its id, once the commit holding it returned; raises what the log raised
        for it."""
        if self._task is None:
            [got] = await asyncio.to_thread(self.log.record_many, [entry])
            if isinstance(got, BaseException):
                raise got
            return got
        future = asyncio.get_running_loop().create_future()
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._pending.append((entry, future))
        assert self._wake is not None
        self._wake.set()
        return await asyncio.shield(future)

    def _take(self) -> list[tuple[Any, asyncio.Future]]:
        group, self._pending = (self._pending[:self.max_group],
                                self._pending[self.max_group:])
        return group

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                await self._commit(self._take())
            if self._closing:
                return

    async def _commit(self, group: list[tuple[Any, asyncio.Future]]) -> None:
        self._writing = len(group)
        try:
            results = await asyncio.to_thread(self.log.record_many, [e for e, _ in group])
        except Exception as exc:  # noqa: BLE001 - each waiting route answers it (503)
            for _, future in group:
                if not future.done():
                    future.set_exception(exc)
            return
        finally:
            self._writing = 0
        self.commits += 1
        self.written += len(group)
        for (_, future), got in zip(group, results, strict=True):
            if future.done():
                continue
            if isinstance(got, BaseException):
                future.set_exception(got)
            else:
                future.set_result(got)


__all__ = ["MAX_GROUP", "GroupWriter"]
