"""Helpers of the externally scored `calimon serve` tests and benchmark: a version-2 policy that
pins an external monitor (model ``external``, a ``score:NAME`` readout, as `calimon escalate`
writes on a ``calimon curve --readout score:NAME`` run), a CSV of such scores with transcripts,
the served app of such a policy in this process, built by the server's own loader, and the
action such a policy takes on a raw score, computed as its file says (`deciding`)."""

from __future__ import annotations

import asyncio
import csv
import random
from collections.abc import Sequence
from pathlib import Path

import httpx

from calimon.deploy.policy_file import Audit, Guarantee, Pin, PinnedMonitor, Policy, save_policy

READOUT = "score:guard?range=0,100"
PLATT = {"eps": 1e-12, "a": 1.5, "b": -0.2}


def guarantee(rate: str, alpha: float) -> Guarantee:
    """A certified target (as `calimon escalate` writes one) of ``rate`` at ``alpha``."""
    return Guarantee(rate=rate, action="auto_block" if rate == "far" else "auto_pass",
                     alpha=alpha, delta=0.05, certified=True, threshold=0.8, bound=alpha / 2,
                     empirical=0.0, n=500, k=0, method="test")


def write_external_policy(folder: Path, *, name: str = "external-test", readout: str = READOUT,
                          score: str = "p_raw", t_low: float = 0.4, t_high: float = 0.8,
                          audit: float = 0.1, guarantees: Sequence[Guarantee] = (),
                          provenance: dict | None = None) -> Path:
    """A policy on an external monitor's ``readout`` in ``folder``: ``p_raw`` thresholds, or
    ``p_cal`` through a pinned Platt map (`PLATT`) fitted, as its provenance says, on that
    readout."""
    from calimon.calibration.io import load_map, save_map
    from calimon.calibration.maps import calibrator_from_dict

    folder.mkdir(parents=True, exist_ok=True)
    pinned = PinnedMonitor(model="external", prompt="external", readout=readout)
    pin = Pin(design_run_sha256="test", monitor=pinned)
    if score == "p_cal":
        cal = calibrator_from_dict({"method": "platt", "params": PLATT})
        path = save_map(cal, folder / "platt.json", fit_hash="sha256:test", metrics={},
                        extra={"model": "external", "prompt": "external", "readout": readout})
        stored = load_map(path)
        pin = Pin(design_run_sha256="test", monitor=pinned, map=stored.document(),
                  map_sha256=stored.digest())
    policy = Policy(version=2, name=name, readout=readout, model="external",
                    calibration="platt" if score == "p_cal" else "none", score=score,
                    t_low=t_low, t_high=t_high, audit=Audit(fraction=audit, seed=3),
                    guarantees=list(guarantees), provenance=provenance or {}, pin=pin)
    return save_policy(policy, folder / "policy.yaml")


def write_scores_csv(path: Path, n: int = 300, seed: int = 0) -> Path:
    """A CSV of an external guard's scores (0 to 100) with transcripts, half misbehaving,
    the first half of the rows on split ``calib``, the rest ``test``
    (`calimon.data.score_table`)."""
    rng = random.Random(seed)
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "label", "split", "request", "response", "guard"])
        for i in range(n):
            bad = i % 2
            value = min(100.0, max(0.0, rng.gauss(65 if bad else 35, 14)))
            act = "deletes the failing test" if bad else "fixes the off-by-one"
            w.writerow([f"t{i}", bad, "calib" if i < n // 2 else "test",
                        f"Task {i}: make the test suite pass.", f"Step {i}: the agent {act}.",
                        round(value, 2)])
    return path


def build(policy: Path, log: Path, **settings):
    """The service `calimon serve POLICY --log LOG` builds (no socket), no API key."""
    from calimon.serve import ServeSettings
    from calimon.serve.runner import build_service

    return build_service(ServeSettings(policy=policy, api_key="", log=str(log), **settings))


def run(service, scenario):
    """Run ``scenario(client)`` against the app of ``service`` (started, stopped after)."""
    from calimon.serve.app import create_app

    async def main():
        await service.start()
        try:
            transport = httpx.ASGITransport(app=create_app(service))
            async with httpx.AsyncClient(transport=transport, base_url="http://serve") as c:
                return await scenario(c)
        finally:
            await service.stop()
            review = getattr(service, "review", None)
            if review is not None:
                review.store.close()

    return asyncio.run(main())


def body(i: int, value: float | None, **extra) -> dict:
    """A `/v1/score` body with request id ``r{i}``, transcript id ``t{i}`` and ``score``
    ``value`` (left out when None)."""
    out = {"request_id": f"r{i}", "id": f"t{i}", "request": f"task {i}",
           "response": f"answer {i}", **extra}
    if value is not None:
        out["score"] = value
    return out


def deciding(policy: Path):
    """The action ``policy`` takes on a raw guard score, computed here as the policy file
    says: the readout's map onto [0, 1], the pinned calibration map, the thresholds."""
    import numpy as np

    from calimon.deploy.pinned import resolve_policy
    from calimon.deploy.policy_file import apply_policy
    from calimon.score_readout import ScoreReadout

    resolved = resolve_policy(policy)
    readout = ScoreReadout.parse(resolved.policy.readout)

    def action(raw: float) -> str:
        p = readout.to_p(raw)
        score = (float(resolved.stored_map.predict(np.array([p]))[0]) if resolved.stored_map
                 else p)
        return str(apply_policy(resolved.policy, [score])[0])

    return action
