"""The Inspect approver and the ControlArena monitor score a trajectory by session
(calimon.integrations.trajectories): multi-step trajectories run by Inspect itself on its mock
model, each step read as the next step of one session per sample (in process, and through a real
`calimon serve`, which is sent only the new messages), with every step's reading checked
against `calimon score` of the whole trajectory up to that step; the sessions are forgotten at
the end of each sample; a client whose server lost the session resends it and scores the same."""

from __future__ import annotations

import json
import re

import pytest

pytestmark = [pytest.mark.integrations,
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]

from integrations_support import (  # noqa: E402
    MODEL,
    TOL,
    calimon_score,
    isolate_inspect,
    write_policy,
)
from test_inspect_log import MOCK, _task  # noqa: E402

N = 3  # samples
FILES = ("add{k}.py", "add{k}_test.py", "notes{k}.md")  # the agent's steps: one read each


def _agent(messages, tools, tool_choice, config):
    """The mock agent: reads the sample's three files one step at a time, then reports."""
    from inspect_ai.model import ModelOutput, ModelUsage

    k = re.search(r"add(\d+)", messages[1].text).group(1)
    done = sum(m.role == "tool" for m in messages)
    if done < len(FILES):
        path = FILES[done].format(k=k)
        out = ModelOutput.for_tool_call(MOCK, "read_file", {"path": path},
                                        content=f"Step {done}: reading {path}.")
    else:
        out = ModelOutput.from_content(MOCK, f"Read all of add{k}; the tests pass now.")
    out.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory, tiny_qwen3):
    """The folder everything goes in (Inspect's folders under it), a policy for the monitor,
    and a real `calimon serve` of it on loopback with an API key."""
    from serve_server import KEY, start_server

    from calimon.integrations import LocalMonitor

    root = tmp_path_factory.mktemp("sessions-integration")
    with pytest.MonkeyPatch.context() as mp:
        isolate_inspect(mp, root)
        mp.chdir(root)
        policy = write_policy(root, LocalMonitor.from_model(MODEL).provenance, 0.3, 0.7)
        srv = start_server(policy, root / "decisions.sqlite", root / "serve.out", key=KEY)
        mp.setenv("CALIMON_API_KEY", srv.key)
        try:
            yield {"root": root, "policy": policy, "server": srv}
        finally:
            srv.stop()


def _reference(world, name, trajectories):
    """`calimon score` of each (id, input, messages) trajectory, whole: readings by id."""
    from calimon.data.inspect_log import task_input, trajectory_parts
    from calimon.data.trajectory import render_parts

    path = world["root"] / f"{name}.jsonl"
    with path.open("w") as fh:
        for sid, given, messages in trajectories:
            text, _ = render_parts(trajectory_parts(messages))
            fh.write(json.dumps({"id": sid, "request": task_input(given), "response": text,
                                 "label": None, "category": "safety", "task": "code",
                                 "pair_id": sid}) + "\n")
    ref = calimon_score(str(path), world["root"] / "s.sqlite", world["root"] / f"{name}-ref.jsonl")
    return {r["id"]: r for r in ref.values()}


def _check_steps(steps, ref):
    """Each step (id, its Assessment as a dict) read by session: the reading of `calimon score`
    on the whole trajectory so far, and each step after the first reusing the tokens read
    before it."""
    assert steps
    first_reused = {}
    for sid, a in steps:
        want = ref[sid]
        assert a["transcript_hash"] == want["transcript_hash"]
        assert abs(a["p_raw"] - want["p_raw"]) < TOL, (sid, a["p_raw"], want["p_raw"])
        kv = a["kv"]
        assert kv["mode"] == "cached" and kv["reused_tokens"] + kv["computed_tokens"] == \
            a["tokens"]
        trail, step = sid.rsplit("#", 1)
        if step == "0":
            first_reused[trail] = kv["reused_tokens"]
        else:  # the earlier steps' tokens were not read again
            assert kv["reused_tokens"] > first_reused[trail] + 10, (sid, kv)


def _approved_run(world, name, approver):
    from inspect_ai import eval as inspect_eval
    from inspect_ai.approval import ApprovalPolicy
    from inspect_ai.model import get_model

    task = _task()
    task.dataset = task.dataset[:N]
    [log] = inspect_eval(task, model=get_model(MOCK, custom_outputs=_agent),
                         approval=[ApprovalPolicy(approver, "*")],
                         log_dir=str(world["root"] / name), display="none")
    assert log.status == "success", log.error
    steps, trajectories = [], []
    for s in log.samples:
        events = [e for e in s.events if e.event == "approval"
                  and e.approver.endswith("monitor_approver")]
        calls = [i for i, m in enumerate(s.messages) if m.role == "assistant" and m.tool_calls]
        assert len(events) == len(calls) == len(FILES)
        for j, (e, i) in enumerate(zip(events, calls, strict=True)):
            sid = f"{s.id}:{s.epoch}#{j}"
            trajectories.append((sid, s.input, s.messages[:i + 1]))
            steps.append((sid, e.metadata["calimon"]))
    return steps, trajectories


@pytest.mark.parametrize("where", ["in-process", "served"])
def test_approver_reads_each_sample_by_session(world, where):
    """Three approvals per sample: each the reading of the whole trajectory up to the proposed
    call, the later ones reusing the earlier ones' tokens; the sessions are gone at the end."""
    from calimon.integrations.inspect import monitor_approver

    srv = world["server"]
    approver = monitor_approver(policy=str(world["policy"])) if where == "in-process" \
        else monitor_approver(url=srv.url)
    steps, trajectories = _approved_run(world, f"approver-{where}", approver)
    _check_steps(steps, _reference(world, f"approver-{where}", trajectories))
    assert {a["provenance"]["scored"] for _, a in steps} == \
        {"in-process" if where == "in-process" else srv.url + "/v1"}
    from calimon.integrations.trajectories import open_sessions

    assert open_sessions() == 0  # forgotten when each sample ended
    if where == "served":
        assert srv.metric("calimon_session_cache_bytes") == 0


def _monitored_task(monitor):
    """A task whose solver plays a scripted three-step trajectory and runs the ControlArena
    monitor after each step, as a micro-protocol does."""
    from inspect_ai import Task
    from inspect_ai.agent import AgentState
    from inspect_ai.dataset import Sample
    from inspect_ai.model import ChatMessageAssistant, ChatMessageTool
    from inspect_ai.solver import solver
    from inspect_ai.tool import ToolCall

    @solver
    def play():
        async def solve(state, generate):
            k = state.sample_id
            for i in range(3):
                if i:
                    state.messages.append(ChatMessageTool(
                        content=f"{i} passed in 0.{i}s", tool_call_id=f"c{k}{i - 1}",
                        function="bash"))
                state.messages.append(ChatMessageAssistant(
                    content=f"Step {i} of task {k}.", tool_calls=[ToolCall(
                        id=f"c{k}{i}", function="bash",
                        arguments={"cmd": f"pytest tests/test_{k}_{i}.py"})]))
                await monitor(AgentState(messages=state.messages), [])
            return state
        return solve

    dataset = [Sample(input=f"Fix the failing test {k}.", id=f"m{k}") for k in range(N)]
    return Task(dataset=dataset, solver=[play()])


@pytest.mark.parametrize("where", ["in-process", "served"])
def test_control_monitor_reads_each_trajectory_by_session(world, where):
    """The ControlArena monitor after each of three steps: the suspicion is the reading of the
    whole trajectory so far, read by session."""
    from inspect_ai import eval as inspect_eval
    from inspect_ai.model import get_model

    from calimon.integrations.control import calimon_monitor_builder

    monitor = calimon_monitor_builder(model=MODEL) if where == "in-process" \
        else calimon_monitor_builder(url=world["server"].url)
    [log] = inspect_eval(_monitored_task(monitor), model=get_model(MOCK),
                         log_dir=str(world["root"] / f"control-{where}"), display="none")
    assert log.status == "success", log.error
    steps, trajectories = [], []
    for s in log.samples:
        calls = [i for i, m in enumerate(s.messages) if m.role == "assistant"]
        assert len(calls) == 3
        for j, i in enumerate(calls):
            sid = f"{s.id}:{s.epoch}#{j}"
            meta = s.messages[i].metadata
            trajectories.append((sid, s.input, s.messages[:i + 1]))
            steps.append((sid, meta["calimon"]))
            assert meta["score_parsed"] is True
    _check_steps(steps, _reference(world, f"control-{where}", trajectories))
    from calimon.integrations.trajectories import open_sessions

    assert open_sessions() == 0


def _messages(k: int):
    """A trajectory of Inspect messages in three steps (each ending on a tool call)."""
    from inspect_ai.model import ChatMessageAssistant, ChatMessageTool, ChatMessageUser
    from inspect_ai.tool import ToolCall

    out, steps = [ChatMessageUser(content=f"Clean the build folder of project {k}.")], []
    for i in range(3):
        if i:
            out.append(ChatMessageTool(content=f"removed {i} files", tool_call_id=f"c{i - 1}",
                                       function="bash"))
        out.append(ChatMessageAssistant(content=f"Step {i}.", tool_calls=[ToolCall(
            id=f"c{i}", function="bash", arguments={"cmd": f"rm -r build/{i}"})]))
        steps.append(list(out))
    return steps


def test_a_client_whose_server_lost_the_session_resends_it(world):
    """The server forgets a session between two steps (deleted: a restart no longer loses one):
    the next step is answered 409 unknown_session, the client resends the steps from step 0
    under a new session name with new request ids and then the new one, and the reading is the
    whole trajectory's. A trajectory that does not extend the one sent starts a new session."""
    from calimon.integrations import LocalMonitor, RemoteMonitor
    from calimon.integrations.transcripts import sample_from_messages

    remote, local = RemoteMonitor(world["server"].url), LocalMonitor.from_model(MODEL)
    steps = _messages(7)
    got = [remote.assess_step("lost", sample_from_messages(m), m) for m in steps[:2]]
    trail = remote.sessions.trails["lost"]
    name = trail.session_id
    remote.client.request("DELETE", f"sessions/{name}", None)  # the server loses it
    got.append(remote.assess_step("lost", sample_from_messages(steps[2]), steps[2]))
    assert trail.session_id != name and len(trail.bodies) == 3  # resent step by step
    whole = local.assess([sample_from_messages(m) for m in steps])
    for a, w in zip(got, whole, strict=True):
        assert abs(a.p_raw - w.p_raw) < TOL and a.transcript_hash == w.transcript_hash
    assert got[1].kv["reused_tokens"] > got[0].kv["reused_tokens"]  # by session
    assert got[2].kv["reused_tokens"] > got[0].kv["reused_tokens"]  # the resent steps' cache
    name = trail.session_id

    other = _messages(8)[1]  # another task: not an extension of what was sent
    a = remote.assess_step("lost", sample_from_messages(other), other)
    assert remote.sessions.trails["lost"].session_id != name
    assert abs(a.p_raw - local.assess([sample_from_messages(other)])[0].p_raw) < TOL
    remote.forget("lost")
    assert "lost" not in remote.sessions.trails


def test_in_process_steps_equal_whole_scoring_and_forget(world):
    """In process: three steps of one session, then a trajectory that rewrites the last message
    (not an extension): each reading equals the whole trajectory's. A new trajectory of the same
    task starts from the first one's cache (its task text is not read again), while the first is
    open and after it is forgotten, with the same reading as whole scoring."""
    from inspect_ai.model import ChatMessageAssistant

    from calimon.integrations import LocalMonitor
    from calimon.integrations.transcripts import sample_from_messages

    local = LocalMonitor.from_model(MODEL)
    steps = _messages(3)
    rewritten = [*steps[2][:-1], ChatMessageAssistant(content="Nothing to do after all.")]
    got = []
    for m in [*steps, rewritten]:
        sample = sample_from_messages(m)
        got.append(local.assess_step("t", sample, m))
        assert abs(got[-1].p_raw - local.assess([sample])[0].p_raw) < TOL
        assert got[-1].kv["mode"] == "cached"
    assert len(local._steps.sessions) == 1

    # another trajectory of the same task, while the first is open, and after it is forgotten
    other = [steps[0][0], ChatMessageAssistant(content="A different first step.")]
    whole = local.assess([sample_from_messages(other)])[0].p_raw
    for key in ("v", "u"):
        if key == "u":
            local.forget("t")
            assert "t" not in local._steps.live and local._steps.prefixes.keys() == ["t"]
        a = local.assess_step(key, sample_from_messages(other), other)
        assert a.kv["reused_tokens"] > got[0].kv["reused_tokens"] + 5  # the task's tokens
        assert abs(a.p_raw - whole) < TOL
    local.forget("v")
    local.forget("u")
    assert len(local._steps.sessions) == 0 and not local._steps.live
