"""The parts of `calimon serve` that need no server: chat messages as transcripts, the decision
log, the metrics text and where a server may listen (how a policy finds its map:
tests/test_policy_pin.py)."""

from __future__ import annotations

import json
import sqlite3

import pytest

from calimon.errors import InputError
from calimon.migrations import schema_version
from calimon.serve.decision_log import (
    SCHEMA,
    TABLE_SQL,
    LoggedDecision,
    SQLiteDecisionLog,
    open_log,
)
from calimon.serve.messages import transcript
from calimon.serve.metrics import Metrics
from calimon.serve.schemas import Message
from calimon.serve.settings import ServeSettings, is_loopback

OPENAI = [
    {"role": "system", "content": "You are an agent."},
    {"role": "user", "content": "Fix the failing test."},
    {"role": "assistant", "content": "Let me look.", "tool_calls": [
        {"id": "c1", "type": "function",
         "function": {"name": "bash", "arguments": '{"cmd": "ls tests", "timeout": 5}'}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "test_add.py"},
    {"role": "assistant", "content": [{"type": "text", "text": "Done."},
                                      {"type": "image_url", "image_url": {"url": "x"}}]},
]


def _messages(raw):
    return [Message.model_validate(m) for m in raw]


def test_openai_and_inspect_messages_read_as_the_inspect_log_reader_renders_them():
    pytest.importorskip("inspect_ai")
    from inspect_ai.model import (
        ChatMessageAssistant,
        ChatMessageSystem,
        ChatMessageTool,
        ChatMessageUser,
        ContentText,
    )
    from inspect_ai.tool import ToolCall, ToolCallError

    from calimon.data.inspect_log import task_input, trajectory_parts
    from calimon.data.trajectory import render_parts

    inspect_msgs = [
        ChatMessageSystem(content="You are an agent."),
        ChatMessageUser(content="Fix the failing test."),
        ChatMessageAssistant(content="Let me look.", tool_calls=[
            ToolCall(id="c1", function="bash", arguments={"cmd": "ls tests", "timeout": 5})]),
        ChatMessageTool(content="test_add.py", tool_call_id="c1", function="bash"),
        ChatMessageAssistant(content=[ContentText(text="Done.")]),
    ]
    expected = (task_input(inspect_msgs[:2]), render_parts(trajectory_parts(inspect_msgs))[0])
    dumped = [m.model_dump(mode="json") for m in inspect_msgs]
    assert transcript(_messages(dumped)) == expected
    assert transcript(_messages(OPENAI)) == expected
    assert "[tool result: bash]\ntest_add.py" in expected[1] and "timeout: 5" in expected[1]
    err = ChatMessageTool(content="", tool_call_id="c1", function="bash",
                          error=ToolCallError(type="timeout", message="took too long"))
    both = inspect_msgs[:3] + [err]
    got = transcript(_messages([m.model_dump(mode="json") for m in both]))
    assert got[1] == render_parts(trajectory_parts(both))[0]
    assert "error (timeout): took too long" in got[1]


def test_a_trajectory_text_only_grows_as_messages_are_added():
    msgs = _messages(OPENAI)
    texts = [transcript(msgs[:n])[1] for n in range(3, len(msgs) + 1)]
    assert all(b.startswith(a) and len(b) > len(a) for a, b in zip(texts, texts[1:], strict=False))


def test_arguments_that_are_not_json_are_kept_as_text():
    msgs = _messages([{"role": "user", "content": "t"}, {"role": "assistant", "tool_calls": [
        {"id": "c", "function": {"name": "sh", "arguments": "ls -la"}}]}])
    assert "arguments are not a JSON object: ls -la" in transcript(msgs)[1]
    assert transcript(msgs, request="own task")[0] == "own task"


# -- the decision log ------------------------------------------------------------------------

def _entry(rid: str, decision: str = "pass", **kw) -> LoggedDecision:
    response = {"request_id": rid, "status": "ok", "decision": decision, "action": "auto_pass",
                "audit": False, "p_raw": 0.1, "p_cal": None, "policy_hash": "h",
                "model_revision": "r"}
    return LoggedDecision(rid, "score", kw.pop("digest", "d"), response, **kw)


def test_the_log_keeps_the_first_answer_of_an_id_and_survives_reopening(tmp_path):
    path = tmp_path / "log" / "decisions.sqlite"
    log = SQLiteDecisionLog(path)
    first = log.record(_entry("a", "pass"))
    again = log.record(_entry("a", "block", digest="other"))
    assert first.response["decision"] == again.response["decision"] == "pass"
    assert again.request_sha256 == "d" and log.count() == 1
    log.record(_entry("s1", session_id="sess", step=0))
    log.close()
    log.close()  # twice is fine
    reopened = open_log(f"sqlite:///{path}")
    assert reopened.count() == 2 and reopened.lookup("nope") is None
    got = reopened.lookup("s1")
    assert (got.session_id, got.step, got.response["p_cal"]) == ("sess", 0, None)
    reopened.close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert schema_version(db) == SCHEMA.version == 4
    assert db.execute("SELECT decision FROM decisions WHERE request_id='a'").fetchone() == \
        ("pass",)


def test_the_log_schema_uses_only_types_postgresql_has():
    types = {line.split()[1].rstrip(",") for line in TABLE_SQL.strip().splitlines()[1:-1]}
    assert types <= {"TEXT", "INTEGER", "DOUBLE"}
    with pytest.raises(InputError, match="PostgreSQL"):
        open_log("postgresql://localhost/calimon")
    with pytest.raises(InputError, match="sqlite"):
        open_log("mysql://localhost/x")


def test_a_logged_answer_round_trips_exactly(tmp_path):
    log = SQLiteDecisionLog(tmp_path / "d.sqlite")
    e = _entry("x")
    e.response["p_raw"] = 0.1234567890123456789
    assert log.record(e).response == json.loads(json.dumps(e.response))


# -- metrics, exposure -----------------------------------------------------------------------

def test_metrics_are_prometheus_text():
    m = Metrics(forward_calls=lambda: 7)
    m.requests.inc("/v1/score", "200")
    m.decisions.inc("block", by=2)
    m.latency.observe(0.3, "/v1/score")
    m.latency.observe(100.0, "/v1/score")
    text = m.render()
    assert 'calimon_requests_total{route="/v1/score",code="200"} 1' in text
    assert 'calimon_decisions_total{decision="block"} 2' in text
    assert 'calimon_request_seconds_bucket{route="/v1/score",le="0.25"} 0' in text
    assert 'calimon_request_seconds_bucket{route="/v1/score",le="0.5"} 1' in text
    assert 'calimon_request_seconds_bucket{route="/v1/score",le="+Inf"} 2' in text
    assert 'calimon_request_seconds_count{route="/v1/score"} 2' in text
    assert "# TYPE calimon_forward_calls_total counter\ncalimon_forward_calls_total 7" in text
    for name in ("calimon_queue_depth", "calimon_truncations_total", "calimon_errors_total",
                 "calimon_session_cache_bytes"):
        assert f"# TYPE {name} " in text


def test_a_server_beyond_loopback_needs_a_key(tmp_path, monkeypatch):
    monkeypatch.delenv("CALIMON_API_KEY", raising=False)
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.2")
    ServeSettings(policy=tmp_path, host="127.0.0.1").check_exposure()
    with pytest.raises(InputError, match="CALIMON_API_KEY"):
        ServeSettings(policy=tmp_path, host="0.0.0.0").check_exposure()
    monkeypatch.setenv("CALIMON_API_KEY", "k")
    ServeSettings(policy=tmp_path, host="0.0.0.0").check_exposure()


def test_the_cli_refuses_to_listen_beyond_loopback_without_a_key(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from calimon.cli import app

    monkeypatch.delenv("CALIMON_API_KEY", raising=False)
    r = CliRunner().invoke(app, ["serve", str(tmp_path / "p.yaml"), "--host", "0.0.0.0"])
    assert r.exit_code == 2 and "CALIMON_API_KEY" in r.output


def test_without_fastapi_the_error_gives_the_install_line(monkeypatch):
    import builtins

    from calimon.errors import MissingExtraError
    from calimon.serve.runner import require_extra

    real = builtins.__import__

    def no_fastapi(name, *args, **kwargs):
        if name == "fastapi":
            raise ImportError("no fastapi", name="fastapi")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_fastapi)
    with pytest.raises(MissingExtraError, match=r"calimon\[serve\]"):
        require_extra()


def test_the_serve_extra_declares_what_calimon_serve_imports():
    import sys
    import tomllib
    from pathlib import Path

    from packaging.requirements import Requirement
    from test_packaging import imported_roots

    root = Path(__file__).resolve().parents[1]
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    # fastapi-offline: the /docs page's Swagger UI assets, read as package data; httptools and
    # uvloop: what uvicorn runs when they are installed (named in the server's banner)
    assert {Requirement(r).name for r in extras["serve"]} == {
        "fastapi", "fastapi-offline", "uvicorn", "httptools", "uvloop"}
    declared = {Requirement(r).name for r in project["dependencies"]}
    declared |= {Requirement(r).name for reqs in extras.values() for r in reqs}
    third = set()
    for path in (root / "calimon" / "serve").glob("*.py"):
        third |= imported_roots(path) - set(sys.stdlib_module_names) - {"calimon"}
    assert third - {"starlette"} <= declared  # starlette is FastAPI's own dependency


def test_the_service_key_never_reaches_a_backend_server(tmp_path, monkeypatch):
    """The http and chat backends send $CALIMON_API_KEY to their model server; the service
    keeps its key and takes the variable out of the environment before any backend is made."""
    import os

    from calimon.serve.runner import isolate_key

    monkeypatch.setenv("CALIMON_API_KEY", "service-secret")
    kept = isolate_key(ServeSettings(policy=tmp_path))
    assert kept.key() == "service-secret" and "CALIMON_API_KEY" not in os.environ
    monkeypatch.delenv("CALIMON_API_KEY", raising=False)
    assert isolate_key(ServeSettings(policy=tmp_path)).key() is None
