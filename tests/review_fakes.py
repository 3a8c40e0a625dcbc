"""Helpers of the review tests: a stand-in monitor (no model) whose score and evidence are
written in the transcript, a served policy with certified targets, and the app of
`calimon serve --review` in this process."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Iterator
from pathlib import Path

import httpx

from calimon.deploy.policy_file import Audit, Guarantee, Policy, save_policy
from calimon.review.api import attach
from calimon.review.settings import ReviewSettings
from calimon.scoring.store import MonitorKey
from calimon.serve import Batching, ServeSettings
from calimon.serve.app import create_app
from calimon.serve.decision_log import SQLiteDecisionLog
from calimon.serve.loading import ServedMonitor
from calimon.serve.service import Service
from calimon.verdict import Verdict

KEYS = {"ada": "ada-key-0123456789abcdef", "bob": "bob-key-0123456789abcdef"}


def auth(name: str) -> dict[str, str]:
    """The header of a reviewer's key."""
    return {"Authorization": f"Bearer {KEYS[name]}"}


class Backend:
    name = "transformers"

    def __init__(self):
        self.forward_calls = 0
        self.max_batch_size = 1


class StandIn:
    """Reads the last ``p=0.70`` of the response (0.5 without), or the score ``scores`` gives
    its response; the word EVIDENCE, where it occurs, is a token head's span."""

    readout = "verdict"
    constraint = None

    def __init__(self, scores: dict[str, float] | None = None):
        self.backend = Backend()
        self.key = MonitorKey("stand-in", "rev-1", "direct", "th0", "verdict")
        self.scores = scores or {}

    def score(self, samples):
        self.backend.forward_calls += 1
        out = []
        for s in samples:
            found = re.findall(r"p=([0-9.]+)", s.response)
            p = self.scores.get(s.response, float(found[-1]) if found else 0.5)
            spans = [(m.start(), m.end(), 0.9) for m in re.finditer("EVIDENCE", s.response)]
            out.append(Verdict(transcript_hash=s.transcript_hash, readout="verdict",
                               status="ok", p_raw=p,
                               tokens=len(s.response), extra={"spans": spans}))
        return out


def guarantee(rate: str, alpha: float) -> Guarantee:
    return Guarantee(rate=rate, action="auto_block" if rate == "far" else "auto_pass",
                     alpha=alpha, delta=0.05, certified=True, threshold=0.8, bound=alpha / 2,
                     empirical=0.0, n=500, k=0, method="test")


def policy(folder: Path, *, audit: float = 0.1, far: float | None = 0.2,
           mr: float | None = 0.3, provenance: dict | None = None) -> Path:
    """A p_raw policy: pass under 0.4, review up to 0.8, block above; with targets; pinned to
    the stand-in monitor (version 2: serve refuses an unpinned one)."""
    from calimon.deploy.policy_file import Pin, PinnedMonitor

    gs = [guarantee(r, a) for r, a in (("far", far), ("mr", mr)) if a is not None]
    pin = Pin(design_run_sha256="test",
              monitor=PinnedMonitor(model="stand-in", prompt="direct", readout="verdict"))
    p = Policy(version=2, name="review-test", readout="verdict", model="stand-in",
               calibration="none", score="p_raw", t_low=0.4, t_high=0.8,
               audit=Audit(fraction=audit, seed=3), guarantees=gs,
               provenance=provenance or {}, pin=pin)
    return save_policy(p, folder / "policy.yaml")


def keys_file(folder: Path) -> Path:
    path = folder / "keys.txt"
    path.write_text("# reviewers\n" + "".join(f"{n} {k}\n" for n, k in KEYS.items()))
    return path


def make_service(tmp_path: Path, *, review: ReviewSettings | None = None,
                 policy_path: Path | None = None, monitor: StandIn | None = None) -> Service:
    """The service of `calimon serve --review` around the stand-in monitor."""
    path = policy_path or policy(tmp_path)
    from calimon.deploy.policy_file import load_policy

    served = ServedMonitor(monitor or StandIn(), load_policy(path), "hash0", None, None, [])
    settings = ServeSettings(policy=path, api_key="", batching=Batching(wait_ms=0),
                             log=str(tmp_path / "log.sqlite"), keys_file=keys_file(tmp_path),
                             review=review or ReviewSettings(store=str(tmp_path / "r.sqlite"),
                                                             retain=0.5))
    service = Service(served, SQLiteDecisionLog(tmp_path / "log.sqlite"), settings)
    attach(service, settings)
    return service


def run(service: Service, scenario):
    """Run ``scenario(client)`` against the app (queue started, stopped after)."""

    async def main():
        await service.start()
        try:
            transport = httpx.ASGITransport(app=create_app(service))
            async with httpx.AsyncClient(transport=transport, base_url="http://serve") as c:
                return await scenario(c)
        finally:
            await service.batcher.stop()
            service.review.store.close()

    return asyncio.run(main())


async def score(c, p: float, i: int, who: str = "ada", **extra) -> dict:
    """Score one transcript with score ``p`` (id t{i})."""
    r = await c.post("/v1/score", headers=auth(who), json={
        "id": f"t{i}", "request_id": f"r{i}", "request": f"task {i}",
        "response": f"answer {i} p={p}", **extra})
    assert r.status_code == 200, r.text
    return r.json()


@contextlib.contextmanager
def app_in_thread(service: Service) -> Iterator[str]:
    """The app of ``service`` served by uvicorn in a thread on a free port: its URL; stopped,
    and the review store closed, on exit."""
    import threading
    import time

    import uvicorn
    from serve_server import free_port

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(service), host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        service.review.store.close()
