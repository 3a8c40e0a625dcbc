"""Inspect's log files read without inspect_ai (calimon.data.inspect_files): the same samples as
Inspect's own reader, on logs Inspect writes here with its mock model (text long enough to be
stored as attachments, messages whose content is a list of parts, tool calls and a tool error,
an input of several messages, integer sample ids, two epochs, dict and numeric scores, per-step
metadata); the logs it does not know go to Inspect's reader; a folder's logs as Inspect lists
them."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

pytest.importorskip("inspect_ai")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # inspect_ai's own

import calimon.data.inspect_log as inspect_log  # noqa: E402
from calimon.data.inspect_files import folder_logs, read_eval_zip  # noqa: E402
from calimon.data.registry import load_benchmark  # noqa: E402
from calimon.errors import InputError  # noqa: E402

MOCK = "mockllm/model"
LONG = "A long line of the tool's output, stored by Inspect as an attachment. " * 3


def _task():
    from inspect_ai import Task
    from inspect_ai.dataset import Sample
    from inspect_ai.model import ChatMessageSystem, ChatMessageUser
    from inspect_ai.scorer import Score, mean, scorer
    from inspect_ai.solver import generate, use_tools
    from inspect_ai.tool import ToolError, tool

    @tool
    def shell():
        async def execute(cmd: str):
            """Run a shell command.

            Args:
                cmd: The command.
            """
            if "fail" in cmd:
                raise ToolError(f"{cmd}: permission denied")
            return LONG + cmd

        return execute

    @scorer(metrics={"*": [mean()]})
    def setting():
        async def score(state, target):
            k = int(state.sample_id)
            return Score(value={"main_task_success": "C" if k % 2 else "I",
                                "side_task_success": k % 3 == 0, "steps": k * 0.5})

        return score

    dataset = [Sample(input=[ChatMessageSystem(content="You are an agent."),
                             ChatMessageUser(content=f"Task {k}: " + "tidy the repository. " * 8)],
                      id=k, metadata={"eval_mode": "attack" if k % 2 else "honest"})
               for k in range(6)]
    return Task(dataset=dataset, solver=[use_tools(shell()), generate()], scorer=setting(),
                epochs=2)


def _agent(messages, tools, tool_choice, config):
    from inspect_ai.model import ContentText, ModelOutput, ModelUsage

    k = int(messages[1].text.split(":")[0].split()[1])
    if not any(m.role == "tool" for m in messages):
        out = ModelOutput.for_tool_call(MOCK, "shell", {"cmd": ("fail " if k % 2 else "ls ")
                                                        + "x" * 120, "flags": ["-l", LONG]},
                                        content=f"First a look around {k}. " + LONG)
        out.message.content = [ContentText(text=f"Plan {k}: " + LONG), ContentText(text="ok")]
    else:
        out = ModelOutput.from_content(MOCK, f"Done {k}. " + LONG)
    out.message.metadata = {"suspicion_score": k / 10, "note": "scripted"}
    out.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    return out


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    """{"eval": path, "json": path}: the task run by Inspect into each log format."""
    from inspect_ai import eval as inspect_eval
    from inspect_ai.model import get_model

    root = tmp_path_factory.mktemp("inspect-files")
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        for var in ("XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME"):
            mp.setenv(var, str(root / var.lower()))
        mp.chdir(root)
        for fmt in ("eval", "json"):
            [log] = inspect_eval(_task(), model=get_model(MOCK, custom_outputs=_agent),
                                 log_dir=str(root / "logs" / fmt), log_format=fmt,
                                 display="none", max_samples=2)
            assert log.status == "success", log.error
            out[fmt] = log.location
    return out


def _inspect_only(monkeypatch):
    monkeypatch.setattr(inspect_log, "read_eval_zip", lambda path: None)


def _load(spec):
    """The samples as dicts, or the error (the same error from either reader)."""
    try:
        return [s.to_dict() for s in load_benchmark(spec)]
    except InputError as exc:
        return str(exc)


@pytest.mark.parametrize("options", ["", "?label=eval_mode", "?label=eval_mode&attacks=successful",
                                     "?scorer=setting&positive=C", "?scorer=none&positive=C"])
def test_the_direct_reader_gives_inspect_s_samples(logs, options, monkeypatch):
    from inspect_ai.log import read_eval_log

    source = read_eval_log(logs["eval"], resolve_attachments=True)
    raw = zipfile.ZipFile(logs["eval"])
    stored = json.dumps([json.loads(raw.read(n)) for n in raw.namelist()
                         if n.startswith("samples/")])
    assert "attachment://" in stored  # the log does store attachments, and they are resolved
    header, samples = read_eval_zip(Path(logs["eval"]))
    assert [(s.id, s.epoch) for s in samples] == [(k, e) for k in range(6) for e in (1, 2)]
    assert samples[0].messages[2].content[0]["text"].endswith(LONG)
    assert header.eval.eval_id == source.eval.eval_id
    direct = _load(logs["eval"] + options)
    _inspect_only(monkeypatch)
    assert _load(logs["eval"] + options) == direct
    monkeypatch.setattr(inspect_log, "WHOLE_LOG_SAMPLES", 0)  # sample by sample
    assert _load(logs["eval"] + options) == direct
    if "scorer" in options:  # a dict value cannot label; no such scorer
        assert "has a dict value" in direct or "no score from scorer 'none'" in direct
        return
    assert len(direct) == (8 if "successful" in options else 12)  # attack 3 succeeded
    if not options:
        text = direct[0]["response"]
        assert LONG in text and "permission denied" not in text
        assert "error (" in direct[2]["response"] and "x" * 120 in direct[2]["response"]
        assert direct[2]["meta"]["step_scores"] == {"suspicion_score": [0.1, 0.1]}
        assert direct[2]["meta"]["scores"]["setting.steps"] == 0.5


def test_logs_it_does_not_know_go_to_inspect_s_reader(logs, tmp_path):
    assert read_eval_zip(Path(logs["json"])) is None
    for name, change in [("v3.eval", {"version": 3}), ("started.eval", {"status": "started"}),
                         ("invalid.eval", {"invalidated": True})]:
        copy = tmp_path / name
        with zipfile.ZipFile(logs["eval"]) as z, zipfile.ZipFile(copy, "w") as out:
            for item in z.infolist():
                data = z.read(item)
                if item.filename == "header.json":
                    data = json.dumps({**json.loads(data), **change}).encode()
                out.writestr(item.filename, data)
        assert read_eval_zip(copy) is None, name
    # Inspect's reader reads the unknown version as it can: the same samples here
    want = [s.to_dict()["meta"]["messages"] for s in load_benchmark(logs["eval"])]
    assert [s.to_dict()["meta"]["messages"] for s in load_benchmark(str(tmp_path / "v3.eval"))
            ] == want
    broken = tmp_path / "broken.eval"
    broken.write_bytes(b"not a zip")
    assert read_eval_zip(broken) is None


def test_a_folder_s_logs_are_those_inspect_lists(logs, tmp_path):
    from inspect_ai.log import list_eval_logs

    folder = Path(logs["eval"]).parents[1]  # logs/eval and logs/json
    (folder / "logs.json").write_text("{}")  # Inspect's listing file, not a log
    (folder / "notes.json").write_text("{}")
    (folder / "deeper" / "x.eval").mkdir(parents=True)  # a folder, not a log
    want = sorted(Path(unquote(urlparse(i.name).path)) for i in list_eval_logs(str(folder)))
    assert len(want) == 2 and folder_logs(folder) == want
