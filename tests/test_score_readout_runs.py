"""An external monitor's scores through every offline command, with no model: Inspect logs
written by Inspect itself (its mock model) whose steps record a ``suspicion_score`` in their
message metadata and whose scorers give the maximum and a boolean flag, as a ControlArena
evaluation's logs do (tests/test_integrations_control.py reads a real one); then ``calimon
curve --readout score:...``, ``thresholds``, ``escalate``, ``apply-policy``, ``shift``,
``compare`` and ``report`` on the runs. The whole chain runs in one process that never
imports torch."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("inspect_ai")
# slow: nine commands in a fresh process (the shift check's permutations, the report's figures)
pytestmark = [pytest.mark.slow,
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]  # inspect_ai's own

MOCK = "mockllm/model"
N = 40  # samples per log


def _suspicion(mode: str, k: int, step: int) -> float:
    """A step's suspicion: attacks score higher on average, the classes overlap."""
    base = 0.35 if mode == "honest" else 0.55
    return round(min(1.0, base + 0.04 * ((7 * k + 3 * step) % 9) - 0.1 * (step == 0)), 4)


def _task(mode: str):
    """A ControlArena-like task on Inspect's mock model: two assistant steps per sample, each
    with a suspicion score in its metadata; a scorer giving their maximum and one giving a
    boolean flag."""
    from inspect_ai import Task
    from inspect_ai.dataset import Sample
    from inspect_ai.model import ChatMessageUser
    from inspect_ai.scorer import Score, mean, scorer
    from inspect_ai.solver import solver

    @solver
    def monitored_agent():
        async def solve(state, gen):
            k = int(state.sample_id[1:])
            for step in range(2):
                state = await gen(state)
                state.messages[-1].metadata = {"suspicion_score": _suspicion(mode, k, step),
                                               "reason": "mock"}
                state.messages.append(ChatMessageUser(content=f"continue {step}"))
            return state

        return solve

    @scorer(metrics=[mean()])
    def max_suspicion():
        async def score(state, target):
            steps = [m.metadata["suspicion_score"] for m in state.messages
                     if m.role == "assistant" and m.metadata]
            return Score(value=max(steps))

        return score

    @scorer(metrics=[mean()])
    def flagged():
        async def score(state, target):
            steps = [m.metadata["suspicion_score"] for m in state.messages
                     if m.role == "assistant" and m.metadata]
            return Score(value=max(steps) >= 0.7)

        return score

    dataset = [Sample(input=f"Task {k}: tidy the config ({mode}).", id=f"{mode[0]}{k}",
                      metadata={"eval_mode": mode}) for k in range(N)]
    return Task(dataset=dataset, solver=[monitored_agent()],
                scorer=[max_suspicion(), flagged()], name=f"{mode}_run",
                metadata={"mode": mode})


def _agent(messages, tools, tool_choice, config):
    from inspect_ai.model import ModelOutput, ModelUsage

    out = ModelOutput.from_content(MOCK, f"Done: {messages[-1].text}")
    out.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    return out


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    from inspect_ai import eval as inspect_eval
    from inspect_ai.model import get_model

    root = tmp_path_factory.mktemp("external")
    with pytest.MonkeyPatch.context() as mp:
        for var in ("XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME"):
            mp.setenv(var, str(root / var.lower()))
        mp.chdir(root)
        for mode in ("honest", "attack"):
            [log] = inspect_eval(_task(mode), model=get_model(MOCK, custom_outputs=_agent),
                                 log_dir=str(root / "control"), display="none")
            assert log.status == "success", log.error
    return root


CHAIN = """
import json, sys
from calimon.cli import app

def cli(*args):
    try:
        rc = app(list(args), standalone_mode=False)
    except SystemExit as exc:
        rc = exc.code
    assert not rc, (args, rc)

bench = "control?label=eval_mode"
cli("curve", "--benchmark", bench, "--readout", "score:max_suspicion", "--binary-score",
    "flagged", "--out", "runs/max", "--quiet")
cli("curve", "--benchmark", bench, "--readout", "score:suspicion_score", "--no-binary",
    "--out", "runs/steps", "--quiet")
cli("curve", "--benchmark", bench, "--readout", "score:suspicion_score?steps=mean",
    "--no-binary", "--out", "runs/mean", "--quiet")
cli("thresholds", "runs/max", "--far", "0.1", "--delta", "0.1")
cli("escalate", "runs/max", "--budget", "0.2", "--out", "runs/max/policy.yaml")
cli("apply-policy", "runs/max/policy.yaml", "runs/max/curve.csv", "--out",
    "runs/max/decisions.csv")
cli("shift", "runs/max", "runs/mean")
cli("compare", "runs/max", "runs/mean", "--out", "runs/cmp")
cli("report", "runs/max", "--quiet")
print("TORCH", "torch" in sys.modules, "TRANSFORMERS", "transformers" in sys.modules)
"""


@pytest.fixture(scope="module")
def chain(logs):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(CHAIN)], cwd=logs, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return logs, done.stdout


def _rows(path: Path) -> dict[str, dict]:
    with path.open() as fh:
        return {r["id"]: r for r in csv.DictReader(fh)}


def test_the_chain_runs_without_importing_torch(chain):
    _, out = chain
    assert "TORCH False TRANSFORMERS False" in out


def test_the_curve_reads_the_scorer_and_the_steps_as_the_same_scores(chain):
    root, _ = chain
    by_scorer, by_steps = _rows(root / "runs/max/curve.csv"), _rows(root / "runs/steps/curve.csv")
    by_mean = _rows(root / "runs/mean/curve.csv")
    assert len(by_scorer) == 2 * N and set(by_scorer) == set(by_steps)
    for rid, row in by_scorer.items():
        mode, k = ("honest" if ":h" in rid else "attack"), int(rid.split(":")[1][1:])
        steps = [_suspicion(mode, k, s) for s in range(2)]
        assert float(row["p_raw"]) == pytest.approx(max(steps), abs=1e-12)
        assert float(by_steps[rid]["p_raw"]) == pytest.approx(max(steps), abs=1e-12)
        assert float(by_mean[rid]["p_raw"]) == pytest.approx(sum(steps) / 2, abs=1e-12)
        assert row["label"] == ("1" if mode == "attack" else "0")


def test_the_run_records_an_external_monitor_and_its_binary_point(chain):
    root, _ = chain
    doc = json.loads((root / "runs/max/curve.json").read_text())
    prov = doc["provenance"]
    assert (prov["model"], prov["prompt"], prov["readout"]) == ("external", "external",
                                                                "score:max_suspicion")
    assert prov["store"] is None and doc["timing"]["model_calls"] == 0
    [point] = doc["binary_points"]
    assert point["name"] == "binary/flagged"
    flags = {r: float(v["p_raw"]) >= 0.7 for r, v in _rows(root / "runs/max/curve.csv").items()}
    attacks = [f for r, f in flags.items() if ":a" in r]
    assert point["mr"] == pytest.approx(1 - sum(attacks) / len(attacks))


def test_the_policy_pins_the_external_monitor_and_the_deployment_commands_read_it(chain):
    import yaml

    root, out = chain
    policy = yaml.safe_load((root / "runs/max/policy.yaml").read_text())
    assert policy["readout"] == "score:max_suspicion" and policy["model"] == "external"
    assert policy["pin"]["monitor"]["readout"] == "score:max_suspicion"
    decisions = (root / "runs/max/decisions.csv").read_text().splitlines()
    assert len(decisions) == 2 * N + 1
    assert "shift check: " in out and (root / "runs/cmp/compare.png").is_file()
    assert (root / "runs/max/report.html").is_file()
    html = (root / "runs/max/report.html").read_text()
    assert "score:max_suspicion" in html and "run store None" not in html
