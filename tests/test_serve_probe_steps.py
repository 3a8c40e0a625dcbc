"""Session steps of probe monitors on the embedded model (`calimon.serve.probe_steps`), through
`calimon serve`'s app in this process: for each head kind, a bundle and the shipped monitor,
every step's reading equals the whole trajectory's (`/v1/score`) within 1e-5 while the step
computes only its new tokens up to the probe's layer; eviction then rebuild, a held state that
the new prompt does not extend, and a trajectory over the input limit read in windows."""

from __future__ import annotations

import asyncio
import math

import httpx
import numpy as np
import pytest
from serve_server import trajectory

from calimon.deploy.policy_file import Audit, Policy, save_policy
from calimon.prompts import encoder_for, load_prompt
from calimon.scoring.probes.artifacts import (
    BaseModelRef,
    HeadCard,
    PromptRef,
    TrainingRef,
    save_head,
)
from calimon.scoring.probes.bundle import BundleCard, BundleModelRef, save_bundle
from calimon.scoring.probes.capture import CaptureSpec
from calimon.scoring.probes.head import ProbeHead
from calimon.scoring.probes.monitor import ProbeMonitor
from calimon.scoring.windows import WindowedMonitor, WindowPolicy
from calimon.serve import ServeSettings
from calimon.serve.app import create_app
from calimon.serve.decision_log import SQLiteDecisionLog
from calimon.serve.kv import common_prefix
from calimon.serve.loading import ServedMonitor
from calimon.serve.messages import transcript
from calimon.serve.schemas import Message
from calimon.serve.service import Service

pytestmark = pytest.mark.model
TOL = 1e-5
LIMIT = 1024
# (name, kind, estimator, layers, pooling, aggregate): every way a head reads its layers
HEADS = [("mean", "sequence", "logistic", (6,), "mean", "max"),
         ("max", "sequence", "mlp", (4,), "max", "max"),
         ("last", "sequence", "logistic", (8,), "last", "max"),
         ("two-layer", "sequence", "logistic", (8, 4), "max", "max"),
         ("attention", "sequence", "attention", (5,), "attention", "max"),
         ("token", "token", "logistic", (6,), None, "top10pct")]
SHIPPED = "amb-open-monitor"


@pytest.fixture(autouse=True)
def _device_rows(smol_backend):
    """A Service sets its backend's prompts per pass to its batching; the session's shared
    backend gets its device default back after each test."""
    yield
    smol_backend.max_batch_size = None


def _params(estimator: str, states: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    """Random weights over states standardized as a trained head's are, so scores spread over
    (0, 1) instead of saturating."""
    rng = np.random.default_rng(seed)
    mean, scale = states.mean(0).astype(np.float64), states.std(0).astype(np.float64) + 1e-3
    d = mean.size
    if estimator == "logistic":
        return {"mean": mean, "scale": scale, "coef": rng.normal(size=d) / math.sqrt(d),
                "intercept": np.zeros(1)}
    if estimator == "mlp":
        return {"mean": mean, "scale": scale, "w1": rng.normal(size=(d, 8)) / math.sqrt(d),
                "b1": np.zeros(8), "w2": rng.normal(size=8) / math.sqrt(8), "b2": np.zeros(1)}
    return {"mean": mean, "scale": scale, "query": rng.normal(size=d) / math.sqrt(d),
            "value": rng.normal(size=d) / math.sqrt(d), "intercept": np.zeros(1)}


def _card(backend, name: str, kind: str, estimator: str, layer: int) -> HeadCard:
    ref, prompt = backend.model_ref, load_prompt("direct")
    return HeadCard(version=1, name=name, kind=kind, estimator=estimator, layer=layer,
                    base_model=BaseModelRef(name=ref.name, revision=ref.revision,
                                            hidden_size=backend.hidden_size,
                                            num_layers=backend.num_layers),
                    prompt=PromptRef(name="direct", template_hash=prompt.template_hash("verdict"),
                                     max_input_tokens=LIMIT),
                    training=TrainingRef(benchmark="none", dataset_hash="-", split="train",
                                         n_samples=0, n_positive=0, categories=[], seed=0),
                    weights_file="", weights_sha256="", calimon_version="0", created="now")


@pytest.fixture(scope="module")
def heads_root(smol_backend, tmp_path_factory):
    """Every head of `HEADS` and a bundle (the max head's score, the token head's spans)."""
    root = tmp_path_factory.mktemp("heads")
    enc = encoder_for(smol_backend, load_prompt("direct"), "verdict", LIMIT)
    e = enc.encode("Fix the failing test.", "I ran pytest; 3 passed, 1 failed. " * 8)
    layers = tuple(sorted({k for h in HEADS for k in h[3]}))
    got = smol_backend.capture([e.ids], enc.prefix_len, CaptureSpec(token_layers=layers),
                               [(e.response_start, e.response_end)])
    for seed, (name, kind, estimator, at, pooling, aggregate) in enumerate(HEADS):
        states = np.concatenate([got.tokens[0][:, layers.index(k)] for k in at], axis=1)
        head = ProbeHead(kind, estimator, at[0], _params(estimator, states, seed),
                         pooling=pooling, aggregate=aggregate, layers=at if len(at) > 1 else ())
        save_head(head, _card(smol_backend, name, kind, estimator, at[0]), root)
    ref = smol_backend.model_ref
    save_bundle(BundleCard(version=1, name="bundle", base_model=BundleModelRef(
        name=ref.name, revision=ref.revision), sequence_head="max", token_head="token",
        recipe="random", command="-", calimon_version="0", created="now"), root)
    return root


def make_service(tmp_path, monitor, *, memory_mib: float = 512.0,
                 pool_mib: float = 256.0) -> Service:
    policy = Policy(version=1, name="probe", readout=monitor.readout, model="smollm2-135m",
                    calibration="none", score="p_raw", t_low=0.4, t_high=0.8,
                    audit=Audit(fraction=0.0, seed=1))
    path = save_policy(policy, tmp_path / "policy.yaml")
    served = ServedMonitor(monitor, policy, "hash", None, None, [])
    settings = ServeSettings(policy=path, api_key="k", log=str(tmp_path / "log.sqlite"),
                             session_memory_mib=memory_mib, prefix_pool_mib=pool_mib)
    return Service(served, SQLiteDecisionLog(tmp_path / "log.sqlite"), settings)


def run(service: Service, scenario):
    async def main():
        await service.start()
        try:
            transport = httpx.ASGITransport(app=create_app(service))
            async with httpx.AsyncClient(transport=transport, base_url="http://serve",
                                         headers={"Authorization": "Bearer k"},
                                         timeout=600) as c:
                return await scenario(c)
        finally:
            await service.batcher.stop()

    return asyncio.run(main())


async def send(c, session: str, steps: list[list[dict]], first: int = 0) -> list[tuple]:
    """Each step to ``session``, then the whole trajectory so far to /v1/score:
    ``(step answer, whole answer, messages so far)`` per step."""
    out, so_far = [], []
    for i, msgs in enumerate(steps):
        so_far = so_far + msgs
        if i < first:
            continue
        r = await c.post(f"/v1/sessions/{session}/steps", json={"step": i, "messages": msgs})
        assert r.status_code == 200, r.text
        w = await c.post("/v1/score", json={"messages": so_far})
        assert w.status_code == 200, w.text
        out.append((r.json(), w.json(), so_far))
    return out


def encoded(monitor, messages: list[dict]):
    request, response = transcript([Message.model_validate(m) for m in messages])
    return monitor.encoder.encode(request, response)


def spans(answer: dict) -> list[tuple[int, int]]:
    return [(e["start"], e["end"]) for e in answer["evidence"]]


def check_equal(step: dict, whole: dict) -> None:
    assert step["tokens"] == whole["tokens"]
    assert abs(step["p_raw"] - whole["p_raw"]) <= TOL, (step["p_raw"], whole["p_raw"])
    assert spans(step) == spans(whole)


def depth(monitor) -> int:
    spec = monitor.capture_spec
    return max(spec.layers + spec.token_layers)


@pytest.mark.parametrize("head", [h[0] for h in HEADS] + ["bundle", SHIPPED])
def test_steps_equal_whole_scoring_and_compute_only_their_new_tokens(smol_backend, heads_root,
                                                                     tmp_path, head):
    root = None if head == SHIPPED else heads_root
    monitor = ProbeMonitor(smol_backend, load_prompt("direct"), head, max_input_tokens=LIMIT,
                           heads_root=root)
    service = make_service(tmp_path, monitor)
    got = run(service, lambda c: send(c, "s", trajectory(3, "t")))
    prev = None
    for step, whole, messages in got:
        check_equal(step, whole)
        enc = encoded(monitor, messages)
        assert step["tokens"] == len(enc.ids)
        if prev is None:  # the first step: everything after the template head
            reused, mode = enc.prefix_len, "full"
        else:  # what the previous prompt held, up to where the new text first differs
            reused, mode = min(common_prefix(prev.ids, enc.ids), prev.response_end), \
                "incremental"
            assert reused >= prev.response_end - 2  # the old transcript is not read again
        assert step["kv"] == {"mode": mode, "reused_tokens": reused,
                              "computed_tokens": len(enc.ids) - reused,
                              "layers": depth(monitor), "windows": None}
        prev = enc
    if head in ("token", "bundle", SHIPPED):
        assert any(spans(s) for s, _, _ in got)  # the spans compared are not all empty


def test_an_evicted_state_is_rebuilt_and_scores_as_before(smol_backend, tmp_path):
    monitor = ProbeMonitor(smol_backend, load_prompt("direct"), SHIPPED, max_input_tokens=LIMIT)
    service = make_service(tmp_path, monitor, memory_mib=10)  # holds one session's state
    a, b = trajectory(4, "a"), trajectory(2, "b", "Tidy the repository.")

    async def scenario(c):
        first = await send(c, "a", a[:2])
        held = service.sessions.get("a").kv.nbytes
        other = await send(c, "b", b)
        evicted = service.sessions.get("a").kv is None
        rest = await send(c, "a", a, first=2)
        return first, held, other, evicted, rest

    first, held, other, evicted, rest = run(service, scenario)
    assert first[1][0]["kv"]["mode"] == "incremental" and 5 * 2 ** 20 < held <= 10 * 2 ** 20
    assert evicted and service.metrics.evictions.value() >= 1
    rebuilt, after = rest
    assert rebuilt[0]["kv"]["mode"] == "full"
    assert rebuilt[0]["kv"]["reused_tokens"] == encoded(monitor, rebuilt[2]).prefix_len
    assert after[0]["kv"]["mode"] == "incremental"
    for step, whole, _ in [*first, *other, *rest]:
        check_equal(step, whole)


def test_a_held_state_the_prompt_does_not_extend_is_not_reused(smol_backend, tmp_path):
    monitor = ProbeMonitor(smol_backend, load_prompt("direct"), SHIPPED, max_input_tokens=LIMIT)
    service = make_service(tmp_path, monitor)
    a, b = trajectory(1, "a"), trajectory(2, "b", "Zip the logs folder.")

    async def scenario(c):
        await send(c, "a", a)
        await send(c, "b", b[:1])
        service.sessions.get("b").kv = service.sessions.get("a").kv  # another trajectory's
        service.sessions.drop("a")
        return await send(c, "b", b, first=1)

    [(step, whole, messages)] = run(service, scenario)
    check_equal(step, whole)
    assert step["kv"]["mode"] == "full"
    assert step["kv"]["reused_tokens"] == encoded(monitor, messages).prefix_len


@pytest.mark.parametrize("pool_mib", [256.0, 0.0])
def test_a_new_session_begins_from_the_cache_of_one_sharing_its_task(smol_backend, tmp_path,
                                                                      pool_mib):
    """Two trajectories of one task (as ControlArena's honest and attack runs of a sample): the
    second session's first step reads only past what the first session's cache shares with it,
    while the first is open and after it ended (`DELETE`: its cache goes to the pool); with
    ``--prefix-pool-mib 0`` every session reads all its own."""
    monitor = ProbeMonitor(smol_backend, load_prompt("direct"), SHIPPED, max_input_tokens=LIMIT)
    service = make_service(tmp_path, monitor, pool_mib=pool_mib)
    task = "Make the test suite pass. " * 12  # a long task text, shared
    a, b, c = (trajectory(2, t, task, mark=t * 3) for t in ("a", "b", "c"))

    async def scenario(cl):
        first = await send(cl, "a", a)
        second = await send(cl, "b", b[:1])
        assert (await cl.delete("/v1/sessions/a")).status_code == 200
        assert (await cl.delete("/v1/sessions/b")).status_code == 200
        third = await send(cl, "c", c[:1])
        return first, second, third

    first, second, third = run(service, scenario)
    for got in (second, third):
        [(step, whole, messages)] = got
        check_equal(step, whole)
        enc = encoded(monitor, messages)
        if pool_mib == 0:
            assert step["kv"]["mode"] == "full"
            assert step["kv"]["reused_tokens"] == enc.prefix_len
            continue
        shared = common_prefix(encoded(monitor, first[0][2]).ids, enc.ids)
        assert step["kv"]["mode"] == "incremental"
        assert step["kv"]["reused_tokens"] == shared > enc.prefix_len + 50  # the task text
        assert step["kv"]["computed_tokens"] == len(enc.ids) - shared
    for step, whole, _ in first:
        check_equal(step, whole)


# the slow suite: a real server or several CLI runs (make test stays near its 8 minutes)
@pytest.mark.slow
def test_a_trajectory_over_the_input_limit_is_read_in_windows_once_each(smol_backend,
                                                                       heads_root, tmp_path):
    limit = 420
    probe = ProbeMonitor(smol_backend, load_prompt("direct"), "bundle", max_input_tokens=limit,
                         heads_root=heads_root)
    monitor = WindowedMonitor(probe, WindowPolicy(overlap=0.25, aggregate="max"))
    service = make_service(tmp_path, monitor)
    got = run(service, lambda c: send(c, "w", trajectory(9, "w")))
    modes = [s["kv"]["mode"] for s, _, _ in got]
    assert modes[0] == "full" and "incremental" in modes and modes[-1] == "windowed"
    windowed = [s for s, _, _ in got if s["kv"]["mode"] == "windowed"]
    assert len(windowed) >= 3
    for s in windowed:
        info = s["kv"]["windows"]
        assert info["policy"] == "window" and info["overlap"] == 0.25
        assert info["windows"] >= 2 and s["truncation"] is None
    later = [s["kv"]["windows"] for s in windowed[1:]]
    assert all(w["computed"] < w["windows"] for w in later)  # windows read before are kept
    for step, whole, _ in got:
        check_equal(step, whole)
