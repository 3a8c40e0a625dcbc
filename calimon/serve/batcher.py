"""The request queue in front of the model: one bounded asyncio queue, one model thread.

``gather`` (the transformers backend): the queue's consumer takes the first waiting transcript,
waits up to ``wait_ms`` for more (at most ``max_batch``), and scores them together in ONE
monitor call on the model thread, whose forward passes take ``pass_rows`` transcripts each
(`calimon.serve.settings.Batching`): with ``pass_rows`` >= the batch, concurrent requests share
one forward pass. Other jobs
(a session step) run alone on the same thread, in queue order: the model never runs two passes
at once.

Without ``gather`` (vLLM, http and chat backends, whose servers batch on their own), every
transcript is scored as it comes, up to ``max_batch`` at once on a thread pool.

Either way at most ``max_queue`` jobs wait or run; one more is refused at once with
`QueueFull`, which the app answers 429 with ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from calimon.samples import Sample
from calimon.serve.metrics import Metrics
from calimon.serve.settings import Batching
from calimon.verdict import Verdict


class QueueFull(Exception):
    """The queue holds ``max_queue`` jobs; ``retry_after`` seconds is the estimate of when it
    will have room."""

    def __init__(self, retry_after: int):
        super().__init__(f"queue full; retry after {retry_after} s")
        self.retry_after = retry_after


@dataclass
class _Job:
    future: asyncio.Future
    sample: Sample | None = None  # a transcript to score in a batch
    call: Callable[[], Any] | None = None  # or a job that runs alone on the model thread
    queued: float = field(default_factory=time.perf_counter)


class Batcher:
    """Scores transcripts through ``score(samples) -> verdicts`` (module docstring)."""

    def __init__(self, score: Callable[[list[Sample]], list[Verdict]], batching: Batching,
                 metrics: Metrics, *, gather: bool):
        self._score = score
        self.batching = batching
        self.metrics = metrics
        self.gather = gather
        self._queue: asyncio.Queue[_Job] = asyncio.Queue()
        self._pending = 0  # jobs queued or running
        self._model_thread = ThreadPoolExecutor(1, thread_name_prefix="calimon-model")
        self._pool = None if gather else ThreadPoolExecutor(
            batching.max_batch, thread_name_prefix="calimon-score")
        self._slots = asyncio.Semaphore(batching.max_batch)
        self._consumer: asyncio.Task | None = None
        self._batch_seconds = 1.0  # the last batch's duration, for Retry-After

    # -- public ----------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the consumer (gather mode); call from the server's event loop."""
        if self.gather and self._consumer is None:
            self._consumer = asyncio.create_task(self._consume())

    async def stop(self) -> None:
        """Stop taking jobs and release the threads."""
        if self._consumer is not None:
            self._consumer.cancel()
            self._consumer = None
        self._model_thread.shutdown(wait=False, cancel_futures=True)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    @property
    def depth(self) -> int:
        """Jobs waiting or running now."""
        return self._pending

    async def score(self, sample: Sample) -> Verdict:
        """The reading of one transcript, batched with whatever else is waiting."""
        if not self.gather:
            return await self._direct(sample)
        return await self._enqueue(_Job(asyncio.get_running_loop().create_future(),
                                        sample=sample))

    async def run_alone(self, call: Callable[[], Any]) -> Any:
        """Run ``call()`` on the model thread with nothing else running (session steps), in
        queue order; counted against the queue bound like a transcript."""
        if not self.gather:
            self._admit()
            try:
                loop = asyncio.get_running_loop()
                return await loop.run_in_executor(self._model_thread, call)
            finally:
                self._release()
        return await self._enqueue(_Job(asyncio.get_running_loop().create_future(), call=call))

    # -- internals -------------------------------------------------------------------------
    def _admit(self) -> None:
        if self._pending >= self.batching.max_queue:
            self.metrics.rejected.inc()
            waves = math.ceil(self._pending / self.batching.max_batch)
            raise QueueFull(max(1, math.ceil(waves * self._batch_seconds)))
        self._pending += 1
        self.metrics.queue_depth.set(self._pending)

    def _release(self, n: int = 1) -> None:
        self._pending -= n
        self.metrics.queue_depth.set(self._pending)

    async def _enqueue(self, job: _Job):
        self._admit()
        self._queue.put_nowait(job)
        return await job.future

    async def _direct(self, sample: Sample) -> Verdict:
        self._admit()
        try:
            async with self._slots:
                loop = asyncio.get_running_loop()
                start = time.perf_counter()
                verdicts = await loop.run_in_executor(self._pool, self._score, [sample])
                self._batch_seconds = time.perf_counter() - start
                self.metrics.batch_size.observe(1)
                return verdicts[0]
        finally:
            self._release()

    async def _consume(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            first = await self._queue.get()
            if first.call is not None:
                await self._run_call(loop, first)
                continue
            batch, held = await self._gather(first)
            await self._run_batch(loop, batch)
            if held is not None:
                await self._run_call(loop, held)

    async def _gather(self, first: _Job) -> tuple[list[_Job], _Job | None]:
        """The batch that starts with ``first``, and a non-batch job met while gathering
        (it runs right after the batch, keeping queue order)."""
        batch = [first]
        deadline = time.perf_counter() + self.batching.wait_ms / 1000
        while len(batch) < self.batching.max_batch:
            if self._queue.empty():
                left = deadline - time.perf_counter()
                if left <= 0:
                    break
                try:
                    job = await asyncio.wait_for(self._queue.get(), left)
                except TimeoutError:
                    break
            else:
                job = self._queue.get_nowait()
            if job.call is not None:
                return batch, job
            batch.append(job)
        return batch, None

    async def _run_batch(self, loop, batch: list[_Job]) -> None:
        live = [j for j in batch if not j.future.done()]  # a client gone while waiting
        start = time.perf_counter()
        try:
            if live:
                verdicts = await loop.run_in_executor(
                    self._model_thread, self._score, [j.sample for j in live])
                self.metrics.batch_size.observe(len(live))
                for job, verdict in zip(live, verdicts, strict=True):
                    if not job.future.done():
                        job.future.set_result(verdict)
        except Exception as exc:  # noqa: BLE001 - every waiting request gets the failure
            for job in live:
                if not job.future.done():
                    job.future.set_exception(exc)
        finally:
            self._batch_seconds = time.perf_counter() - start
            self._release(len(batch))

    async def _run_call(self, loop, job: _Job) -> None:
        try:
            if not job.future.done():
                result = await loop.run_in_executor(self._model_thread, job.call)
                if not job.future.done():
                    job.future.set_result(result)
        except Exception as exc:  # noqa: BLE001 - handed to the waiting request
            if not job.future.done():
                job.future.set_exception(exc)
        finally:
            self._release()
