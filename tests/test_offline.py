"""A remote backend that cannot be reached is an error naming its URL, even when every reading is
in the store; ``--offline`` answers from the store alone (saying so first) and refuses a reading
the store lacks; the model is never called and the server never contacted."""

from __future__ import annotations

import json
import socket

import pytest
from conftest import toy_samples
from fakes_http import FakeServer
from typer.testing import CliRunner

from calimon.cli import app
from calimon.errors import BackendError
from calimon.samples import write_samples
from calimon.scoring.backends import BACKENDS, Constrained, Remote, build_backend, supports
from calimon.scoring.backends.http_client import JsonClient, reach
from calimon.scoring.backends.offline import OfflineReadingMissing, is_offline, offline_backend
from calimon.scoring.engines import MonitorSpec


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _curve(tmp_path, *extra):
    bench = tmp_path / "toy.jsonl"
    if not bench.exists():
        write_samples(toy_samples(12), bench)
    return CliRunner().invoke(app, [
        "curve", "--model", "smollm2-135m", "--benchmark", str(bench), "--no-binary",
        "--n-boot", "10", "--store", str(tmp_path / "s.sqlite"), "--quiet", *extra])


def _error_line(output: str) -> str:
    (line,) = [ln for ln in output.splitlines() if ln.startswith("calimon: error:")]
    return line


def test_an_unreachable_server_is_an_error_unless_offline_and_all_stored(smol, tmp_path,
                                                                          monkeypatch):
    monkeypatch.setitem(BACKENDS, "stand-in", "test_engine_ray:StandInBackend")
    url = f"http://127.0.0.1:{closed_port()}/v1"
    # every reading of the first 8 samples in the store (the store key names no backend)
    r = _curve(tmp_path, "--backend", "stand-in", "--limit", "8", "--out", str(tmp_path / "a"))
    assert r.exit_code == 0, r.output
    http = ["--backend", "http", "--base-url", url, "--limit", "8"]
    r = _curve(tmp_path, *http, "--out", str(tmp_path / "b"))
    assert r.exit_code == 5, r.output  # ExitCode.UNREACHABLE
    line = _error_line(r.output)
    assert f"cannot reach the http server at {url}" in line and "--offline" in line
    assert not (tmp_path / "b" / "curve.json").exists()

    r = _curve(tmp_path, *http, "--offline", "--out", str(tmp_path / "c"))
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[0] == (
        f"--offline: 8 of 8 readings from the run store; the http server at {url} was not "
        "contacted")
    doc = json.loads((tmp_path / "c" / "curve.json").read_text())
    assert doc["settings"]["offline"] is True and doc["timing"]["model_calls"] == 0

    # a reading the store lacks: an error, no call made
    r = _curve(tmp_path, *http, "--offline", "--limit", "12", "--out", str(tmp_path / "d"))
    assert r.exit_code == 2, r.output
    line = _error_line(r.output)
    assert "--offline: this run needs readings the run store does not hold" in line
    assert f"the http server at {url} was not called" in line
    assert not (tmp_path / "d" / "curve.json").exists()


def test_score_says_offline_first_and_a_local_model_is_left_alone(smol, tmp_path, monkeypatch):
    monkeypatch.setitem(BACKENDS, "stand-in", "test_engine_ray:StandInBackend")
    bench = write_samples(toy_samples(4), tmp_path / "toy.jsonl")
    args = ["score", "--model", "smollm2-135m", "--backend", "stand-in", "--benchmark",
            str(bench), "--store", str(tmp_path / "s.sqlite"), "--quiet"]
    r = CliRunner().invoke(app, [*args, "--offline"])
    assert r.exit_code == 2 and "the model smollm2-135m was not called" in r.output, r.output
    assert CliRunner().invoke(app, args).exit_code == 0
    r = CliRunner().invoke(app, [*args, "--offline"])
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[0] == ("--offline: 8 of 8 readings from the run store; the "
                                        "model was not called")
    assert "model calls 0" in r.output


def test_every_scoring_command_takes_offline():
    for command in ("curve", "score", "robustness", "spans"):
        r = CliRunner().invoke(app, [command, "--help"])
        assert "--offline" in r.output, command


def test_the_offline_wrapper_passes_everything_but_model_calls(smol, monkeypatch):
    monkeypatch.setitem(BACKENDS, "stand-in", "test_engine_ray:StandInBackend")
    spec = MonitorSpec(model="smollm2-135m", backend="stand-in", offline=True)
    be = build_backend(spec)
    assert is_offline(be) and type(be).name == "stand-in" and be.forward_calls == 0
    assert be.model_ref.name == "smollm2-135m" and len(be.tokenizer) > 0
    for call in ("next_token_logprobs", "generate", "capture", "model"):
        with pytest.raises(OfflineReadingMissing, match="--offline"):
            getattr(be, call)
    assert MonitorSpec.from_json(spec.to_json()).offline  # Ray actors rebuild it offline
    be.close()  # the shared backend underneath stays loaded
    assert not is_offline(build_backend(MonitorSpec(model="smollm2-135m", backend="stand-in")))


def test_capabilities_read_through_the_wrapper(smol):
    from calimon.scoring.backends.http_backend import HTTPBackend

    wrapped = offline_backend(HTTPBackend(smol, "http://127.0.0.1:1/v1"))
    assert supports(wrapped, Remote) and supports(wrapped, Constrained)


def test_reach_is_any_answer_and_names_a_refused_connection():
    with FakeServer([(200, {}, 0.0)]) as srv:
        assert reach(JsonClient(srv.url)) is None
        assert reach(JsonClient(srv.url), endpoint="no/such") is None  # a GET the server answers
    problem = reach(JsonClient(f"http://127.0.0.1:{closed_port()}/v1", sleep=lambda s: None))
    assert problem is not None and "refused" in problem.lower()


def test_a_study_checks_a_remote_server_when_it_builds_its_backend(smol):
    from calimon.scoring.backends import drop_backends

    url = f"http://127.0.0.1:{closed_port()}/v1"
    spec = MonitorSpec(model="smollm2-135m", backend="http", options={"base_url": url})
    assert build_backend(spec).base_url == url  # the factory itself contacts nothing
    with pytest.raises(BackendError, match=f"cannot reach the http server at {url}"):
        spec.build_backend()
    with pytest.raises(BackendError):  # every study checks again
        spec.build_backend()
    offline = MonitorSpec(model="smollm2-135m", backend="http", options={"base_url": url},
                          offline=True)
    assert is_offline(offline.build_backend())  # offline: not contacted, no error
    with FakeServer([(200, {}, 0.0)]) as srv:
        live = MonitorSpec(model="smollm2-135m", backend="http", options={"base_url": srv.url})
        assert not is_offline(live.build_backend())
    drop_backends()
