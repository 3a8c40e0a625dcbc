"""One policy from two folders through `calimon serve`'s loaded monitor, the Inspect scorer and the
ControlArena monitor: the same decisions from the folder its design run is in, from another,
and after the run is gone (the policy pins its map and monitor, calimon.deploy.pinned), and the
server decides each transcript as the Inspect scorer does."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integrations,
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]

from integrations_support import MODEL, isolate_inspect  # noqa: E402
from test_inspect_log import MOCK, _policy, _task  # noqa: E402
from test_policy_pin import PROV, design_run, escalate  # noqa: E402

N = 6


@pytest.fixture(scope="module")
def world(tmp_path_factory, tiny_qwen3):
    """A design run and, in another folder, the policy `calimon escalate` designed on it; an
    Inspect log of the small coding task to score."""
    from inspect_ai import eval as inspect_eval
    from inspect_ai.model import get_model

    from calimon.integrations import LocalMonitor

    root = tmp_path_factory.mktemp("pin-integration")
    work, elsewhere = root / "work", root / "elsewhere"
    elsewhere.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        isolate_inspect(mp, root)
        mp.chdir(root)
        prov = {k: LocalMonitor.from_model(MODEL).provenance[k] for k in PROV}
        design_run(work / "runs" / "design", prov)
        (work / "policies").mkdir()
        mp.chdir(work)
        policy = escalate(Path("runs/design"), work / "policies" / "p.yaml", prov).resolve()
        task = _task()
        task.dataset = task.dataset[:N]
        [log] = inspect_eval(task, model=get_model(MOCK, custom_outputs=_policy),
                             log_dir=str(root / "logs"), display="none")
        assert log.status == "success", log.error
        yield {"root": root, "work": work, "elsewhere": elsewhere, "policy": policy, "log": log,
               "mp": mp}


def _decisions(world) -> dict[str, dict]:
    """Each integration's decision per sample, from the current folder."""
    from inspect_ai import score as inspect_score
    from inspect_ai.agent import AgentState

    from calimon.integrations.control import calimon_monitor_builder
    from calimon.integrations.inspect import monitor_scorer
    from calimon.integrations.transcripts import sample_from_messages
    from calimon.serve.loading import ServedMonitor
    from calimon.serve.settings import ServeSettings

    policy, log = world["policy"], world["log"]
    rescored = inspect_score(log, monitor_scorer(policy=str(policy)), action="overwrite",
                             display="none")
    inspect = {s.id: (s.scores["monitor_scorer"].answer,
                      s.scores["monitor_scorer"].metadata["calimon"]["p_cal"])
               for s in rescored.samples}
    agent = calimon_monitor_builder(policy=str(policy))
    control = {}
    for s in log.samples:
        state = asyncio.run(agent(AgentState(messages=list(s.messages)), []))
        meta = [m for m in state.messages if m.role == "assistant"][-1].metadata
        control[s.id] = (meta["calimon"]["decision"], meta["suspicion_score"])
    served = ServedMonitor.load(ServeSettings(policy=policy))
    samples = [sample_from_messages(s.messages, input=s.input, id=str(s.id))
               for s in log.samples]
    serve = {x.id: (d["decision"], d["p_cal"]) for x, v in
             zip(samples, served.score(samples), strict=True)
             for d in [served.decide(v, x.id)]}
    return {"inspect": inspect, "control": control, "serve": serve,
            "map": served.map_path}


def test_one_policy_decides_alike_from_two_folders_and_without_its_run(world):
    mp = world["mp"]
    got = []
    for folder in (world["work"], world["elsewhere"]):
        mp.chdir(folder)
        got.append(_decisions(world))
    shutil.rmtree(world["work"] / "runs")
    got.append(_decisions(world))
    assert got[0] == got[1] == got[2]
    d = got[0]
    assert d["map"] == f"{world['policy']}#pin.map"
    for sid, (decision, p_cal) in d["inspect"].items():  # one rendering, one answer
        assert d["serve"][sid][0] == decision
        assert d["serve"][sid][1] == pytest.approx(p_cal, abs=1e-5)
    assert all(dec in ("pass", "review", "block") for dec, _ in d["control"].values())
