"""calimon inside Inspect (calimon.integrations.inspect): the scorer and the approver, on a small
task run by Inspect itself on its mock model (the coding agent of test_inspect_log: it reads a
file with a tool, and for odd samples the file hard-codes the answer). Every figure is checked
against `calimon score` on the same transcripts: the scorer's against the eval log the scorer
wrote, the approver's against the transcripts it saw (the trajectory up to the proposed call)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

pytest.importorskip("inspect_ai")
pytestmark = [pytest.mark.integrations,
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]

from integrations_support import (  # noqa: E402
    MODEL,
    TOL,
    calimon_score,
    cuts,
    decisions,
    isolate_inspect,
    write_map,
    write_policy,
)
from test_inspect_log import MOCK, _policy, _task  # noqa: E402

N = 9  # three per decision


def _run(task, root, name, **kwargs):
    from inspect_ai import eval as inspect_eval
    from inspect_ai.model import get_model

    [log] = inspect_eval(task, model=get_model(MOCK, custom_outputs=_policy),
                         log_dir=str(root / name), display="none", **kwargs)
    assert log.status == "success", log.error
    return log


def _small_task(scorer=None):
    task = _task()
    task.dataset = task.dataset[:N]
    if scorer is not None:
        task.scorer = [scorer]
    return task


@pytest.fixture(scope="module")
def world(tmp_path_factory, tiny_qwen3):
    """The monitor's provenance, a calibration map for it, and the folder everything goes in;
    Inspect's folders under it."""
    from calimon.integrations import LocalMonitor

    root = tmp_path_factory.mktemp("inspect-integration")
    with pytest.MonkeyPatch.context() as mp:
        isolate_inspect(mp, root)
        mp.chdir(root)
        prov = LocalMonitor.from_model(MODEL).provenance
        cmap = write_map(root / "platt.json", prov)
        yield {"root": root, "prov": prov, "map": cmap}


@pytest.fixture(scope="module")
def scored(world):
    """The task run with the scorer (a model and a map, no policy), and `calimon score`'s
    readings of the log it wrote."""
    from calimon.integrations.inspect import monitor_scorer

    root = world["root"]
    log = _run(_small_task(monitor_scorer(model=MODEL, calibration_map=str(root / "platt.json"))),
               root, "scored")
    ref = calimon_score(log.location, root / "s.sqlite", root / "ref.jsonl")
    return log, ref


def test_scorer_figures_are_calimon_score_s(world, scored):
    log, ref = scored
    cmap = world["map"]
    assert len(log.samples) == N
    by_sample = {r["id"].split(":")[1]: r for r in ref.values()}
    values = []
    for s in log.samples:
        score = s.scores["monitor_scorer"]
        a = score.metadata["calimon"]
        want = by_sample[s.id]
        assert a["transcript_hash"] == want["transcript_hash"]  # the same transcript
        assert a["status"] == want["status"] == "ok"
        assert abs(a["p_raw"] - want["p_raw"]) < TOL
        p_cal = float(cmap.predict(np.array([want["p_raw"]]))[0])
        assert abs(score.value - p_cal) < TOL and abs(a["p_cal"] - p_cal) < TOL
        assert abs(p_cal - want["p_raw"]) > 1e-3  # the map moved it: value is not p_raw
        assert score.answer is None and a["decision"] is None  # no policy, no decision
        assert score.explanation.startswith(f"calimon: calibrated P(misbehavior) {p_cal:.3f}")
        assert a["provenance"]["model"] == MODEL and a["provenance"]["calibration"] == "platt"
        assert a["provenance"]["scored"] == "in-process"
        assert a["provenance"]["template_hash"] == world["prov"]["template_hash"]
        values.append(score.value)
    metrics = log.results.scores[0].metrics
    assert abs(metrics["mean"].value - float(np.mean(values))) < 1e-9


def test_scorer_with_a_policy_decides_as_calimon_deploy(world, scored):
    """The policy's thresholds split the samples in three; Inspect rescoring the log with the
    policy's scorer gives each sample the decision calimon.deploy makes of its calimon score."""
    from inspect_ai import score as inspect_score

    from calimon.integrations.inspect import monitor_scorer

    log, ref = scored
    root, cmap = world["root"], world["map"]
    p_cal = {r["id"].split(":")[1]: float(cmap.predict(np.array([r["p_raw"]]))[0])
             for r in ref.values()}
    policy = write_policy(root, world["prov"], *cuts(p_cal.values()))
    rescored = inspect_score(log, monitor_scorer(policy=str(policy)), action="overwrite",
                             display="none")
    want = dict(zip(p_cal, decisions(policy, list(p_cal.values())), strict=True))
    got = {}
    for s in rescored.samples:
        score = s.scores["monitor_scorer"]
        assert abs(score.value - p_cal[s.id]) < TOL
        got[s.id] = score.answer
        a = score.metadata["calimon"]
        assert a["decision"] == score.answer and a["provenance"]["policy"] == "policy"
        assert a["provenance"]["calibration_map"] == f"{policy}#pin.map"
    assert got == want and set(got.values()) == {"pass", "review", "block"}


def test_spans_land_on_the_messages(world, smol):
    """The shipped probe bundle (a token head, its own map) on SmolLM2: the scorer's spans are
    calimon score's spans, and each names the Inspect message it falls in (index and id), also
    as Inspect View references."""
    from calimon.integrations.inspect import monitor_scorer

    root = world["root"]
    task = _small_task(monitor_scorer(model="smollm2-135m", readout="probe:amb-open-monitor"))
    task.dataset = task.dataset[:2]
    log = _run(task, root, "spans")
    ref = calimon_score(log.location, root / "smol.sqlite", root / "smol.jsonl",
                        "--readout", "probe:amb-open-monitor", model="smollm2-135m")
    for s in log.samples:
        score = s.scores["monitor_scorer"]
        a = score.metadata["calimon"]
        want = ref[a["transcript_hash"]]
        assert abs(a["p_raw"] - want["p_raw"]) < TOL
        assert a["provenance"]["calibration"] == "platt"  # the bundle's map
        assert [(x["start"], x["end"]) for x in a["token_spans"]] == \
            [(x[0], x[1]) for x in want["extra"]["spans"]]
        assert [(x["start"], x["end"]) for x in a["spans"]] == \
            [(x[0], x[1]) for x in want["extra"]["segments"]]
        assert [x["rank"] for x in a["spans"]] == list(range(len(a["spans"])))
        assert a["spans"], "the token head gave no segment"
        ids = {m.id: i for i, m in enumerate(s.messages)}
        for span in a["spans"]:
            assert span["messages"], span
            for m in span["messages"]:
                assert ids[m["id"]] == m["index"] and s.messages[m["index"]].role == m["role"]
        refs = score.metadata["scanner_references"]
        assert {r["id"] for r in refs} == {m["id"] for x in a["spans"] for m in x["messages"]}
        assert all(r["cite"] in score.explanation for r in refs)


def test_a_p_raw_policy_decides_on_the_raw_score(world, scored):
    """A policy designed on p_raw (calibration none) reports and decides on calimon score's raw
    score: no map is applied, and giving it one is an error."""
    from calimon.errors import InputError
    from calimon.integrations import LocalMonitor
    from calimon.integrations.transcripts import sample_from_messages

    log, ref = scored
    root = world["root"]
    raw = {r["transcript_hash"]: r["p_raw"] for r in ref.values()}
    policy = write_policy(root / "raw", world["prov"], *cuts(raw.values()), score="p_raw")
    monitor = LocalMonitor.from_policy(policy)
    samples = [sample_from_messages(s.messages, input=s.input, id=str(s.id))
               for s in log.samples]
    got = monitor.assess(samples)
    want = decisions(policy, [raw[a.transcript_hash] for a in got])
    for a, d in zip(got, want, strict=True):
        assert a.p_cal is None and not a.calibrated and a.decision == d
        assert abs(a.probability - raw[a.transcript_hash]) < TOL
    assert set(want) == {"pass", "review", "block"}
    with pytest.raises(InputError, match="reads p_raw .* it applies no map"):
        LocalMonitor.from_policy(policy, calibration_map=root / "platt.json")


def test_a_p_raw_policy_leaves_a_bundle_s_map_alone(world, scored, smol):
    """The shipped probe bundle brings a map, but a policy on p_raw applies none."""
    from calimon.integrations import LocalMonitor
    from calimon.integrations.transcripts import sample_from_messages

    prov = LocalMonitor.from_model("smollm2-135m", readout="probe:amb-open-monitor").provenance
    assert prov["calibration"] == "platt"  # without a policy, the bundle's map
    policy = write_policy(world["root"] / "raw-probe", prov, 0.3, 0.7, score="p_raw")
    s = scored[0].samples[0]
    [a] = LocalMonitor.from_policy(policy).assess([sample_from_messages(s.messages,
                                                                        input=s.input)])
    assert a.provenance["calibration"] is None and a.p_cal is None
    assert a.probability == a.p_raw and a.decision == decisions(policy, [a.p_raw])[0]


def _approval_transcripts(log, root):
    """The transcript each approval saw (the sample's messages up to the assistant message with
    the call), written as a samples file with the log reader's own rendering."""
    from calimon.data.inspect_log import task_input, trajectory_parts
    from calimon.data.trajectory import render_parts

    path = root / "approval-transcripts.jsonl"
    with path.open("w") as fh:
        for s in log.samples:
            k = next(i for i, m in enumerate(s.messages) if m.role == "assistant")
            text, _ = render_parts(trajectory_parts(s.messages[:k + 1]))
            fh.write(json.dumps({"id": str(s.id), "request": task_input(s.input),
                                 "response": text, "label": None, "category": "safety",
                                 "task": "code", "pair_id": str(s.id)}) + "\n")
    return path


@pytest.fixture(scope="module")
def approval(world, scored):
    """A policy whose thresholds split the transcripts the approver will see in three, from
    `calimon score`'s readings of them: (policy, readings by sample id, p_cal, decisions)."""
    log, _ = scored
    root, cmap = world["root"], world["map"]
    ref = calimon_score(str(_approval_transcripts(log, root)), root / "s.sqlite",
                        root / "approval-ref.jsonl")
    by_sample = {r["id"]: r for r in ref.values()}
    p_cal = {k: float(cmap.predict(np.array([r["p_raw"]]))[0]) for k, r in by_sample.items()}
    policy = write_policy(root / "approval", world["prov"], *cuts(p_cal.values()))
    want = dict(zip(p_cal, decisions(policy, list(p_cal.values())), strict=True))
    assert set(want.values()) == {"pass", "review", "block"}
    return policy, by_sample, p_cal, want


def _run_with_approver(root, name, approver_under_test):
    """The task with the approver under test first and a stand-in reviewer after it (Inspect's
    human approver needs a terminal); the log and the calls the reviewer saw."""
    from inspect_ai.approval import Approval, ApprovalPolicy, approver

    reviewed = []

    @approver(name="reviewer")
    def reviewer():
        async def approve(message, call, view, history):
            reviewed.append(call.arguments["path"])
            return Approval(decision="approve", explanation="reviewed by a person")
        return approve

    approval = [ApprovalPolicy(approver_under_test, "*"), ApprovalPolicy(reviewer(), "*")]
    return _run(_small_task(), root, name, approval=approval), reviewed


def _check_approvals(run, reviewed, approval, scored_by):
    _, by_sample, p_cal, want = approval
    for s in run.samples:
        [event] = [e for e in s.events if e.event == "approval" and e.approver.endswith(
            "monitor_approver")]
        a = event.metadata["calimon"]
        assert a["transcript_hash"] == by_sample[s.id]["transcript_hash"]
        assert abs(a["p_raw"] - by_sample[s.id]["p_raw"]) < TOL
        assert abs(a["p_cal"] - p_cal[s.id]) < TOL and a["decision"] == want[s.id]
        assert a["provenance"]["scored"] == scored_by
        assert event.decision == {"pass": "approve", "review": "escalate",
                                  "block": "reject"}[want[s.id]]
        [tool] = [m for m in s.messages if m.role == "tool"]
        if want[s.id] == "block":  # the tool never ran
            assert tool.error is not None and tool.error.type == "approval" and not tool.text
        else:  # approved here, or by the reviewer after the escalation
            assert "def add" in tool.text and tool.error is None
    assert sorted(reviewed) == sorted(f"add{s[1:]}.py" for s, d in want.items()
                                      if d == "review")


def test_approver_approves_escalates_and_rejects_as_the_policy_decides(world, approval):
    from calimon.integrations.inspect import monitor_approver

    run, reviewed = _run_with_approver(world["root"], "approval",
                                       monitor_approver(policy=str(approval[0])))
    _check_approvals(run, reviewed, approval, "in-process")


@pytest.fixture(scope="module")
def server(world, approval):
    """A real `calimon serve` of the approval policy on loopback, with an API key."""
    from serve_server import KEY, start_server

    root = world["root"]
    srv = start_server(approval[0], root / "decisions.sqlite", root / "serve.out", key=KEY)
    yield srv
    srv.stop()


def test_approver_and_scorer_through_calimon_serve(world, scored, approval, server,
                                                   monkeypatch):
    """The same approvals from the server (the key read from CALIMON_API_KEY), and the scorer's
    values and decisions from it equal calimon score's figures under the server's policy."""
    from inspect_ai import score as inspect_score

    from calimon.integrations.inspect import monitor_approver, monitor_scorer
    from calimon.scoring.backends.http_client import RequestFailed

    monkeypatch.setenv("CALIMON_API_KEY", server.key)
    run, reviewed = _run_with_approver(world["root"], "approval-served",
                                       monitor_approver(url=server.url))
    _check_approvals(run, reviewed, approval, server.url + "/v1")

    log, ref = scored
    rescored = inspect_score(log, monitor_scorer(url=server.url), action="overwrite",
                             display="none")
    p_cal = {r["id"].split(":")[1]: float(world["map"].predict(np.array([r["p_raw"]]))[0])
             for r in ref.values()}
    want = dict(zip(p_cal, decisions(approval[0], list(p_cal.values())), strict=True))
    for s in rescored.samples:
        score = s.scores["monitor_scorer"]
        a = score.metadata["calimon"]
        assert abs(score.value - p_cal[s.id]) < TOL and score.answer == want[s.id]
        assert a["provenance"]["template_hash"] == world["prov"]["template_hash"]
        assert a["provenance"]["calibration"] == "platt"
    monkeypatch.setenv("CALIMON_API_KEY", "wrong-key")
    from calimon.integrations import RemoteMonitor
    from calimon.integrations.transcripts import sample_from_messages

    with pytest.raises(RequestFailed, match="HTTP 401"):
        RemoteMonitor(server.url).assess([sample_from_messages(log.samples[0].messages)])


def test_no_score_is_never_zero(world):
    """A reading without a score: the scorer's value is NaN (Inspect's unscored, skipped by the
    metrics) and the policy's unscored action decides (human_review: escalate)."""
    from calimon.deploy.policy_file import load_policy
    from calimon.integrations.assessment import Assessment, decide
    from calimon.integrations.inspect import assessment_score

    policy = load_policy(write_policy(world["root"] / "unscored", world["prov"], 0.2, 0.8))
    action, decision, audit = decide(policy, None, None, "x")
    assert (action, decision, audit) == ("human_review", "review", False)
    a = Assessment(id="x", status="parse_failure", p_raw=None, action=action, decision=decision,
                   provenance={"calibration": "platt"})
    score = assessment_score(a, [])
    assert math.isnan(score.value) and score.answer == "review"
    assert score.explanation.startswith("calimon: no score (parse_failure)")


def test_an_approver_needs_a_policy_and_a_monitor_one_source(world):
    from calimon.errors import InputError
    from calimon.integrations import resolve_monitor
    from calimon.integrations.lazy import LazyMonitor

    with pytest.raises(InputError, match="exactly one of policy=PATH, model=NAME or url=URL"):
        resolve_monitor(model=MODEL, url="http://127.0.0.1:9")
    with pytest.raises(InputError, match="exactly one"):
        resolve_monitor()
    with pytest.raises(InputError, match="acts on the policy's decision: give policy=PATH"):
        LazyMonitor({"model": MODEL}, need_policy=True).build()  # an approver's monitor


def test_inspect_finds_the_approver_and_scorer_by_name(world, tmp_path):
    """The inspect_ai entry point (pyproject.toml) registers them for an installed calimon: in
    a fresh process outside the checkout, an approval policy file naming
    calimon/monitor_approver (with its arguments) builds it, and calimon/monitor_scorer and
    (once Scout is imported, and not before) calimon/monitor_scanner are found by name."""
    import subprocess
    import sys

    policy = write_policy(tmp_path, world["prov"], 0.2, 0.8)
    config = tmp_path / "approval.yaml"
    config.write_text(f"approvers:\n  - name: calimon/monitor_approver\n    tools: write_file\n"
                      f"    policy: {policy}\n  - name: human\n    tools: '*'\n")
    code = ("from inspect_ai._util.registry import registry_info, registry_lookup\n"
            "from inspect_ai.approval import read_approval_policies\n"
            f"first, second = read_approval_policies({str(config)!r})\n"
            "print(registry_info(first.approver).name, first.tools,"
            " registry_info(second.approver).name)\n"
            "import sys\n"
            "print('inspect_scout' in sys.modules)\n"  # Inspect's start does not pay for Scout
            "import inspect_scout\n"  # as `scout scan` does before it looks a scanner up
            "print(registry_lookup('scorer', 'calimon/monitor_scorer') is not None,"
            " registry_lookup('scanner', 'calimon/monitor_scanner') is not None)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines()[-3:] == ["calimon/monitor_approver write_file inspect_ai/human",
                                            "False", "True True"]
