"""The parts of `calimon serve --replicas` that need no Ray: what it refuses, what replicas are
sent, and the header naming the replica. The deployment itself, on Ray Serve with a replica
killed under load, is tests/test_serve_ray.py (marker ray)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from calimon.errors import InputError
from calimon.serve import ServeSettings
from calimon.serve.ray_serve import REPLICA_HEADER, Replicas, _Tagged, check, shipped


def test_replicas_need_a_postgres_log_and_a_key_beyond_loopback(tmp_path, monkeypatch):
    monkeypatch.delenv("CALIMON_API_KEY", raising=False)
    with pytest.raises(InputError, match="must be PostgreSQL"):
        check(ServeSettings(policy=tmp_path, log=str(tmp_path / "d.sqlite")))
    url = "postgresql://u@db/x"
    check(ServeSettings(policy=tmp_path, log=url))
    with pytest.raises(InputError, match="CALIMON_API_KEY"):
        check(ServeSettings(policy=tmp_path, log=url, host="0.0.0.0"))
    for bad in (0, -1, True):
        with pytest.raises(InputError, match="replicas"):
            Replicas(count=bad)
    with pytest.raises(InputError, match="cpus_per_replica"):
        Replicas(count=2, cpus=0)


def test_the_cli_refuses_replicas_on_sqlite_before_starting_anything(tmp_path, monkeypatch):
    from calimon.cli import app

    monkeypatch.delenv("CALIMON_API_KEY", raising=False)
    result = CliRunner().invoke(app, ["serve", str(tmp_path / "policy.yaml"), "--replicas", "2",
                                      "--log", str(tmp_path / "d.sqlite")])
    assert result.exit_code == 2
    assert "must be PostgreSQL" in result.output


def test_replicas_get_absolute_paths_and_the_key_read_here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CALIMON_API_KEY", "from-env")
    s = shipped(ServeSettings(policy=Path("p.yaml"), calibration_map=Path("m/platt.json"),
                              log="postgresql://u@db/x"))
    assert s.policy == tmp_path / "p.yaml" and s.calibration_map == tmp_path / "m/platt.json"
    assert s.api_key == "from-env"
    assert s.deployment == "calimon"  # replicas sum their /metrics under one name
    named = shipped(ServeSettings(policy=Path("p.yaml"), log="postgresql://u@db/x",
                                  deployment="eu-1"))
    assert named.deployment == "eu-1"
    with pytest.raises(InputError, match="1 to 100 characters"):
        ServeSettings(policy=Path("p.yaml"), deployment="")
    monkeypatch.delenv("CALIMON_API_KEY")
    none = shipped(ServeSettings(policy=Path("p.yaml"), log="postgresql://u@db/x"))
    monkeypatch.setenv("CALIMON_API_KEY", "a replica's own")  # not the one the driver read
    assert none.api_key == "" and none.key() is None and none.calibration_map is None


def test_every_answer_names_its_replica():
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"ok"})

    async def main():
        transport = httpx.ASGITransport(app=_Tagged(app, "r-abc"))
        async with httpx.AsyncClient(transport=transport, base_url="http://x") as c:
            return await c.get("/healthz")

    r = asyncio.run(main())
    assert r.text == "ok" and r.headers[REPLICA_HEADER] == "r-abc"
    assert r.headers["content-type"] == "text/plain"


def test_outside_a_replica_the_name_is_the_pid():
    from calimon.serve.ray_serve import replica_name

    assert replica_name() == f"pid-{os.getpid()}"
