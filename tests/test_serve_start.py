"""A real `calimon serve --keys FILE --review` process on loopback, with no model: the monitor is
the stand-in chat API of tests/review_server.py. What it says when it starts (the keys it
enforces, never a key; "listening on" only once it listens), a port in use found before the
monitor loads, and hostile bodies over HTTP answered 4xx with no traceback in its output (the
same cases in this process: tests/test_serve_input.py)."""

from __future__ import annotations

import json
import socket
import subprocess

import httpx
import pytest
from review_fakes import KEYS, keys_file, policy
from review_server import chat_flags, chat_server, env, start
from serve_server import CALIMON, ROOT, free_port

from calimon.serve.body import MAX_DEPTH


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One server for the module, and its stand-in monitor's API."""
    tmp = tmp_path_factory.mktemp("serve-start")
    with chat_server() as api:
        server = start(policy(tmp), tmp, free_port(), api.url, "--keys", str(keys_file(tmp)))
        server.key = KEYS["ada"]
        try:
            yield server
        finally:
            server.stop()


def _lines(server) -> list[str]:
    return server.log_text().splitlines()


def test_the_banner_names_the_keys_it_enforces_and_never_a_key(served):
    """It said 'API key not set' while it enforced the key file."""
    said = [line for line in _lines(served) if line.startswith("calimon serve: API key")]
    assert said == ["calimon serve: API keys required on every route but /healthz: 2 key(s) "
                    f"of 2 name(s) from {served.output.parent / 'keys.txt'}; "
                    "reviewers sign in at /review/login"]
    assert not any(key in served.log_text() for key in KEYS.values())
    assert httpx.get(f"{served.url}/v1/info", timeout=30).status_code == 401  # as it says
    with served.client() as c:
        assert c.get("/v1/info").status_code == 200


def test_the_banner_names_the_http_stack_uvicorn_runs(served, monkeypatch):
    """The serve extra's httptools and uvloop are what uvicorn picks; without them the server
    says which pair it fell back to and how to get the faster one."""
    from calimon.serve import runner

    assert "calimon serve: HTTP httptools, event loop uvloop" in _lines(served)
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    assert runner.http_stack() == ("HTTP h11, event loop asyncio (install 'calimon[serve]' "
                                   "for httptools and uvloop, the faster pair)")


def test_listening_is_said_once_uvicorn_listens(served):
    """It was said before the server started (and before a port in use was found)."""
    lines = _lines(served)
    said = [i for i, line in enumerate(lines) if "calimon serve: listening on" in line]
    started = [i for i, line in enumerate(lines) if "Application startup complete" in line]
    assert len(said) == 1 and len(started) == 1 and said[0] > started[0], lines
    assert lines[said[0]].endswith(f"{served.url} (API: /docs; health: /healthz; "
                                   "metrics: /metrics)")


@pytest.mark.parametrize("backend", ["chat", "transformers"])
def test_a_port_in_use_stops_the_server_before_the_monitor_loads(tmp_path, backend):
    """It was found after the monitor loaded and warmed (exit 3, after 'listening on'). On the
    transformers backend the policy's model ('stand-in') is not on this machine: the port's
    error comes first, so nothing was loaded before it."""
    with socket.socket() as taken, chat_server() as api:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cmd = [str(CALIMON), "serve", str(policy(tmp_path)), "--port", str(port), "--log",
               str(tmp_path / "decisions.sqlite"), "--review", "--review-store",
               str(tmp_path / "review.sqlite"), "--keys", str(keys_file(tmp_path)),
               *(chat_flags(api.url) if backend == "chat" else [])]
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env(tmp_path),
                              timeout=300)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"calimon: error: field 'port': cannot listen on 127.0.0.1:{port}: Address already in "
        "use: stop what listens there or choose another --port"]
    assert done.stdout == ""


def test_hostile_bodies_are_4xx_naming_the_field_with_no_traceback(served):
    """Tool-call arguments 300 deep were a 500 with a traceback on stderr."""
    call = {"id": "c0", "type": "function", "function": {"name": "bash", "arguments": {}}}
    deep: dict = {}
    for _ in range(300):
        deep = {"a": deep}
    call["function"]["arguments"] = deep
    messages = [{"role": "user", "content": "List the files."},
                {"role": "assistant", "content": "Listing.", "tool_calls": [call]}]
    cases = [("/v1/score", json.dumps({"messages": messages}).encode(), 400,
              "messages.1.tool_calls.0.function.arguments" + ".a" * (MAX_DEPTH - 6)),
             ("/v1/score", b'{"request": "caf\xe9", "response": "x"}', 400, "body"),
             ("/v1/score", b'{"request": ' + b"[" * 5000 + b"]" * 5000 + b"}", 400, "body"),
             ("/v1/score", b'{"request": "t", "response": "x", "id": NaN}', 400, "id"),
             ("/v1/sessions/s/steps", b'{"step": "0", "messages": [{"role": "user", '
              b'"content": "x"}]}', 422, "step"),
             ("/v1/sessions/s/steps", b'{"step": 1e30, "messages": [{"role": "user", '
              b'"content": "x"}]}', 422, "step"),
             ("/v1/review/labels", b'{"label_id": "label-0001", "item_id": "' + b"0" * 24
              + b'", "label": "benign", "second_review": Infinity}', 400, "second_review")]
    with served.client() as c:
        for path, raw, status, field in cases:
            r = c.post(path, content=raw, headers={"content-type": "application/json"})
            assert r.status_code == status, (path, raw[:60], r.text)
            assert r.json()["error"]["field"] == field, r.text
        assert c.post("/v1/score", json={"request": "t", "response": "x"}).status_code == 200
    out = served.log_text()
    assert "Traceback" not in out and "internal error" not in out


def test_the_auth_line_says_what_the_gate_enforces(tmp_path):
    from types import SimpleNamespace

    from calimon.serve import ServeSettings
    from calimon.serve.keys import Authenticator, KeyStore
    from calimon.serve.runner import auth_line

    path, empty = keys_file(tmp_path), tmp_path / "none.txt"
    empty.write_text("# nobody yet\n")

    def line(api_key: str, keys=None, sessions=None) -> str:
        settings = ServeSettings(policy=tmp_path / "p.yaml", api_key=api_key, keys_file=keys)
        auth = None if keys is None else Authenticator(KeyStore.load(keys, api_key), sessions)
        return auth_line(SimpleNamespace(settings=settings, auth=auth))

    every = "API keys required on every route but /healthz"
    assert line("") == "API key not set: no authentication (this machine only)"
    assert line("k" * 20) == ("API key required on every route but /healthz "
                              "($CALIMON_API_KEY: one key)")
    assert line("", path) == f"{every}: 2 key(s) of 2 name(s) from {path}"
    assert line("k" * 20, path, sessions=object()) == (
        f"{every}: 3 key(s) of 3 name(s) from {path} and $CALIMON_API_KEY (as 'service'); "
        "reviewers sign in at /review/login")
    assert line("", empty) == f"{every}, and {empty} holds none: all refused"
    assert not any("k" * 20 in line("k" * 20, keys) for keys in (None, path))
